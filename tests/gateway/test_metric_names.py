"""Every metric toolbus exposes is named as Prometheus and OpenTelemetry's GenAI conventions say.

``promtool check metrics`` (Prometheus's own linter, from Debian's ``prometheus``
package) reads a scrape with every metric recorded at least once.
"""

from __future__ import annotations

import shutil
import subprocess

from prometheus_client import generate_latest

from tests.support.real_parts import requires
from toolbus_gateway.metrics import GatewayMetrics

#: The tool-groups specification's names, kept as TrustGraph deployments know them.
SPECIFICATION = {
    "agent_tool_group_requests",
    "agent_tool_group_availability",
    "agent_filtered_tools_count",
    "agent_state_transitions",
    "agent_workflow_duration_seconds",
    "agent_state_availability",
    "agent_group_access_denied",
    "agent_invalid_state_transition",
    "agent_privilege_escalation_attempts",
}


def recorded() -> GatewayMetrics:
    """Every metric of a gateway (toolbus's included), each moved at least once."""
    metrics = GatewayMetrics()
    toolbus = metrics.toolbus
    toolbus.session_started(["default"], 3)
    toolbus.access_denied_for(["admin", "*"])
    toolbus.call_refused("shop", "group")
    toolbus.state_changed("shop", "browsing", "paying", 1.5, 2)
    toolbus.session_closed("paying", 2.0)
    toolbus.agent_request_ended("answer", 2)
    toolbus.model_turn("openai", "gpt-test", 1.2, 10, 5)
    toolbus.model_turn("openai", "gpt-test", 0.3, error_type="model-error")
    toolbus.tool_call("shop", "shop-service", 0.1, None)
    toolbus.tool_call("shop", "shop-service", 0.2, "bad-request")
    toolbus.call_retried("shop-service", "unavailable")
    toolbus.service_call("shop-service", 0.1)
    toolbus.service_call("shop-service", 0.1, "tool-service-error")
    metrics.auth_failures.labels("missing").inc()
    metrics.requests.labels("/v1/tools", "200").inc()
    metrics.limited.labels("sessions-per-user").inc()
    metrics.sessions_open.set(1)
    metrics.event_streams.set(1)
    return metrics


def scrape() -> str:
    """What ``/metrics`` says once every metric has moved."""
    return generate_latest(recorded().registry).decode()


def test_every_name_has_the_toolbus_prefix_or_a_convention_s_name() -> None:
    # Family names: counters without their _total.
    names = {family.name for family in recorded().registry.collect()}

    others = {n for n in names if not n.startswith("toolbus_")}
    assert others == SPECIFICATION | {
        "gen_ai_client_operation_duration_seconds",
        "gen_ai_client_token_usage",
    }


@requires(shutil.which("promtool") is not None, "promtool", "apt-get install prometheus")
def test_promtool_finds_nothing_to_say() -> None:
    result = subprocess.run(
        ["promtool", "check", "metrics"],
        input=scrape(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == ""
