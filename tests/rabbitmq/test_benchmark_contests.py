"""The RabbitMQ row of the side-by-side benchmark runs, and loses nothing.

``tests/benchmarks/side_by_side.py`` puts toolbus against raw aio-pika and
FastStream's RabbitBroker; this runs the contest briefly on the session's node:
every contestant must answer every call (no figure is checked; speed is for
the benchmark to report, not for tests).
"""

from __future__ import annotations

import importlib.util

import pytest

from tests.benchmarks.side_by_side import contest
from tests.support.real_parts import requires

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.broker,
    pytest.mark.slow,
    requires(
        importlib.util.find_spec("faststream") is not None,
        "FastStream (the contest's other contestant)",
        "uv sync --group bench",
    ),
]


async def test_the_side_by_side_contest_runs_on_rabbitmq(rabbitmq_url: str) -> None:
    rows = await contest("rabbitmq", rabbitmq_url, seconds=0.6)

    assert sorted(row.contestant for row in rows) == ["FastStream", "raw", "toolbus"]
    for row in rows:
        assert set(row.figures) == {1, 64}
        for figure in row.figures.values():
            assert figure.errors == 0 and figure.calls > 0, (row.contestant, figure)
