"""AgentSession.start: configured hooks call real tools over the bus and inject their output."""

from __future__ import annotations

import copy
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from toolbus.application.agent.audit import ListAuditSink
from toolbus.domain.errors import ConfigError
from toolbus.domain.hooks.injection import make_call_id, parse_ttl_expiry
from toolbus.hooks import load_hooks, parse_hooks
from toolbus.settings import load_settings
from toolbus.testing.kit import ToolTestKit

from .runtime_support import (
    MEMORY_HOOK,
    NOW,
    SECRET,
    SYSTEM,
    USER,
    FakeClock,
    Services,
    hook,
    open_session,
    registry,
)

pytestmark = pytest.mark.anyio

MEMORY_CALL = "memory_server_get_memories"
ALICE = {"user_id": "alice"}
OSLO = "Likes hiking. Lives in Oslo."
HOOKS_LOGGER = "toolbus.hooks"
TTL_HOOK = {**MEMORY_HOOK, "refresh_condition": {"kind": "ttl", "ttl_minutes": 60}}


@pytest.fixture
async def services(toolbus: ToolTestKit) -> AsyncIterator[Services]:
    found = Services()
    await toolbus.serve(*found.all)
    try:
        yield found
    finally:
        found.release.set()  # the hanging service must not hold up the kit's shutdown


def tool_messages(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(call id, content) of every tool message, in order."""
    return [(m["tool_call_id"], m["content"]) for m in messages if m["role"] == "tool"]


def called_names(messages: list[dict[str, Any]]) -> list[str]:
    return [
        call["function"]["name"]
        for m in messages
        if m["role"] == "assistant"
        for call in m.get("tool_calls") or ()
    ]


def skipped(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == HOOKS_LOGGER and r.levelno == logging.WARNING]


# ---------------------------------------------------------------- injection


async def test_the_memory_tool_is_called_and_its_output_injected_after_the_first_user_message(
    toolbus: ToolTestKit, services: Services
) -> None:
    messages = [SYSTEM, USER]
    before = copy.deepcopy(messages)
    async with open_session(toolbus, registry(services, [MEMORY_HOOK])) as session:
        history = await session.start(messages)

    expected_id = make_call_id(MEMORY_CALL, ALICE, OSLO)
    assert history == [
        SYSTEM,
        USER,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": expected_id,
                    "type": "function",
                    "function": {"name": MEMORY_CALL, "arguments": '{"user_id": "alice"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": expected_id, "content": OSLO},
    ]
    assert messages == before, "the caller's list must not change"
    assert services.calls == [("memory", ALICE)]


async def test_repeated_requests_with_the_same_content_do_not_grow_the_history(
    toolbus: ToolTestKit, services: Services
) -> None:
    config = registry(services, [MEMORY_HOOK])
    history = [SYSTEM, USER]
    lengths = []
    for turn in range(3):
        async with open_session(toolbus, config) as session:
            history = await session.start(history)
        lengths.append(len(history))
        history = [*history, {"role": "assistant", "content": f"answer {turn}"}]

    assert lengths == [4, 5, 6]  # only the assistant answers added by the "client"
    assert tool_messages(history) == [(make_call_id(MEMORY_CALL, ALICE, OSLO), OSLO)]
    assert services.count("memory") == 3


async def test_changed_content_is_appended_at_the_end(
    toolbus: ToolTestKit, services: Services
) -> None:
    config = registry(services, [MEMORY_HOOK])
    async with open_session(toolbus, config) as session:
        history = await session.start([SYSTEM, USER])
    history = [*history, {"role": "assistant", "content": "Go hiking."}, USER]

    services.memories["alice"] = "Likes hiking. Lives in Bergen now."
    async with open_session(toolbus, config) as session:
        updated = await session.start(history)

    assert updated[: len(history)] == history
    assert tool_messages(updated[len(history) :]) == [
        (
            make_call_id(MEMORY_CALL, ALICE, "Likes hiking. Lives in Bergen now."),
            "Likes hiking. Lives in Bergen now.",
        )
    ]


async def test_frequency_always_appends_a_pair_on_every_request(
    toolbus: ToolTestKit, services: Services
) -> None:
    config = registry(services, [{**MEMORY_HOOK, "frequency": "always"}])
    history = [SYSTEM, USER]
    for _ in range(2):
        async with open_session(toolbus, config) as session:
            history = await session.start(history)

    assert [content for _, content in tool_messages(history)] == [OSLO, OSLO]
    assert history[:2] == [SYSTEM, USER]


# ---------------------------------------------------------------- TTL


async def test_a_fresh_ttl_skips_the_tool_and_leaves_the_history_alone(
    toolbus: ToolTestKit, services: Services
) -> None:
    config = registry(services, [TTL_HOOK])
    clock = FakeClock()
    async with open_session(toolbus, config, clock=clock) as session:
        history = await session.start([SYSTEM, USER])
    [(call_id, _)] = tool_messages(history)
    assert parse_ttl_expiry(call_id) == int(NOW) + 3600

    clock.advance(59 * 60)
    services.memories["alice"] = "changed, but nobody asks yet"
    async with open_session(toolbus, config, clock=clock) as session:
        again = await session.start(history)

    assert again == history
    assert services.count("memory") == 1


async def test_an_expired_ttl_calls_the_tool_again_and_restamps_the_pair(
    toolbus: ToolTestKit, services: Services
) -> None:
    config = registry(services, [TTL_HOOK])
    clock = FakeClock()
    async with open_session(toolbus, config, clock=clock) as session:
        history = await session.start([SYSTEM, USER])

    clock.advance(60 * 60)  # expiry == now: expired
    async with open_session(toolbus, config, clock=clock) as session:
        again = await session.start(history)

    assert services.count("memory") == 2
    assert len(again) == len(history)
    [(call_id, content)] = tool_messages(again)
    assert content == OSLO
    assert call_id == make_call_id(MEMORY_CALL, ALICE, OSLO, int(NOW) + 2 * 3600)
    assert again[2]["tool_calls"][0]["id"] == call_id


async def test_a_pair_without_a_ttl_segment_counts_as_expired(
    toolbus: ToolTestKit, services: Services
) -> None:
    async with open_session(toolbus, registry(services, [MEMORY_HOOK])) as session:
        history = await session.start([SYSTEM, USER])  # no TTL: the id has no _ttl_

    async with open_session(toolbus, registry(services, [TTL_HOOK])) as session:
        again = await session.start(history)

    assert services.count("memory") == 2
    [(call_id, _)] = tool_messages(again)
    assert parse_ttl_expiry(call_id) == int(NOW) + 3600


# ---------------------------------------------------------------- failures


async def test_a_hook_whose_tool_raises_is_logged_and_skipped(
    toolbus: ToolTestKit, services: Services, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=HOOKS_LOGGER)
    hooks = [hook("broken_tool", name="Broken", arguments={"token": SECRET}), MEMORY_HOOK]
    async with open_session(toolbus, registry(services, hooks)) as session:
        history = await session.start([SYSTEM, USER])
        outcome = await session.call("user_prefs", {})  # the session goes on

    assert outcome.ok
    assert called_names(history) == [MEMORY_CALL]
    [record] = skipped(caplog)
    assert record.getMessage() == (
        "hook 'Broken' skipped: tool 'broken_tool' answered with an error "
        "(tool-service-error); the request goes on without it"
    )
    assert (record.hook, record.tool) == ("Broken", "broken_tool")  # type: ignore[attr-defined]
    assert SECRET not in caplog.text


async def test_a_hanging_tool_is_given_up_after_timeout_seconds(
    toolbus: ToolTestKit,
    services: Services,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.WARNING, logger=HOOKS_LOGGER)
    # Left to the client, the call would wait an hour: a start that ends at all
    # was bounded by the hook's own limit.
    monkeypatch.setattr(toolbus.client, "default_timeout", 3600.0)
    hooks = [hook("hanging_tool", name="Slow", timeout_seconds=0.05), MEMORY_HOOK]
    with anyio.fail_after(60):
        async with open_session(toolbus, registry(services, hooks)) as session:
            history = await session.start([SYSTEM, USER])

    assert services.count("hanging") == 1
    assert called_names(history) == [MEMORY_CALL]
    [record] = skipped(caplog)
    assert record.getMessage() == (
        "hook 'Slow' skipped: tool 'hanging_tool' did not answer within 0.05 s; "
        "the request goes on without it"
    )


@pytest.mark.parametrize(
    ("tool_name", "reason"),
    [
        ("no_such_tool", "is not configured"),
        ("admin_notes", "is not in the request's tool groups"),
        ("later_notes", "is not offered in the request's state"),
    ],
)
async def test_a_tool_the_request_is_not_offered_counts_as_missing(
    toolbus: ToolTestKit,
    services: Services,
    caplog: pytest.LogCaptureFixture,
    tool_name: str,
    reason: str,
) -> None:
    caplog.set_level(logging.WARNING, logger=HOOKS_LOGGER)
    audit = ListAuditSink()
    hooks = [hook(tool_name, arguments={"token": SECRET}), MEMORY_HOOK]
    async with open_session(toolbus, registry(services, hooks), audit=audit) as session:
        history = await session.start([SYSTEM, USER])

    assert called_names(history) == [MEMORY_CALL]
    assert services.count("memory") == 1  # admin_notes / later_notes share its service
    [record] = skipped(caplog)
    assert record.getMessage() == (
        f"hook {tool_name!r} skipped: tool {tool_name!r} {reason}; the request goes on without it"
    )
    assert SECRET not in caplog.text
    # Not a call: nothing was asked of the bus, so nothing is audited for it.
    assert [call.tool for call in audit.records[0].calls] == [MEMORY_CALL]


async def test_every_hook_failing_leaves_the_history_as_it_came(
    toolbus: ToolTestKit, services: Services
) -> None:
    hooks = [hook("broken_tool"), hook("no_such_tool"), hook("hanging_tool", timeout_seconds=0.01)]
    messages = [SYSTEM, USER]
    async with open_session(toolbus, registry(services, hooks)) as session:
        assert await session.start(messages) == messages


# ---------------------------------------------------------------- order, state, audit


async def test_hooks_are_applied_in_configured_order(
    toolbus: ToolTestKit, services: Services
) -> None:
    # "always" appends, so the history shows the order in which hooks were applied.
    hooks = [
        hook("user_prefs", frequency="always"),
        {**MEMORY_HOOK, "frequency": "always"},
        hook("user_prefs", frequency="always", arguments={"again": True}),
    ]
    async with open_session(toolbus, registry(services, hooks)) as session:
        history = await session.start([SYSTEM, USER])

    assert called_names(history) == ["user_prefs", MEMORY_CALL, "user_prefs"]


async def test_the_first_pairs_each_go_right_after_the_first_user_message(
    toolbus: ToolTestKit, services: Services
) -> None:
    # Applied in order, each first pair goes right after the first user message,
    # so the later hook's pair ends up nearer to it (as in DIAL).
    hooks = [hook("user_prefs"), MEMORY_HOOK]
    async with open_session(toolbus, registry(services, hooks)) as session:
        history = await session.start([SYSTEM, USER])

    assert called_names(history) == [MEMORY_CALL, "user_prefs"]


async def test_hook_tools_are_called_concurrently(toolbus: ToolTestKit, services: Services) -> None:
    # The first hook's tool answers only once the second's has been called: one
    # after the other, this would never finish.
    services.memory_waits_for_prefs = True
    hooks = [MEMORY_HOOK, hook("user_prefs", frequency="always")]
    with anyio.fail_after(5):
        async with open_session(toolbus, registry(services, hooks)) as session:
            history = await session.start([SYSTEM, USER])

    # Injected in configured order all the same: memories first (after the user
    # message), then preferences at the end.
    assert called_names(history) == [MEMORY_CALL, "user_prefs"]
    assert history.index(USER) == 1 and history[-1]["content"].startswith("units: metric")


async def test_hook_calls_are_audited_but_never_move_the_state(
    toolbus: ToolTestKit, services: Services
) -> None:
    audit = ListAuditSink()
    async with open_session(toolbus, registry(services, [MEMORY_HOOK]), audit=audit) as session:
        await session.start([SYSTEM, USER])
        assert session.state == "undefined"  # the memory tool's state is "remembered"
        assert session.transitions == ()

    [record] = audit.records
    [call] = record.calls
    assert (call.tool, call.status, call.tool_call_id) == (MEMORY_CALL, "ok", None)
    assert record.state_transitions == []


async def test_start_on_a_closed_session_is_an_error(
    toolbus: ToolTestKit, services: Services
) -> None:
    session = open_session(toolbus, registry(services, [MEMORY_HOOK]))
    await session.close()
    with pytest.raises(RuntimeError, match="is closed"):
        await session.start([USER])


async def test_without_hooks_start_returns_a_copy_of_the_history(
    toolbus: ToolTestKit, services: Services
) -> None:
    messages = [SYSTEM, USER]
    async with open_session(toolbus, registry(services)) as session:
        assert session.hooks == ()
        history = await session.start(messages)
    assert history == messages and history is not messages
    assert services.calls == []


# ---------------------------------------------------------------- where hooks come from


async def test_hooks_given_to_the_session_replace_the_snapshots(
    toolbus: ToolTestKit, services: Services
) -> None:
    config = registry(services, [MEMORY_HOOK])
    async with open_session(toolbus, config, hooks=parse_hooks([hook("user_prefs")])) as session:
        history = await session.start([USER])
    assert called_names(history) == ["user_prefs"]

    async with open_session(toolbus, config, hooks=()) as session:
        assert await session.start([USER]) == [USER]


async def test_hooks_from_toolbus_toml(
    toolbus: ToolTestKit, services: Services, tmp_path: Path
) -> None:
    (tmp_path / "toolbus.toml").write_text(
        """
[[hooks]]
kind = "tool_call"
event = "on_request_start"
name = "Memories"
toolset_name = "memory_server"
tool_name = "get_memories"
arguments = { user_id = "alice" }
refresh_condition = { kind = "ttl", ttl_minutes = 60 }

[[hooks]]
kind = "tool_call"
event = "on_request_start"
tool_name = "user_prefs"
frequency = "always"
""",
        encoding="utf-8",
    )
    settings = load_settings(cwd=tmp_path, environ={})
    config = registry(services)
    hooks = load_hooks(config.snapshot, settings.file)

    async with open_session(toolbus, config, hooks=hooks) as session:
        history = await session.start([SYSTEM, USER])

    assert [h.display_name for h in hooks] == ["Memories", "user_prefs"]
    assert called_names(history) == [MEMORY_CALL, "user_prefs"]
    assert parse_ttl_expiry(history[2]["tool_calls"][0]["id"]) == int(NOW) + 3600


def test_hooks_in_both_the_snapshot_and_toolbus_toml_are_refused() -> None:
    with pytest.raises(ConfigError, match="keep them in one place") as caught:
        load_hooks({"hooks": [MEMORY_HOOK]}, {"hooks": [MEMORY_HOOK]})
    assert [p.where for p in caught.value.problems] == ["hooks"]


def test_load_hooks_names_the_source_of_every_problem() -> None:
    bad = [hook("t", frequency="sometimes")]
    with pytest.raises(ConfigError) as in_snapshot:
        load_hooks({"hooks": bad})
    with pytest.raises(ConfigError) as in_settings:
        load_hooks(None, {"hooks": bad})
    with pytest.raises(ConfigError) as not_a_list:
        load_hooks(None, {"hooks": {"kind": "tool_call"}})

    [from_snapshot] = in_snapshot.value.problems
    [from_settings] = in_settings.value.problems
    assert from_snapshot.where == "snapshot section 'hooks' hook #0 ('t')"
    assert from_settings.where == "toolbus.toml [[hooks]] hook #0 ('t')"
    assert str(not_a_list.value.problems[0]) == (
        "toolbus.toml [[hooks]]: must be a list of hook objects, not dict"
    )
    assert load_hooks() == () and load_hooks({"tool": {}}, {"broker": "memory://"}) == ()


async def test_an_invalid_hooks_section_in_the_snapshot_fails_the_session(
    toolbus: ToolTestKit, services: Services
) -> None:
    config = registry(services, [hook("t", event="on_completion")])
    with pytest.raises(ConfigError, match="unsupported hook event 'on_completion'"):
        open_session(toolbus, config)


async def test_raw_hook_dicts_are_refused_with_a_pointer_to_parse_hooks(
    toolbus: ToolTestKit, services: Services
) -> None:
    with pytest.raises(TypeError, match="parse_hooks"):
        open_session(toolbus, registry(services), hooks=[MEMORY_HOOK])  # type: ignore[list-item]
