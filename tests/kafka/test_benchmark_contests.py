"""The Kafka rows of the stream and payload benchmarks run, and lose nothing.

``tests/benchmarks/bench_streams.py`` and ``bench_payloads.py`` put toolbus
against a raw aiokafka exchange moving the same bytes. These run both contests
briefly on the session's broker: every call must complete on both sides (no
figure is checked; speed is for the benchmarks to report, not for tests).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.benchmarks import bench_payloads, bench_streams
from tests.benchmarks.raw_exchange import raw_exchange

pytestmark = [pytest.mark.anyio, pytest.mark.broker, pytest.mark.slow]


async def test_the_raw_exchange_answers_each_request_with_its_messages_in_order(
    kafka_url: str,
) -> None:
    responses = [b"first", b"second", b"end"]
    async with raw_exchange("kafka", kafka_url, b"request", responses) as call:
        answers = await asyncio.wait_for(asyncio.gather(*(call() for _ in range(8))), 60)
    assert answers == [responses] * 8


def assert_nothing_lost(rows: list[dict[str, Any]], figures: int) -> None:
    assert len(rows) == figures
    for row in rows:
        assert row["broker"] == "kafka"
        for contestant in ("raw", "toolbus"):
            assert row[contestant]["errors"] == 0, row
            assert row[contestant]["calls"] > 0, row


async def test_the_stream_contest_runs_on_kafka(kafka_url: str) -> None:
    rows = await bench_streams.contest("kafka", kafka_url, seconds=0.3)
    assert_nothing_lost(rows, len(bench_streams.STREAMS) * len(bench_streams.LEVELS))


async def test_the_payload_contest_runs_on_kafka(kafka_url: str) -> None:
    rows = await bench_payloads.contest("kafka", kafka_url, seconds=0.3, plain=False)
    assert_nothing_lost(rows, len(bench_payloads.SIZES) * len(bench_payloads.LEVELS))
