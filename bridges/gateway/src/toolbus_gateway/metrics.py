"""The gateway's metrics: the toolbus metrics and its own, in one registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from toolbus.application.calls.metrics import ToolbusMetrics


class GatewayMetrics:
    """The toolbus metrics and the gateway's own, in one registry that ``/metrics`` serves."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.toolbus = ToolbusMetrics(self.registry)
        self.auth_failures = Counter(
            "toolbus_gateway_auth_failures_total",
            "Requests refused for a missing or invalid credential, by reason",
            ["reason"],
            registry=self.registry,
        )
        self.requests = Counter(
            "toolbus_gateway_http_requests_total",
            "HTTP requests answered, by route and status code",
            ["route", "status"],
            registry=self.registry,
        )
        self.sessions_open = Gauge(
            "toolbus_gateway_sessions_open", "Agent sessions held open", registry=self.registry
        )
        self.event_streams = Gauge(
            "toolbus_gateway_event_streams_open",
            "Server-Sent-Event streams open",
            registry=self.registry,
        )
        self.limited = Counter(
            "toolbus_gateway_limited_requests_total",
            "Requests answered 429, by limit",
            ["limit"],
            registry=self.registry,
        )
