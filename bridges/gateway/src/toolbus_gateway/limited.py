"""A call a rate limit or a spent budget refused, answered as HTTP says: ``429`` with
``Retry-After``.

Outside a session, a call a limit (``[[limits]]``) or budget (``[[budgets]]``)
refused is answered like the gateway's other errors, ``{"error", "message",
...}``: ``limit-reached`` or ``budget-spent``, naming the ``limit`` and the
seconds to wait (``retry_after``, also the ``Retry-After`` header, in whole
seconds). In a session, where a model reads the observation, it is an outcome
like any refusal, whose ``retry_after`` says the same.
"""

from __future__ import annotations

import math

import orjson

from toolbus import CallOutcome
from toolbus_gateway.gateway import Gateway

#: The error of each refusal that waiting may cure, and the label it is counted under.
ERRORS = {"limit": ("limit-reached", "call-limits"), "budget": ("budget-spent", "budgets")}


def retry_seconds(seconds: float | None) -> int:
    """``Retry-After``'s whole seconds: rounded up, at least 1."""
    return max(1, math.ceil(seconds or 0))


def limited_refusal(gateway: Gateway, outcome: CallOutcome) -> tuple[bytes, int] | None:
    """The JSON body of the ``429`` answer of a call a limit or budget refused, and its
    ``Retry-After`` seconds (the refusal counted); ``None`` for any other outcome."""
    found = ERRORS.get(outcome.refusal or "")
    if found is None:
        return None
    error, counted = found
    gateway.metrics.limited.labels(counted).inc()
    retry = retry_seconds(outcome.retry_after)
    body = {
        "error": error,
        "message": outcome.observation,
        "limit": outcome.limit,
        "tool": outcome.tool,
        "retry_after": retry,
    }
    return orjson.dumps(body), retry
