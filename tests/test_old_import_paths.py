"""Modules that moved keep their old import path for one release, with a DeprecationWarning.

Each old path hands out the very same object as the new one and names the new
path in the warning, so a user's code keeps working and says what to change.
"""

from __future__ import annotations

import importlib
import warnings

import pytest

# (old module, a name users import from it, the module that holds it now)
MOVED = [
    ("toolbus.application.client", "ToolServiceClient", "toolbus.application.calls.client"),
    ("toolbus.application.host", "ServiceHost", "toolbus.application.calls.host"),
    ("toolbus.application.service", "ToolService", "toolbus.application.calls.service"),
    (
        "toolbus.application.service_metrics",
        "ServiceCallRecorder",
        "toolbus.application.calls.service_metrics",
    ),
    ("toolbus.application.metrics", "ToolbusMetrics", "toolbus.application.calls.metrics"),
    ("toolbus.application.tools", "Tools", "toolbus.application.calls.tools"),
    ("toolbus.application.supervision", "supervised", "toolbus.application.calls.supervision"),
    ("toolbus.application.session", "AgentSession", "toolbus.application.agent.session"),
    ("toolbus.application.session", "CallOutcome", "toolbus.application.agent.outcomes"),
    ("toolbus.application.audit", "AuditRecord", "toolbus.application.agent.audit"),
    ("toolbus.application.code_hooks", "Deny", "toolbus.application.agent.code_hooks"),
    (
        "toolbus.application.hook_runtime",
        "run_request_start_hooks",
        "toolbus.application.agent.configured_hooks",
    ),
    (
        "toolbus.application.config_service",
        "ConfigService",
        "toolbus.application.live.config_service",
    ),
    ("toolbus.application.config_store", "StoreLocked", "toolbus.application.live.config_store"),
    ("toolbus.application.config_client", "ConfigClient", "toolbus.application.live.config_client"),
    ("toolbus.application.live_registry", "LiveRegistry", "toolbus.application.live.registry"),
    ("toolbus.application.announcements", "Announcer", "toolbus.application.live.announcements"),
    ("toolbus.application.companions", "Companion", "toolbus.application.live.companions"),
    ("toolbus.application.tracing", "current_trace", "toolbus.application.tracing.propagation"),
    ("toolbus.domain.wire", "ToolRequest", "toolbus.domain.calls.wire"),
    ("toolbus.domain.queues", "QueueName", "toolbus.domain.calls.queues"),
    ("toolbus.domain.arguments", "ArgumentOptions", "toolbus.domain.calls.arguments"),
    ("toolbus.domain.naming", "sanitize_toolname", "toolbus.domain.calls.naming"),
    ("toolbus.domain.trace_context", "TraceContext", "toolbus.domain.calls.trace_context"),
    ("toolbus.domain.schemas", "export_tools", "toolbus.domain.config.schemas"),
    ("toolbus.domain.config", "load_registry", "toolbus.domain.config.loading"),
    ("toolbus.domain.config", "ServiceDescriptor", "toolbus.domain.config.descriptors"),
    ("toolbus.domain.config", "parse_json", "toolbus.domain.config.parsing"),
    ("toolbus.domain.config", "read_snapshot", "toolbus.application.live.config_files"),
    ("toolbus.domain.registry", "Registry", "toolbus.domain.config.registry"),
    ("toolbus.domain.config_items", "ConfigRejected", "toolbus.domain.live.items"),
    ("toolbus.domain.layers", "overlay", "toolbus.domain.live.layers"),
    ("toolbus.domain.live_settings", "LiveSettings", "toolbus.domain.live.settings"),
    ("toolbus.domain.announcements", "Announcement", "toolbus.domain.live.announcements"),
    ("toolbus.domain.access", "check_access", "toolbus.domain.access.check"),
    ("toolbus.domain.permissions", "Permissions", "toolbus.domain.access.permissions"),
    ("toolbus.domain.hook_config", "parse_hooks", "toolbus.domain.hooks.configured"),
    ("toolbus.domain.injection", "inject", "toolbus.domain.hooks.injection"),
    ("toolbus.cli.serving", "plan_services", "toolbus.cli.serve_plan"),
    ("toolbus_kafka.topics", "TopicManager", "toolbus_kafka.provisioning"),
    ("toolbus_nats.buffer", "DeliveryBuffer", "toolbus.delivery_buffer"),
]


@pytest.mark.parametrize(("old", "name", "new"), MOVED)
def test_an_old_path_still_works_and_says_where_to_go(old: str, name: str, new: str) -> None:
    with pytest.warns(DeprecationWarning, match=rf"from {old} is deprecated.* from {new}$"):
        value = getattr(importlib.import_module(old), name)

    assert value is getattr(importlib.import_module(new), name)


def test_the_warning_points_at_the_importing_line() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from toolbus.application.client import ToolServiceClient  # noqa: F401

    assert [w.filename for w in caught] == [__file__]


def test_an_old_path_does_not_invent_names() -> None:
    module = importlib.import_module("toolbus.application.client")

    with pytest.raises(AttributeError, match=r"toolbus\.application\.client.*no_such_name"):
        module.no_such_name  # noqa: B018


def test_the_new_paths_import_without_warnings() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _, name, new in MOVED:
            getattr(importlib.import_module(new), name)


@pytest.mark.parametrize("module", ["toolbus", "toolbus.domain.errors"])
def test_tool_access_denied_is_the_one_access_denied_with_a_warning(module: str) -> None:
    with pytest.warns(DeprecationWarning, match="ToolAccessDenied is deprecated.*use AccessDenied"):
        old = getattr(importlib.import_module(module), "ToolAccessDenied")  # noqa: B009

    from toolbus import AccessDenied

    assert old is AccessDenied
    refused = AccessDenied("no", user="bob", denied=["admin"])
    assert refused.error_type == "access-denied" and refused.denied == ("admin",)


@pytest.mark.parametrize("module", ["toolbus", "toolbus.application.calls.tools"])
def test_tool_invocation_is_call_result_with_a_warning(module: str) -> None:
    with pytest.warns(DeprecationWarning, match="ToolInvocation is deprecated.*use CallResult"):
        old = getattr(importlib.import_module(module), "ToolInvocation")  # noqa: B009

    from toolbus import CallResult

    assert old is CallResult
    with pytest.warns(DeprecationWarning, match=r"CallResult\.text is deprecated"):
        assert CallResult("it rained").text == "it rained"
