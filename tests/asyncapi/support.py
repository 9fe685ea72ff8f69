"""Validators of AsyncAPI documents: the published JSON Schema, and the official parser."""

from __future__ import annotations

import json
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from tests.support.real_parts import NODE_PACKAGES, requires_node_package

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "tests" / "data" / "asyncapi" / "asyncapi-3.0.0.schema.json"
NODE_DIR = NODE_PACKAGES
#: The parser's severities: 0 error, 1 warning, 2 information, 3 hint.
WARNING = 1


@cache
def _validator() -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(json.loads(SCHEMA.read_text(encoding="utf-8")))


def schema_problems(document: dict[str, Any]) -> list[str]:
    """What the AsyncAPI 3.0 JSON Schema finds wrong with ``document`` (empty: valid)."""
    return [
        f"{'/'.join(map(str, error.absolute_path))}: {error.message[:300]}"
        for error in _validator().iter_errors(document)
    ]


#: Marks a test that runs :func:`parser_problems`.
needs_parser = requires_node_package("@asyncapi/parser", "the official AsyncAPI parser")


def parser_problems(*documents: Path) -> dict[str, list[dict[str, Any]]]:
    """The official parser's errors and warnings about each document file, by file name."""
    result = subprocess.run(
        ["node", str(NODE_DIR / "asyncapi-validate.mjs"), *map(str, documents)],
        cwd=NODE_DIR,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        raise AssertionError(f"the AsyncAPI parser failed:\n{result.stderr}")
    diagnostics: dict[str, list[dict[str, Any]]] = json.loads(result.stdout)
    return {
        Path(file).name: [d for d in found if d["severity"] <= WARNING]
        for file, found in diagnostics.items()
    }
