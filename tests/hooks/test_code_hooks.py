"""Code hooks: pluggy implementations, compiled once, run around every executed call."""

from __future__ import annotations

import importlib.metadata as metadata
import logging
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from toolbus.application.agent.audit import AuditRecord, ListAuditSink
from toolbus.application.agent.code_hooks import NO_HOOKS, CodeHook, CompiledHooks
from toolbus.application.agent.outcomes import CallOutcome
from toolbus.application.agent.session import AgentSession
from toolbus.domain.config.descriptors import ToolDescriptor
from toolbus.domain.errors import PluginError
from toolbus.hooks import CodeHooks, Deny, RewriteArguments, hookimpl
from toolbus.plugins import installed as installation
from toolbus.plugins.installed import PLUGIN_GROUP
from toolbus.testing.kit import ToolTestKit

from .runtime_support import MEMORY_HOOK, SYSTEM, USER, Services, open_session, registry

pytestmark = pytest.mark.anyio

HOOKS_LOGGER = "toolbus.hooks"


@pytest.fixture
async def services(toolbus: ToolTestKit) -> AsyncIterator[Services]:
    found = Services()
    await toolbus.serve(*found.all)
    try:
        yield found
    finally:
        found.release.set()


class DenyPrefs:
    """Denies the preferences tool, and nothing else."""

    @hookimpl
    def toolbus_on_pre_tool_use(self, tool: ToolDescriptor) -> Deny | None:
        if tool.name == "user_prefs":
            return Deny("Preferences are off limits today.")
        return None


class AddArgument:
    """Adds ``key=value`` to every call's arguments (an async hook)."""

    def __init__(self, key: str, value: Any) -> None:
        self.key, self.value = key, value
        self.seen: list[dict[str, Any]] = []

    @hookimpl
    async def toolbus_on_pre_tool_use(self, arguments: Mapping[str, Any]) -> RewriteArguments:
        self.seen.append(dict(arguments))
        return RewriteArguments({**arguments, self.key: self.value})


class Shout:
    """Upper-cases every observation."""

    @hookimpl
    def toolbus_on_post_tool_use(self, outcome: CallOutcome) -> str:
        return outcome.observation.upper()


class Exclaim:
    @hookimpl
    async def toolbus_on_post_tool_use(self, outcome: CallOutcome) -> str:
        return outcome.observation + "!"


class Recorder:
    """Keeps what on_completion saw."""

    def __init__(self) -> None:
        self.records: list[tuple[str, AuditRecord]] = []

    @hookimpl
    async def toolbus_on_completion(self, session: AgentSession, record: AuditRecord) -> None:
        self.records.append((session.request_id, record))


# ---------------------------------------------------------------- pre-tool-use


async def test_a_deny_refuses_the_call_with_its_reason_and_makes_no_call(
    toolbus: ToolTestKit, services: Services
) -> None:
    audit = ListAuditSink()
    hooks = CodeHooks([DenyPrefs()])
    async with open_session(toolbus, registry(services), code_hooks=hooks, audit=audit) as s:
        outcome = await s.call("user_prefs", {}, tool_call_id="call-1")
        allowed = await s.call("memory_server_get_memories", {"user_id": "alice"})

    assert (outcome.status, outcome.observation) == ("refused", "Preferences are off limits today.")
    assert (outcome.tool, outcome.tool_call_id) == ("user_prefs", "call-1")
    assert outcome.state == "undefined"
    assert outcome.as_openai_message()["content"] == "Preferences are off limits today."
    assert allowed.ok
    assert services.count("prefs") == 0
    [record] = audit.records
    assert [(c.tool, c.status) for c in record.calls] == [
        ("user_prefs", "refused"),
        ("memory_server_get_memories", "ok"),
    ]


async def test_rewritten_arguments_are_what_the_tool_receives(
    toolbus: ToolTestKit, services: Services
) -> None:
    hooks = CodeHooks([AddArgument("user_id", "alice")])
    async with open_session(toolbus, registry(services), code_hooks=hooks) as session:
        outcome = await session.call("memory_server_get_memories", {"user_id": "mallory"})

    assert outcome.observation == "Likes hiking. Lives in Oslo."
    assert services.calls == [("memory", {"user_id": "alice"})]


async def test_rewrites_compose_in_the_order_the_plugins_are_given(
    toolbus: ToolTestKit, services: Services
) -> None:
    first, second = AddArgument("a", 1), AddArgument("b", 2)
    hooks = CodeHooks([first, second])
    async with open_session(toolbus, registry(services), code_hooks=hooks) as session:
        await session.call("user_prefs", {"x": 0})

    assert first.seen == [{"x": 0}]
    assert second.seen == [{"x": 0, "a": 1}]  # sees the first rewrite
    assert services.calls == [("prefs", {"x": 0, "a": 1, "b": 2})]


@pytest.mark.parametrize("deny_first", [True, False])
async def test_any_deny_wins_over_rewrites(
    toolbus: ToolTestKit, services: Services, deny_first: bool
) -> None:
    rewrite = AddArgument("a", 1)
    order: list[object] = [DenyPrefs(), rewrite] if deny_first else [rewrite, DenyPrefs()]
    async with open_session(toolbus, registry(services), code_hooks=CodeHooks(order)) as session:
        outcome = await session.call("user_prefs", {})

    assert outcome.status == "refused"
    assert outcome.observation == "Preferences are off limits today."
    assert services.count("prefs") == 0
    # A deny ends the round: hooks after it are not asked.
    assert rewrite.seen == ([] if deny_first else [{}])


async def test_the_first_of_several_denies_gives_the_reason(
    toolbus: ToolTestKit, services: Services
) -> None:
    class DenyAll:
        @hookimpl
        def toolbus_on_pre_tool_use(self) -> Deny:
            return Deny("Nothing today.")

    hooks = CodeHooks([DenyAll(), DenyPrefs()])
    async with open_session(toolbus, registry(services), code_hooks=hooks) as session:
        assert (await session.call("user_prefs", {})).observation == "Nothing today."


async def test_a_failing_pre_use_hook_refuses_the_call(
    toolbus: ToolTestKit, services: Services, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken:
        @hookimpl
        def toolbus_on_pre_tool_use(self) -> None:
            raise RuntimeError("policy service down")

    class WrongAnswer:
        @hookimpl
        def toolbus_on_pre_tool_use(self) -> dict[str, Any]:
            return {"user_id": "alice"}  # a rewrite must say so: RewriteArguments(...)

    for plugin in (Broken(), WrongAnswer()):
        async with open_session(
            toolbus, registry(services), code_hooks=CodeHooks([plugin])
        ) as session:
            outcome = await session.call("user_prefs", {})
        assert outcome.status == "refused"
        assert outcome.observation == (
            "The call of tool 'user_prefs' was blocked because a policy check failed. "
            "No call was made."
        )
    assert services.count("prefs") == 0
    errors = [r for r in caplog.records if r.name == HOOKS_LOGGER and r.levelno >= logging.ERROR]
    assert len(errors) == 2


async def test_pre_use_hooks_see_the_session_and_read_only_arguments(
    toolbus: ToolTestKit, services: Services
) -> None:
    seen: list[tuple[str, str, str]] = []

    class Inspect:
        @hookimpl
        def toolbus_on_pre_tool_use(
            self, session: AgentSession, tool: ToolDescriptor, arguments: Mapping[str, Any]
        ) -> None:
            seen.append((session.user, tool.name, arguments["q"]))
            with pytest.raises(TypeError):
                arguments["q"] = "changed"  # type: ignore[index]

    async with open_session(
        toolbus, registry(services), code_hooks=CodeHooks([Inspect()]), user="bob"
    ) as session:
        assert (await session.call("user_prefs", {"q": "hi"})).ok
    assert seen == [("bob", "user_prefs", "hi")]
    assert services.calls == [("prefs", {"q": "hi"})]


async def test_code_hooks_never_see_refusals_or_unusable_arguments(
    toolbus: ToolTestKit, services: Services
) -> None:
    calls: list[str] = []

    class Count:
        @hookimpl
        def toolbus_on_pre_tool_use(self, tool: ToolDescriptor) -> None:
            calls.append(f"pre {tool.name}")

        @hookimpl
        def toolbus_on_post_tool_use(self, tool: ToolDescriptor) -> None:
            calls.append(f"post {tool.name}")

    async with open_session(toolbus, registry(services), code_hooks=CodeHooks([Count()])) as s:
        assert (await s.call("admin_notes", {})).status == "refused"
        assert (await s.call("user_prefs", "not json")).status == "error"
        assert (await s.call("broken_tool", {})).status == "error"
    assert calls == ["pre broken_tool", "post broken_tool"]


# ---------------------------------------------------------------- post-tool-use


async def test_post_use_rewrites_compose_in_order(toolbus: ToolTestKit, services: Services) -> None:
    async with open_session(
        toolbus, registry(services), code_hooks=CodeHooks([Shout(), Exclaim()])
    ) as session:
        outcome = await session.call("user_prefs", {})
    assert outcome.ok
    assert outcome.observation == "UNITS: METRIC (FOR ALICE)!"


async def test_post_use_hooks_see_failed_calls_too(
    toolbus: ToolTestKit, services: Services
) -> None:
    seen: list[tuple[str, str | None]] = []

    class Watch:
        @hookimpl
        def toolbus_on_post_tool_use(self, outcome: CallOutcome) -> None:
            seen.append((outcome.status, outcome.error_type))

    async with open_session(toolbus, registry(services), code_hooks=CodeHooks([Watch()])) as s:
        await s.call("broken_tool", {})
    assert seen == [("error", "tool-service-error")]


async def test_a_failing_post_use_hook_withholds_the_observation(
    toolbus: ToolTestKit, services: Services
) -> None:
    class Broken:
        @hookimpl
        def toolbus_on_post_tool_use(self) -> None:
            raise RuntimeError("redactor crashed")

    async with open_session(
        toolbus, registry(services), code_hooks=CodeHooks([Broken()])
    ) as session:
        outcome = await session.call("user_prefs", {})
    assert "units" not in outcome.observation
    assert outcome.observation == (
        "The result of tool 'user_prefs' was withheld because post-processing failed."
    )


# ---------------------------------------------------------------- with configured hooks


async def test_code_hooks_apply_to_the_calls_configured_hooks_make(
    toolbus: ToolTestKit, services: Services, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=HOOKS_LOGGER)
    hooks = CodeHooks([Shout(), DenyPrefs()])
    prefs_hook = {"kind": "tool_call", "event": "on_request_start", "tool_name": "user_prefs"}
    config = registry(services, [MEMORY_HOOK, prefs_hook])
    async with open_session(toolbus, config, code_hooks=hooks) as session:
        history = await session.start([SYSTEM, USER])

    assert [m["content"] for m in history if m["role"] == "tool"] == [
        "LIKES HIKING. LIVES IN OSLO."
    ]
    [record] = [r for r in caplog.records if r.name == HOOKS_LOGGER]
    assert record.getMessage() == (
        "hook 'user_prefs' skipped: tool 'user_prefs' was refused by an on_pre_tool_use "
        "code hook; the request goes on without it"
    )


async def test_request_start_code_hooks_run_after_the_configured_ones_in_order(
    toolbus: ToolTestKit, services: Services
) -> None:
    class Note:
        def __init__(self, text: str) -> None:
            self.text = text

        @hookimpl
        async def toolbus_on_request_start(
            self, messages: list[dict[str, Any]]
        ) -> list[dict[str, Any]]:
            return [*messages, {"role": "system", "content": self.text}]

    class Nothing:
        @hookimpl
        def toolbus_on_request_start(self) -> None:
            return None

    class Broken:
        @hookimpl
        def toolbus_on_request_start(self) -> None:
            raise RuntimeError("boom")

    hooks = CodeHooks([Note("one"), Nothing(), Broken(), Note("two")])
    async with open_session(toolbus, registry(services, [MEMORY_HOOK]), code_hooks=hooks) as s:
        history = await s.start([SYSTEM, USER])

    roles = [m["role"] for m in history]
    assert roles == ["system", "user", "assistant", "tool", "system", "system"]
    assert [m["content"] for m in history[-2:]] == ["one", "two"]


# ---------------------------------------------------------------- on_completion


async def test_on_completion_sees_the_audit_record(
    toolbus: ToolTestKit, services: Services
) -> None:
    recorder = Recorder()
    hooks = CodeHooks([recorder])
    async with open_session(
        toolbus, registry(services), code_hooks=hooks, request_id="req-1"
    ) as session:
        await session.call("user_prefs", {})
    await session.close()  # closing twice reports once

    [(request_id, record)] = recorder.records
    assert request_id == record.request_id == "req-1"
    assert record.outcome == "completed"
    assert [c.tool for c in record.calls] == ["user_prefs"]


async def test_on_completion_sees_failed_sessions_and_its_failures_are_contained(
    toolbus: ToolTestKit, services: Services, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken:
        @hookimpl
        def toolbus_on_completion(self) -> None:
            raise RuntimeError("metrics backend down")

    recorder = Recorder()
    with pytest.raises(ValueError, match="agent loop bug"):
        async with open_session(
            toolbus, registry(services), code_hooks=CodeHooks([Broken(), recorder])
        ):
            raise ValueError("agent loop bug")

    [(_, record)] = recorder.records
    assert (record.outcome, record.error) == ("failed", "ValueError")
    assert any("on_completion hook" in r.getMessage() for r in caplog.records)


async def test_on_completion_runs_for_cancelled_sessions_despite_the_cancellation(
    toolbus: ToolTestKit, services: Services
) -> None:
    seen: list[str] = []

    class Slow:
        @hookimpl
        async def toolbus_on_completion(self, record: AuditRecord) -> None:
            await anyio.lowlevel.checkpoint()  # would raise if not shielded
            seen.append(record.outcome)

    with anyio.CancelScope() as scope:
        async with open_session(toolbus, registry(services), code_hooks=CodeHooks([Slow()])):
            scope.cancel()
            await anyio.lowlevel.checkpoint()
    assert seen == ["cancelled"]


# ---------------------------------------------------------------- compiling


def test_hooks_may_be_sync_or_async_and_take_any_subset_of_arguments() -> None:
    hooks = CodeHooks([DenyPrefs(), AddArgument("a", 1), Shout(), Recorder()])
    assert [len(hooks.on_pre_tool_use), len(hooks.on_post_tool_use)] == [2, 1]
    assert len(hooks.on_completion) == 1 and hooks.on_request_start == ()
    assert hooks.on_pre_tool_use[0].name.startswith("DenyPrefs@")
    assert hooks.on_pre_tool_use[0].name.endswith(".toolbus_on_pre_tool_use")


def test_plugins_can_be_named_for_the_logs() -> None:
    hooks = CodeHooks([("deny-prefs", DenyPrefs())])
    assert hooks.plugins == ("deny-prefs",)
    assert [h.name for h in hooks.on_pre_tool_use] == ["deny-prefs.toolbus_on_pre_tool_use"]


def test_tryfirst_still_moves_a_hook_to_the_front() -> None:
    class Early:
        @hookimpl(tryfirst=True)
        def toolbus_on_pre_tool_use(self) -> None:
            return None

    hooks = CodeHooks([("late", DenyPrefs()), ("early", Early())])
    assert [h.name.split(".")[0] for h in hooks.on_pre_tool_use] == ["early", "late"]


def test_a_misspelt_hook_is_an_error() -> None:
    class Typo:
        @hookimpl
        def toolbus_on_pre_tool_us(self) -> None:
            return None

    with pytest.raises(PluginError, match="toolbus_on_pre_tool_us"):
        CodeHooks([Typo()])


def test_an_argument_the_hook_does_not_have_is_an_error() -> None:
    class Wrong:
        @hookimpl
        def toolbus_on_post_tool_use(self, observation: str) -> None:
            return None

    with pytest.raises(PluginError, match="observation"):
        CodeHooks([Wrong()])


def test_hook_wrappers_are_refused() -> None:
    class Wrapper:
        @hookimpl(wrapper=True)
        def toolbus_on_pre_tool_use(self) -> Any:
            return (yield)

    with pytest.raises(PluginError, match="wrapper"):
        CodeHooks([Wrapper()])


def test_no_code_hooks_at_all() -> None:
    assert not CodeHooks() and not NO_HOOKS
    assert CodeHooks([DenyPrefs()])


async def test_hooks_can_be_plain_async_callables_without_pluggy(
    toolbus: ToolTestKit, services: Services
) -> None:
    async def deny(**_: Any) -> Deny:
        return Deny("no")

    hooks = CompiledHooks(on_pre_tool_use=[CodeHook("deny", deny)])
    async with open_session(toolbus, registry(services), code_hooks=hooks) as session:
        assert (await session.call("user_prefs", {})).observation == "no"


# ---------------------------------------------------------------- installed plugins

PLUGIN_SOURCE = """
from toolbus.hooks import Deny, hookimpl


@hookimpl
def toolbus_register_tools(register):
    pass


@hookimpl
def toolbus_on_pre_tool_use(tool):
    if tool.name == "user_prefs":
        return Deny("Installed plugin says no.")
"""


def entry_point(name: str, value: str) -> metadata.EntryPoint:
    return metadata.EntryPoint(name=name, value=value, group=PLUGIN_GROUP)


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three installed tool plugins: one with code hooks, one without, one broken."""
    (tmp_path / "guard_plugin.py").write_text(PLUGIN_SOURCE, encoding="utf-8")
    (tmp_path / "tools_only_plugin.py").write_text(
        "from toolbus.hooks import hookimpl\n\n\n@hookimpl\ndef toolbus_register_tools(register):\n"
        "    pass\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for module in ("guard_plugin", "tools_only_plugin"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    found = (
        entry_point("tools-only", "tools_only_plugin"),
        entry_point("guard", "guard_plugin"),
        entry_point("broken", "no_such_module_anywhere"),
    )
    monkeypatch.setattr(
        installation, "entry_points", lambda group: found if group == PLUGIN_GROUP else ()
    )


@pytest.mark.usefixtures("installed")
async def test_installed_plugins_contribute_code_hooks(
    toolbus: ToolTestKit, services: Services, caplog: pytest.LogCaptureFixture
) -> None:
    hooks = CodeHooks.installed()

    assert hooks.plugins == ("guard",)
    assert [h.name for h in hooks.on_pre_tool_use] == ["guard.toolbus_on_pre_tool_use"]
    assert any("'broken'" in r.getMessage() and "skipped" in r.getMessage() for r in caplog.records)
    async with open_session(toolbus, registry(services), code_hooks=hooks) as session:
        outcome = await session.call("user_prefs", {})
    assert outcome.observation == "Installed plugin says no."
