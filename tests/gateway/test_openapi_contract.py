"""The gateway keeps the promises of its own /openapi.json: schemathesis (every check)
against the live gateway under uvicorn on 127.0.0.1."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from tests.gateway.support import KEYS, RunningGateway
from tests.support.groups import needs_group

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    needs_group("fuzz", "-m slow tests/gateway/test_openapi_contract.py"),
]

SCHEMATHESIS = str(Path(sys.executable).with_name("schemathesis"))


# Every phase (examples, coverage, fuzzing, stateful) with few examples each: about two
# minutes on a loaded two-core machine.
@pytest.mark.timeout(600)
async def test_schemathesis_finds_nothing_the_document_does_not_say(
    served: RunningGateway, tmp_path: Path
) -> None:
    argv = [
        SCHEMATHESIS,
        "run",
        f"{served.url}/openapi.json",
        "--checks",
        "all",
        "--header",
        f"Authorization: Bearer {KEYS['bob']}",
        "--max-examples",
        "5",
        "--seed",
        "1",
        "--generation-deterministic",
        "--request-timeout",
        "30",
        "--no-color",
    ]
    with anyio.fail_after(600):
        done = await anyio.run_process(argv, cwd=tmp_path, check=False)

    report = done.stdout.decode() + done.stderr.decode()
    assert done.returncode == 0, report
