"""The service side's per-request metrics, as plain counters behind a collector.

A service host records every request it answers. Through prometheus-client's
``Counter`` and ``Histogram`` that costs a lock per value and a bucket search in
Python, about a tenth of a call's whole cost on the in-memory bus. Here each
host records into its own plain integers (one event loop writes them, so no
lock is needed), and :class:`ServiceCallCollector` turns them into the usual
series when ``/metrics`` is scraped, adding up hosts of the same service:

* ``toolbus_service_calls_total`` (counter; ``service``, ``outcome``)
* ``toolbus_service_call_duration_seconds`` (histogram; ``service``)
* ``toolbus_service_call_errors_total`` (counter; ``service``, ``error_type``)
"""

from __future__ import annotations

import itertools
import threading
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from toolbus.domain.calls.listing import ServedCounts

CALLS = "toolbus_service_calls_total"
DURATION = "toolbus_service_call_duration_seconds"
ERRORS = "toolbus_service_call_errors_total"


class ServiceCallRecorder:
    """Records the calls one service host answers: ``record(seconds, error_type=None)``.

    Written by one event loop only (its host's); read by the collector.
    """

    __slots__ = (
        "_bounds",
        "_error_label",
        "buckets",
        "errors",
        "last_error",
        "ok",
        "seconds",
        "service",
    )

    def __init__(
        self, service: str, bounds: Sequence[float], error_label: Callable[[str], str]
    ) -> None:
        self.service = service
        self._bounds = tuple(bounds)
        self._error_label = error_label
        #: Calls per bucket (not cumulative); the last one is ``+Inf``.
        self.buckets = [0] * (len(self._bounds) + 1)
        self.seconds = 0.0
        self.ok = 0
        #: Failed calls by (capped) error type.
        self.errors: dict[str, int] = {}
        #: The error type of the latest failed call.
        self.last_error: str | None = None

    def record(self, seconds: float, error_type: str | None = None) -> None:
        """One request answered after ``seconds``; ``error_type`` is the wire error type, if any."""
        # ``le`` buckets: the first bound at or above the value.
        self.buckets[bisect_left(self._bounds, seconds)] += 1
        self.seconds += seconds
        if error_type is None:
            self.ok += 1
            return
        self.last_error = error_type
        label = self._error_label(error_type)
        self.errors[label] = self.errors.get(label, 0) + 1

    def counts(self) -> ServedCounts:
        """Everything recorded so far, as one snapshot."""
        errors = sum(self.errors.values())
        return ServedCounts(self.ok + errors, errors, self.seconds, self.last_error)


class ServiceCallCollector:
    """A prometheus collector over every :class:`ServiceCallRecorder` it made."""

    def __init__(self, bounds: Sequence[float], error_label: Callable[[str], str]) -> None:
        self._bounds = tuple(bounds)
        self._error_label = error_label
        self._recorders: list[ServiceCallRecorder] = []
        self._lock = threading.Lock()  # hosts may start on several threads' loops

    def recorder(self, service: str) -> ServiceCallRecorder:
        """A new recorder for one host of ``service``; its counts are reported from now on."""
        recorder = ServiceCallRecorder(service, self._bounds, self._error_label)
        with self._lock:
            self._recorders.append(recorder)
        return recorder

    def describe(self) -> list[Any]:
        """The families' names, so that a registry refuses a duplicate up front."""
        return list(self._families())

    def collect(self) -> Iterator[Any]:
        calls, duration, errors = self._families()
        for service, totals in sorted(self._totals().items()):
            calls.add_metric([service, "ok"], totals.ok)
            calls.add_metric([service, "error"], totals.errors.total())
            bounds = (*self._bounds, float("inf"))
            cumulative = zip(map(_le, bounds), itertools.accumulate(totals.buckets), strict=True)
            duration.add_metric([service], list(cumulative), totals.seconds)
            for error_type, count in sorted(totals.errors.items()):
                errors.add_metric([service, error_type], count)
        yield from (calls, duration, errors)

    def _totals(self) -> dict[str, _Totals]:
        """Counts summed over the hosts of each service."""
        with self._lock:
            recorders = list(self._recorders)
        totals: dict[str, _Totals] = {}
        for recorder in recorders:
            total = totals.get(recorder.service)
            if total is None:
                total = totals[recorder.service] = _Totals([0] * len(recorder.buckets))
            # Copies first: the host's loop may be writing while we read.
            buckets, errors = list(recorder.buckets), dict(recorder.errors)
            total.ok += recorder.ok
            total.seconds += recorder.seconds
            total.buckets = [a + b for a, b in zip(total.buckets, buckets, strict=True)]
            total.errors.update(errors)
        return totals

    @staticmethod
    def _families() -> tuple[Any, Any, Any]:
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

        return (
            CounterMetricFamily(
                CALLS,
                "Requests handled by tool service hosts, by outcome",
                labels=["service", "outcome"],
            ),
            HistogramMetricFamily(
                DURATION, "Time tool service hosts took to answer a request", labels=["service"]
            ),
            CounterMetricFamily(
                ERRORS,
                "Requests tool service hosts answered with an error, by error type",
                labels=["service", "error_type"],
            ),
        )


@dataclass
class _Totals:
    buckets: list[int]
    ok: int = 0
    seconds: float = 0.0
    errors: Counter[str] = field(default_factory=Counter)


def _le(bound: float) -> str:
    """A bucket bound as prometheus-client writes it (``0.005``, ``60.0``, ``+Inf``)."""
    from prometheus_client.utils import floatToGoString

    return cast(Callable[[float], str], floatToGoString)(bound)
