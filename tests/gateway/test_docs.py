"""docs/gateway.md: its configuration starts a real gateway, and its curl examples print
what the page says they print."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.doors.processes import serving_port
from tests.nats.server import NatsServer
from tests.support.doc_examples import DOCS
from tests.support.servers import LOOPBACK, stop_process
from toolbus.runtime import _FIRST_PARTY_SERVICES

pytestmark = pytest.mark.broker

PAGE = DOCS / "gateway.md"
BLOCK = re.compile(
    r"<!-- gateway-doc: (?P<name>\S+) -->\n```\w+\n(?P<code>.*?)```\n"
    r"(?:\n```text\n(?P<output>.*?)```)?",
    re.S,
)
DOC_BROKER = "nats://127.0.0.1:4222"
DOC_LISTEN = "127.0.0.1:8080"
BIN = Path(sys.executable).parent


def blocks() -> list[re.Match[str]]:
    return list(BLOCK.finditer(PAGE.read_text(encoding="utf-8")))


def _process(argv: list[str], cwd: Path, env: dict[str, str], log: str) -> subprocess.Popen[bytes]:
    out = (cwd / log).open("wb")
    return subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)


def _wait_until_serving(key: str, process: subprocess.Popen[bytes], log: Path) -> str:
    """Ready, and the joke service answering: what the page asks the reader to start.

    Returns the gateway's address (HOST:PORT), read from what it said once it listened.
    """
    deadline = time.monotonic() + 60
    with httpx.Client(timeout=5) as http:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                pytest.fail(f"the gateway exited:\n{log.read_text()}")
            port = serving_port(log.read_text())
            if port is not None:
                with contextlib.suppress(httpx.TransportError):
                    answer = http.post(
                        f"http://{LOOPBACK}:{port}/v1/tools/roast/call",
                        json={"groups": ["admin"], "arguments": {"topic": "x"}},
                        headers={"Authorization": f"Bearer {key}"},
                    )
                    if answer.status_code == 200:
                        return f"{LOOPBACK}:{port}"
            # Polling a foreign process over HTTP is its only readiness signal.
            time.sleep(0.1)
    pytest.fail(f"the gateway did not serve within 60 s:\n{log.read_text()}")


@pytest.fixture
def documented_gateway(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    nats = NatsServer(tmp_path / "nats")
    (tmp_path / "nats").mkdir()
    files = {m["name"]: m["code"] for m in blocks() if m["name"] != "run"}
    assert set(files) == {"toolbus.toml", "config.json"}
    (tmp_path / "ops.key").write_text("ops-key-0123456789abcdefghij\n")
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "ALICE_KEY": "alice-key-0123456789abcdefghij",
        "TOOLBUS_JWT_SECRET": "jwt-secret-0123456789abcdefghijklmnopqrstuvwxyz",
    }
    for name in ("TOOLBUS_BROKER", "TOOLBUS_CONFIG"):
        env.pop(name, None)
    with nats.running():
        for name, text in files.items():
            # Port 0: the system chooses one as the gateway binds, and it says which.
            text = text.replace(DOC_BROKER, nats.url).replace(DOC_LISTEN, f"{LOOPBACK}:0")
            (tmp_path / name).write_text(text)
        service = _process(
            [str(BIN / "toolbus"), "serve", "joke-service"], tmp_path, env, "joke.log"
        )
        gateway = _process([str(BIN / "toolbus"), "gateway"], tmp_path, env, "gateway.log")
        try:
            listen = _wait_until_serving(
                "ops-key-0123456789abcdefghij", gateway, tmp_path / "gateway.log"
            )
            yield listen, env
        finally:
            stop_process(gateway)
            stop_process(service)


@pytest.mark.slow
def test_the_curl_examples_print_what_the_page_says(
    documented_gateway: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    listen, env = documented_gateway
    examples = [m for m in blocks() if m["name"] == "run"]
    assert len(examples) >= 5
    script = ["set -euo pipefail"]
    for index, example in enumerate(examples):
        # A newline first: curl's output may not end with one.
        script += [f"printf '\\n@@@ {index}\\n'", example["code"].replace(DOC_LISTEN, listen)]
    result = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    printed = re.split(r"^@@@ \d+\n", result.stdout, flags=re.M)[1:]
    for example, output in zip(examples, printed, strict=True):
        if example["output"] is not None:
            assert _lines(output) == _lines(example["output"]), example["code"]


def _lines(text: str) -> list[str]:
    # Trailing spaces (an empty SSE "data: " line) do not survive editors; compare without.
    return [line.rstrip() for line in text.strip("\n").splitlines()]


def test_the_install_line_brings_every_service_the_page_serves() -> None:
    text = PAGE.read_text(encoding="utf-8")
    [install] = [line for line in text.splitlines() if line.startswith("pip install")]
    served = set(re.findall(r"^toolbus serve (\S+)", text, re.M))

    assert served, "the page serves no service"
    assert "--find-links" in install and "toolbus[gateway" in install
    for service in served:
        assert _FIRST_PARTY_SERVICES[service] in install.split(), service
