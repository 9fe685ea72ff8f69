"""A secret injected from the service's environment never shows up anywhere else.

Every test plants a fresh secret as an environment value of the *service*, makes
tools use it in every way a tool can (return it, stream it, raise with it, fail
validation on it), and then scans everything that left the service: every log
record of every logger at DEBUG (tracebacks included), every message on the
request and response queues (bodies raw and decoded, and properties), every
audit record, every observation and exception message, and, with an
OpenTelemetry SDK configured, every span.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator, Iterable
from typing import Any

import pytest

from toolbus.application.agent.audit import ListAuditSink
from toolbus.application.agent.session import AgentSession
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.application.calls.service import ToolResult, ToolService, tool_service
from toolbus.domain.calls import wire
from toolbus.domain.errors import NotFound, ToolCallError, ToolServiceError
from toolbus.testing.kit import ToolTestKit

from .support import BusTap, Recorder, formatted, registry_for, span_texts, tapped, tool

pytestmark = pytest.mark.anyio

MODES = [
    "return",
    "return-json",
    "tool-result",
    "stream",
    "typed-error",
    "not-found",
    "crash",
]


async def _chunks(*parts: Any) -> AsyncIterator[Any]:
    for part in parts:
        yield part


class Vault(ToolService):
    """Does with its injected ``api_key`` whatever ``mode`` says."""

    id = "vault-service"
    env_params = ("VAULT_API_KEY", "ESCAPED_KEY")
    # Persistent: answers are also kept for redelivered requests.
    request_queue = "persistent://acme/tools/vault-requests"

    async def invoke(self, user: str, config: dict[str, Any], arguments: dict[str, Any]) -> Any:
        key = arguments["api_key"]
        mode = arguments["mode"]
        if mode == "return":
            return f"the key is {key}"
        if mode == "return-json":
            return {"key": key, "nested": [key]}
        if mode == "tool-result":
            return ToolResult(f"final: {key}", after_execution="terminate")
        if mode == "stream":
            return _chunks("key: ", key, ToolResult(f" again {key}"))
        if mode == "typed-error":
            raise ToolServiceError(f"key {key} was rejected")
        if mode == "not-found":
            raise NotFound(f"no account for key {key}")
        if mode == "crash":
            raise RuntimeError(f"crashed while holding {key}")
        return "?"


@tool_service("typed-vault-service")
async def typed_vault(api_key: int) -> str:
    return "never: a secret is not an int"


typed_vault.env_params = ("VAULT_API_KEY",)


def vault_registry(variable: str) -> Any:
    envs = {"options": {"envs": {"api_key": variable}}}
    return registry_for(
        [Vault(), typed_vault],
        {
            "vault": tool("vault", "vault-service", ["mode", "api_key"], **envs),
            "typed-vault": tool("typed-vault", "typed-vault-service", ["api_key"], **envs),
        },
    )


def leaks(secret: str, texts: Iterable[str]) -> list[str]:
    return [text for text in texts if secret in text]


async def _use_the_secret_every_way(
    kit: ToolTestKit, secret: str, caplog: pytest.LogCaptureFixture
) -> tuple[BusTap, list[str], ListAuditSink]:
    variable = "VAULT_API_KEY"
    registry = vault_registry(variable)
    vault = Vault()
    await kit.serve(vault, typed_vault, environ={variable: secret})
    caplog.set_level(logging.DEBUG)
    audit = ListAuditSink()
    seen: list[str] = []
    tools = kit.tools(registry)
    queues = [vault.request_queue, vault.response_queue]
    queues += [typed_vault.request_queue, typed_vault.response_queue]
    async with tapped(kit.bus, *queues) as tap:
        async with AgentSession(
            tools, user="alice", audit=audit, metrics=ToolbusMetrics.disabled()
        ) as agent:
            for mode in MODES:
                outcome = await agent.call("vault", {"mode": mode}, tool_call_id=f"call-{mode}")
                seen.append(outcome.observation)
            outcome = await agent.call("typed-vault", {}, tool_call_id="call-typed")
            assert outcome.error_type == "bad-request"
            seen.append(outcome.observation)
        # Plain calls: the typed exceptions carry the (redacted) messages.
        for mode in ("typed-error", "not-found", "crash"):
            with pytest.raises(ToolCallError) as caught:
                await tools.call("vault", {"mode": mode})
            seen.append(str(caught.value))
        seen.extend([c async for c in tools.stream("vault", {"mode": "stream"})])
    # The tools really had the secret: each observation shows where it was redacted.
    assert sum("***" in text for text in seen) >= len(MODES) + 3
    return tap, seen, audit


async def test_a_secret_never_leaves_the_service(
    toolbus: ToolTestKit, caplog: pytest.LogCaptureFixture
) -> None:
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    tap, seen, audit = await _use_the_secret_every_way(toolbus, secret, caplog)
    assert len(tap.messages) >= 2 * (len(MODES) + 5)
    assert leaks(secret, tap.texts()) == []
    assert leaks(secret, seen) == []
    assert leaks(secret, [record.to_json() for record in audit.records]) == []
    assert caplog.records, "the scan saw no log records at all"
    assert leaks(secret, formatted(caplog.records)) == []
    (record,) = audit.records
    assert {name for call in record.calls for name in call.env_arguments} == {"api_key"}


async def test_a_secret_never_reaches_a_span(
    toolbus: ToolTestKit, caplog: pytest.LogCaptureFixture, spans: Any
) -> None:
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    await _use_the_secret_every_way(toolbus, secret, caplog)
    finished = spans.get_finished_spans()
    assert any(span.status.status_code.name == "ERROR" for span in finished)
    assert leaks(secret, span_texts(finished)) == []


async def test_a_secret_json_escaped_in_a_structured_result_is_redacted(
    toolbus: ToolTestKit,
) -> None:
    secret = f'pa"ss-w\u00f6rd-{uuid.uuid4().hex[:8]}'
    registry = vault_registry("ESCAPED_KEY")
    vault = Vault()
    await toolbus.serve(vault, environ={"ESCAPED_KEY": secret})
    async with tapped(toolbus.bus, vault.request_queue, vault.response_queue) as tap:
        observation = await toolbus.tools(registry).call("vault", {"mode": "return-json"})
    assert leaks(secret, tap.texts()) == []
    assert json.loads(observation) == {"key": "***", "nested": ["***"]}


async def test_a_secret_split_across_stream_chunks_is_redacted(toolbus: ToolTestKit) -> None:
    secret = f"s3cr3t-{uuid.uuid4().hex}"

    @tool_service("splitter-service")
    async def splitter(api_key: str) -> AsyncIterator[str]:
        yield api_key[:10]
        yield api_key[10:]

    splitter.env_params = ("SPLIT",)

    registry = registry_for(
        [splitter],
        {"split": tool("split", "splitter-service", [], options={"envs": {"api_key": "SPLIT"}})},
    )
    await toolbus.serve(splitter, environ={"SPLIT": secret})
    chunks = [c async for c in toolbus.tools(registry).stream("split")]
    assert secret not in "".join(chunks)


async def test_a_request_cannot_pick_any_variable_of_the_services_environment(
    toolbus: ToolTestKit,
) -> None:
    # Whoever can publish to the request queue could otherwise have, say, a mail
    # tool's "body" filled with the service's database password.
    service = Recorder("weather-service", env_params=("WEATHER_API_KEY",))
    await toolbus.serve(service, environ={"WEATHER_API_KEY": "k-1", "DATABASE_PASSWORD": "pw"})
    answers = await toolbus.bus.subscribe(service.response_queue)
    await toolbus.bus.publish(
        service.request_queue,
        wire.encode_request("mallory"),
        {
            wire.PROP_ID: "raw-1",
            wire.PROP_ENV_ARGS: json.dumps(
                {"api_key": "WEATHER_API_KEY", "body": "DATABASE_PASSWORD"}
            ),
        },
    )
    async for _ in answers:
        break
    await answers.close()
    assert service.last.arguments == {"api_key": "k-1"}
