"""docs/trustgraph.md: its example runs against TrustGraph's own service as the page says."""

from __future__ import annotations

import subprocess
from pathlib import Path

import anyio
import pytest

from tests.support.doc_examples import DOCS, assert_runs_as_documented, examples
from tests.trustgraph.environments import trustgraph_python

PAGE = DOCS / "trustgraph.md"

pytestmark = [pytest.mark.anyio, pytest.mark.broker, pytest.mark.slow]


async def test_the_toolbus_client_gets_the_trustgraph_service_s_answer(
    pulsar_url: str, tmp_path: Path
) -> None:
    service_example, client_example = examples(PAGE)
    assert service_example.name == "tg_echo_service.py" and client_example.output is not None
    (tmp_path / service_example.name).write_text(service_example.code, encoding="utf-8")
    python = await anyio.to_thread.run_sync(trustgraph_python, "2.11.1")
    # The command line the page gives, pointed at the test broker.
    command = [str(python), service_example.name, "-p", pulsar_url, "-t", "echo"]
    service = await anyio.open_process(
        [*command, "--no-metrics"], cwd=tmp_path, stderr=subprocess.PIPE
    )
    try:
        assert service.stderr is not None
        seen = b""
        with anyio.fail_after(60):
            while b"Tool service echo-service started" not in seen:
                try:
                    seen += await service.stderr.receive()
                except anyio.EndOfStream:
                    raise AssertionError(f"TrustGraph's service ended: {seen!r}") from None
        await anyio.to_thread.run_sync(
            lambda: assert_runs_as_documented(
                client_example, tmp_path, env={"PULSAR_URL": pulsar_url}, timeout=60
            )
        )
    finally:
        service.terminate()
        await service.aclose()


def test_the_page_is_in_the_readme() -> None:
    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    assert "(docs/trustgraph.md)" in readme
