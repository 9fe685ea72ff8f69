"""Trace context across hops, and OpenTelemetry spans when an SDK is configured."""
