"""Which OTEL_* environments ask toolbus to export spans."""

from __future__ import annotations

import pytest

from toolbus.application.tracing.export import export_from_environment, wanted


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, False),
    ],
)
def test_export_is_wanted_only_when_the_environment_names_it(
    environ: dict[str, str], expected: bool
) -> None:
    assert wanted(environ) is expected


def test_nothing_is_set_up_without_the_variables() -> None:
    assert export_from_environment("calculator", {}) is None
