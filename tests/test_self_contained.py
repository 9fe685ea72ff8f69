"""The repository speaks for itself: no references to documents it does not ship."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).parent.parent
SEARCHED = ["core", "adapters", "plugins", "tests", "docs", "README.md", "pyproject.toml"]
SUFFIXES = {".py", ".md", ".toml"}
# Built from pieces, so that this file does not match itself.
# A section sign is fine after a public standard ("RFC 9110 \u00a711.1"), not otherwise.
OUTSIDE = re.compile(
    "|".join([r"DESIGN\.md", r"(?<!\d )\u00a7", r"\bthe issues?\b", r"wire-protocol page"])
)
# Installed packages, not ours (tests/node holds the Node clients the tests use).
IGNORED = {".venv", "node_modules"}
PAGE = re.compile(r"\bdocs/[\w/-]+\.md\b")


def files() -> Iterator[Path]:
    for name in SEARCHED:
        path = ROOT / name
        candidates = [path] if path.is_file() else path.rglob("*")
        for found in candidates:
            if found.suffix in SUFFIXES and found.is_file() and not IGNORED & set(found.parts):
                yield found


def test_nothing_cites_documents_that_are_not_in_the_repository() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in files()
        if path != Path(__file__)
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if OUTSIDE.search(line)
    ]

    assert found == []


def test_every_docs_page_named_in_the_code_and_docs_exists() -> None:
    missing = sorted(
        f"{path.relative_to(ROOT)}: {page}"
        for path in files()
        for page in PAGE.findall(path.read_text(encoding="utf-8"))
        # TrustGraph's own specifications, named as that repository's pages.
        if not page.startswith("docs/tech-specs/") and not (ROOT / page).is_file()
    )

    assert missing == []
