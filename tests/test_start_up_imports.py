"""What starting toolbus imports: the start-up budget, held by what is loaded, not by timing.

Each check runs a fresh interpreter (this one has imported everything) and reads
``sys.modules`` afterwards. The figures these keep are in docs/performance.md
(``tests/benchmarks/bench_startup.py``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

#: Libraries that take tens of milliseconds or more to import, or that only some
#: deployments use: each is imported where it is used, never to start.
HEAVY = (
    "prometheus_client",
    "opentelemetry",
    "cryptography",
    "joserfc",
    "httpx",
    "jsonschema",
    "yaml",
    "typer",
    "pluggy",
    "nats",
    "mcp",
    "fastapi",
)


def imported_by(code: str, cwd: Path) -> tuple[set[str], str]:
    """The top-level packages ``code`` leaves imported in a fresh interpreter, and its output."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=cwd
    )
    *output, modules = done.stdout.splitlines()
    return {name.partition(".")[0] for name in json.loads(modules)}, "\n".join(output)


def test_import_toolbus_loads_none_of_its_parts(tmp_path: Path) -> None:
    # Public names load from their modules on first use.
    loaded, _ = imported_by("import toolbus", tmp_path)

    assert loaded.isdisjoint({*HEAVY, "pydantic", "anyio", "asyncio"}), sorted(loaded)


def test_a_program_calling_tools_loads_no_heavy_library(tmp_path: Path) -> None:
    loaded, _ = imported_by(
        "from toolbus import ToolServiceClient, running, tool_service", tmp_path
    )

    assert loaded.isdisjoint({*HEAVY} - {"opentelemetry"}), sorted(loaded & {*HEAVY})


def test_toolbus_version_loads_no_command_and_no_library(tmp_path: Path) -> None:
    loaded, output = imported_by(
        "import sys\nsys.argv = ['toolbus', '--version']\nfrom toolbus.cli import main\nmain()",
        tmp_path,
    )

    assert output.splitlines()[0].startswith("toolbus ")
    assert "toolbus-joke" in output  # the plugin distributions too
    assert loaded.isdisjoint({*HEAVY, "pydantic", "anyio", "asyncio"}), sorted(loaded)


def test_tool_plugins_without_toolsets_load_no_http_client_nor_parsers(tmp_path: Path) -> None:
    # Every command that loads tool plugins (toolbus serve among them) pays for what
    # they import; the OpenAPI plugin needs httpx and its parsers only for toolsets
    # that toolbus.toml declares (none here).
    loaded, _ = imported_by(
        "from toolbus.plugins import load_tool_plugins\nload_tool_plugins()", tmp_path
    )

    assert loaded.isdisjoint({"httpx", "jsonschema", "yaml"}), sorted(loaded)
