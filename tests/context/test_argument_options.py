"""Argument options end to end: what a real service receives, what the LLM sees, what is audited."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from toolbus.application.agent.audit import ListAuditSink
from toolbus.application.agent.session import AgentSession
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.domain.calls import wire
from toolbus.domain.calls.arguments import ArgumentOptions, apply_options, parse_options, render
from toolbus.domain.calls.trace_context import parse_traceparent
from toolbus.domain.config.schemas import export_tools, json_schema
from toolbus.domain.errors import ConfigError, NotFound
from toolbus.testing.kit import ToolTestKit

from .support import Recorder, registry_for, tapped, tool

pytestmark = pytest.mark.anyio

ENV = {"LOOKUP_API_KEY": "k-123", "LOOKUP_REGION": "eu-west"}
OPTIONS: dict[str, Any] = {
    "args": {
        "defaults": {
            "limit": 10,
            "mode": "fast",
            "note": "{user}/{request_id}",
        },
        "fixed": {
            "tenant": "{user}",
            "scope": "{tool_call_id}:{state}:{unknown}",
            # Fixed and env on one key: env wins.
            "region": "fixed-region",
        },
    },
    "envs": {"api_key": "LOOKUP_API_KEY", "region": "LOOKUP_REGION"},
}
ARGUMENTS = ["query", "tenant", "api_key", "limit", "mode", "note", "scope", "region"]


def lookup_setup(options: dict[str, Any] = OPTIONS) -> tuple[Recorder, Any]:
    service = Recorder("lookup-service", env_params=tuple(ENV))
    registry = registry_for(
        [service], {"lookup": tool("lookup", "lookup-service", ARGUMENTS, options=options)}
    )
    return service, registry


def session(kit: ToolTestKit, registry: Any, audit: ListAuditSink, **kwargs: Any) -> AgentSession:
    return AgentSession(
        kit.tools(registry),
        user="alice",
        audit=audit,
        metrics=ToolbusMetrics.disabled(),
        **{"request_id": "req-1", **kwargs},
    )


async def test_precedence_env_over_fixed_over_llm_over_default(toolbus: ToolTestKit) -> None:
    service, registry = lookup_setup()
    await toolbus.serve(service, environ=ENV)
    audit = ListAuditSink()
    async with session(toolbus, registry, audit) as agent:
        outcome = await agent.call(
            "lookup",
            {
                "query": "acme",
                "tenant": "mallory",  # fixed: overwritten
                "api_key": "a guess",  # env: the service's value wins
                "region": "us-east",  # fixed and env: env wins
                "mode": None,  # explicit null counts as given: no default
                # "limit" and "note" absent: defaulted
            },
            tool_call_id="call-1",
        )
    assert outcome.ok, outcome.observation
    assert service.last.arguments == {
        "query": "acme",
        "tenant": "alice",
        "api_key": "k-123",
        "region": "eu-west",
        "mode": None,
        "limit": 10,
        "note": "alice/req-1",
        "scope": "call-1:undefined:{unknown}",
    }
    (call,) = audit.records[0].calls
    assert sorted(call.defaulted_arguments) == ["limit", "note"]
    # Each key is reported under the option that decided it.
    assert sorted(call.fixed_arguments) == ["scope", "tenant"]
    assert sorted(call.env_arguments) == ["api_key", "region"]


async def test_a_failed_call_is_audited_with_its_option_keys(toolbus: ToolTestKit) -> None:
    async def fail(arguments: dict[str, Any]) -> str:
        raise NotFound("no such city")

    service = Recorder("lookup-service", answer=fail, env_params=tuple(ENV))
    registry = registry_for(
        [service], {"lookup": tool("lookup", "lookup-service", ARGUMENTS, options=OPTIONS)}
    )
    await toolbus.serve(service, environ=ENV)
    audit = ListAuditSink()
    async with session(toolbus, registry, audit) as agent:
        outcome = await agent.call("lookup", {"query": "q"}, tool_call_id="call-1")
    assert outcome.error_type == "not-found"
    (call,) = audit.records[0].calls
    assert sorted(call.defaulted_arguments) == ["limit", "mode", "note"]
    assert sorted(call.fixed_arguments) == ["scope", "tenant"]
    assert sorted(call.env_arguments) == ["api_key", "region"]


async def test_an_llm_value_for_an_env_key_never_leaves_the_agent(toolbus: ToolTestKit) -> None:
    service, registry = lookup_setup()
    await toolbus.serve(service, environ=ENV)
    async with tapped(toolbus.bus, service.request_queue) as tap:
        await toolbus.tools(registry).call("lookup", {"query": "q", "api_key": "a guess"})
    (request,) = tap.messages
    assert b"a guess" not in request.body
    sent = json.loads(json.loads(request.body)["arguments"])
    assert "api_key" not in sent and "region" not in sent
    # Only the variable names travel.
    assert json.loads(request.properties[wire.PROP_ENV_ARGS]) == OPTIONS["envs"]
    assert "k-123" not in json.dumps(request.properties)


async def test_a_missing_variable_is_a_warning_and_the_key_is_skipped(
    toolbus: ToolTestKit, caplog: pytest.LogCaptureFixture
) -> None:
    service, registry = lookup_setup()
    await toolbus.serve(service, environ={"LOOKUP_API_KEY": "k-123"})
    with caplog.at_level(logging.WARNING):
        await toolbus.tools(registry).call("lookup", {"query": "q", "region": "us-east"})
    # Skipped, not replaced by the LLM's value nor by the fixed one.
    assert "region" not in service.last.arguments
    assert service.last.arguments["api_key"] == "k-123"
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "LOOKUP_REGION" in warning.getMessage()
    assert "'region'" in warning.getMessage()
    assert "lookup-service" in warning.getMessage()


async def test_trace_id_placeholder_is_the_trace_of_the_call(toolbus: ToolTestKit) -> None:
    service = Recorder("traced-service")
    registry = registry_for(
        [service],
        {
            "traced": tool(
                "traced",
                "traced-service",
                ["trace"],
                options={"args": {"fixed": {"trace": "{trace_id}"}}},
            )
        },
    )
    await toolbus.serve(service)
    tools = toolbus.tools(registry)
    async with tapped(toolbus.bus, service.request_queue) as tap:
        await tools.call("traced")  # no trace current: the call starts one
        async with AgentSession(
            tools, user="bob", metrics=ToolbusMetrics.disabled(), audit=ListAuditSink()
        ) as agent:
            await agent.call("traced")
        chunks = [chunk async for chunk in tools.stream("traced")]
    assert chunks == ["ok"]
    assert len(tap.messages) == len(service.calls) == 3
    for request, received in zip(tap.messages, service.calls, strict=True):
        sent = parse_traceparent(request.properties[wire.PROP_TRACEPARENT])
        assert sent is not None
        assert received.arguments["trace"] == sent.trace_id
        assert received.trace is not None and received.trace.trace_id == sent.trace_id
    # Each top-level call is its own trace.
    assert len({received.arguments["trace"] for received in service.calls}) == 3


async def test_known_placeholders_without_a_value_render_empty(toolbus: ToolTestKit) -> None:
    # Outside an agent session there is no request id, tool call id or state.
    service = Recorder("plain-service")
    fixed = {"who": "{user}", "ids": "[{request_id}|{tool_call_id}|{state}]", "odd": "{nope}"}
    registry = registry_for(
        [service],
        {
            "plain": tool(
                "plain", "plain-service", ["who", "ids", "odd"], options={"args": {"fixed": fixed}}
            )
        },
    )
    await toolbus.serve(service)
    await toolbus.tools(registry).call("plain", user="carol")
    assert service.last.arguments == {"who": "carol", "ids": "[||]", "odd": "{nope}"}


async def test_streaming_calls_apply_options_too(toolbus: ToolTestKit) -> None:
    service, registry = lookup_setup()
    await toolbus.serve(service, environ=ENV)
    chunks = [c async for c in toolbus.tools(registry).stream("lookup", {"tenant": "x"}, user="d")]
    assert chunks == ["ok"]
    assert service.last.arguments["tenant"] == "d"
    assert service.last.arguments["api_key"] == "k-123"
    assert service.last.arguments["limit"] == 10


async def test_llm_schemas_hide_fixed_and_env_keys_and_show_defaults_unrendered(
    toolbus: ToolTestKit,
) -> None:
    _, registry = lookup_setup()
    async with session(toolbus, registry, ListAuditSink()) as agent:
        (entry,) = agent.tools("openai")
    parameters = entry["function"]["parameters"]
    assert sorted(parameters["properties"]) == ["limit", "mode", "note", "query"]
    assert parameters["properties"]["note"]["default"] == "{user}/{request_id}"
    assert parameters["properties"]["limit"]["default"] == 10
    # A defaulted argument is optional for the model.
    assert parameters["required"] == ["query"]
    lookup = registry.tool("lookup")
    for format in ("mcp", "anthropic"):
        (exported,) = export_tools([lookup], format)
        schema = exported["inputSchema" if format == "mcp" else "input_schema"]
        assert schema == json_schema(lookup) == parameters


# ------------------------------------------------------------------ pure functions


def test_render_fills_known_placeholders_once_and_leaves_the_rest() -> None:
    context = {"user": "{trace_id}", "trace_id": "abc", "request_id": "r"}
    # Single pass: a value that looks like a placeholder is not expanded again.
    assert render("{user}-{trace_id}", context) == "{trace_id}-abc"
    assert render("{unknown} {state} {request_id}", context) == "{unknown} {state} r"
    assert render("{ user }", context) == "{ user }"
    assert render('{"user": 1}', context) == '{"user": 1}'
    assert render(42, context) == 42
    assert render(["{user}"], context) == ["{user}"]  # only strings are templates


def test_apply_options_reports_names_only() -> None:
    options = ArgumentOptions(
        defaults={"a": "{user}", "b": 1}, fixed={"c": "{user}"}, envs={"d": "D"}
    )
    applied = apply_options({"b": None, "d": "guess"}, options, {"user": "u"})
    assert applied.arguments == {"a": "u", "b": None, "c": "u"}
    assert (applied.defaulted, applied.fixed, applied.env) == (("a",), ("c",), ("d",))


def test_each_key_is_reported_under_the_strongest_option_only() -> None:
    options = ArgumentOptions(
        defaults={"a": 1, "b": 2, "c": 3}, fixed={"b": "fixed", "c": "fixed"}, envs={"c": "C"}
    )
    applied = apply_options({}, options, {})
    assert applied.arguments == {"a": 1, "b": "fixed"}  # "c" is the service's to fill
    assert (applied.defaulted, applied.fixed, applied.env) == (("a",), ("b",), ("c",))


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ([], "options"),
        ({"arg": {}}, "options"),
        ({"args": []}, "options.args"),
        ({"args": {"default": {}}}, "options.args"),
        ({"args": {"defaults": [1]}}, "options.args.defaults"),
        ({"args": {"fixed": "x"}}, "options.args.fixed"),
        ({"envs": ["KEY"]}, "options.envs"),
        ({"envs": {"key": "1BAD"}}, "options.envs.key"),
        ({"envs": {"key": 7}}, "options.envs.key"),
        ({"envs": {"key": "$KEY"}}, "options.envs.key"),
    ],
)
def test_bad_options_are_config_errors_naming_the_field(raw: Any, field: str) -> None:
    _, problems = parse_options(raw)
    assert field in [where for where, _ in problems]
    with pytest.raises(ConfigError) as caught:
        lookup_setup(raw)
    assert f"tool 'lookup' field '{field}'" in str(caught.value)


def test_every_options_problem_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as caught:
        lookup_setup({"args": {"defaults": 1, "fixed": 2}, "envs": {"a": "1", "b": "2"}})
    assert len(caught.value.problems) == 4
