"""``toolbus agent serve`` and ``toolbus ask`` as real processes on NATS, with a tool process."""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path

import anyio
import pytest

from tests.nats.processes import ServeProcess, _stop, serve
from tests.nats.server import NatsServer
from tests.support.model_server import ModelServer
from tests.support.otlp import Collector

pytestmark = [pytest.mark.anyio, pytest.mark.broker, pytest.mark.slow]

TOOLBUS = str(Path(sys.executable).parent / "toolbus")


async def test_ask_gets_its_answer_from_an_agent_serve_process(
    nats_server: NatsServer, model_server: ModelServer, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:8]
    queues = [
        "--request-queue",
        f"non-persistent://tg/request/agent-{suffix}",
        "--response-queue",
        f"non-persistent://tg/response/agent-{suffix}",
    ]
    broker = ["--broker", nats_server.url]
    model_server.play(
        [
            {"calls": [{"name": "calculate", "arguments": {"expression": "6 * 7"}}]},
            {"text": "6 * 7 is 42."},
        ]
    )
    env = {**os.environ, "TOOLBUS_LLM": model_server.openai_url()}
    _permit_everyone_the_default_group(tmp_path)
    async with serve(["calculator"], nats_server.url, workdir=tmp_path):
        agent = await anyio.open_process(
            [TOOLBUS, "agent", "serve", *broker, *queues], cwd=tmp_path, env=env
        )
        served = ServeProcess(agent)
        try:
            async with anyio.create_task_group() as readers:
                readers.start_soon(served.read_stderr)
                with anyio.fail_after(60):
                    await served.wait_for("serving agent (scripted-gpt)")
                    asked = await anyio.run_process(
                        [TOOLBUS, "ask", "What is 6 * 7?", "--json", *broker, *queues],
                        cwd=tmp_path,
                        check=False,
                    )
                readers.cancel_scope.cancel()
        finally:
            await _stop(agent)

    assert asked.returncode == 0, asked.stderr.decode()
    events = [json.loads(line) for line in asked.stdout.decode().splitlines()]
    assert [e["chunk_type"] for e in events] == ["action", "observation", "answer"]
    assert events[1]["content"] == "42"
    assert events[-1]["content"] == "6 * 7 is 42." and events[-1]["end_of_stream"]
    assert agent.returncode == 0  # SIGTERM: a clean stop


@pytest.mark.parametrize("as_json", [False, True], ids=["plain", "json"])
async def test_ask_says_at_once_that_no_agent_service_answers(
    nats_server: NatsServer, tmp_path: Path, as_json: bool
) -> None:
    queue = f"non-persistent://tg/request/agent-{uuid.uuid4().hex[:8]}"
    command = [TOOLBUS, "ask", "Anyone?", "--broker", nats_server.url, "--request-queue", queue]
    # Well inside the default --timeout of 120 s, which it used to wait out.
    with anyio.fail_after(60):
        asked = await anyio.run_process(command + ["--json"] * as_json, cwd=tmp_path, check=False)

    assert asked.returncode == 1
    stdout, stderr = asked.stdout.decode(), asked.stderr.decode()
    said = f"no agent service answers on {queue!r} via {nats_server.url}"
    fix = "start one with 'toolbus agent serve --broker URL'"
    if as_json:
        assert stderr == ""
        [line] = stdout.splitlines()
        event = json.loads(line)
        assert event["chunk_type"] == "error" and event["error"]["type"] == "no-agent"
        assert said in event["content"] and fix in event["content"]
    else:
        assert stdout == ""
        [line] = stderr.splitlines()
        assert line.startswith(f"error: {said}") and line.endswith(fix)


async def test_agent_serve_exports_its_spans_to_the_collector_otel_names(
    nats_server: NatsServer, model_server: ModelServer, tmp_path: Path
) -> None:
    collector = Collector()
    suffix = uuid.uuid4().hex[:8]
    queues = [
        "--request-queue",
        f"non-persistent://tg/request/agent-{suffix}",
        "--response-queue",
        f"non-persistent://tg/response/agent-{suffix}",
    ]
    broker = ["--broker", nats_server.url]
    model_server.play(
        [
            {"calls": [{"name": "calculate", "arguments": {"expression": "6 * 7"}}]},
            {"text": "6 * 7 is 42."},
        ]
    )
    env = {
        **os.environ,
        "TOOLBUS_LLM": model_server.openai_url(),
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
        "OTEL_SERVICE_NAME": "my-agent",
    }
    _permit_everyone_the_default_group(tmp_path)
    try:
        async with serve(["calculator"], nats_server.url, workdir=tmp_path):
            agent = await anyio.open_process(
                [TOOLBUS, "agent", "serve", *broker, *queues], cwd=tmp_path, env=env
            )
            served = ServeProcess(agent)
            try:
                async with anyio.create_task_group() as readers:
                    readers.start_soon(served.read_stderr)
                    with anyio.fail_after(60):
                        await served.wait_for("serving agent (scripted-gpt)")
                        asked = await anyio.run_process(
                            [TOOLBUS, "ask", "What is 6 * 7?", *broker, *queues],
                            cwd=tmp_path,
                            check=False,
                        )
                    readers.cancel_scope.cancel()
            finally:
                await _stop(agent)  # SIGTERM: the batched spans are flushed
        assert asked.returncode == 0, asked.stderr.decode()
        path, export = await anyio.to_thread.run_sync(collector.requests.get, True, 30)
    finally:
        collector.close()

    assert path == "/v1/traces"
    [resource_spans] = export.resource_spans
    attributes = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
    assert attributes["service.name"] == "my-agent"
    names = {span.name for scope in resource_spans.scope_spans for span in scope.spans}
    assert "toolbus call calculator" in names


def _permit_everyone_the_default_group(directory: Path) -> None:
    """Access control as an agent service on a broker must have it: any user, default tools."""
    (directory / "toolbus.toml").write_text('[permissions]\nfallback = ["default"]\n')
