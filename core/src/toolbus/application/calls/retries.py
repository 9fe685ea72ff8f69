"""Sending a call again when it failed for a passing reason: the opt-in retry policy.

A call is retried when the service answered ``unavailable`` or the request
could not be published (a connection error), with exponential backoff and full
jitter, within the call's own timeout. Only where sending again is safe: on
persistent request queues, where the service answers a repeated call id from
the answers it remembers instead of running the tool twice; on non-persistent
queues only when the caller says the tool is idempotent.

The retrying itself is tenacity's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    stop_before_delay,
    wait_random_exponential,
)

from toolbus.domain.calls.queues import parse_queue
from toolbus.domain.errors import Unavailable

#: What a retry may cure: the service's "not now", or the broker connection.
RETRYABLE: tuple[type[BaseException], ...] = (Unavailable, ConnectionError)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a client sends a failed call again. Give it to ``ToolServiceClient(retry=...)``.

    Args:
        attempts: sends in all, the first included.
        first_wait: seconds the first backoff may take at most (then doubling).
        max_wait: the longest one backoff may take.
        idempotent: also retry calls on non-persistent queues; only for services
            whose tools are safe to run twice, since the first try may have run.
    """

    attempts: int = 3
    first_wait: float = 0.1
    max_wait: float = 2.0
    idempotent: bool = False

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"RetryPolicy attempts is {self.attempts}; it must be at least 1")
        if self.first_wait < 0 or self.max_wait < self.first_wait:
            raise ValueError(
                "RetryPolicy waits must satisfy 0 <= first_wait <= max_wait, "
                f"got first_wait={self.first_wait}, max_wait={self.max_wait}"
            )

    def applies_to(self, request_queue: str) -> bool:
        """Whether a call on ``request_queue`` may be sent again."""
        return self.idempotent or parse_queue(request_queue).persistent

    def retrying(self, budget: float, on_retry: Callable[[BaseException], None]) -> AsyncRetrying:
        """tenacity's loop for one call that may take ``budget`` seconds in all."""

        def before_sleep(state: RetryCallState) -> None:
            if state.outcome is not None and (error := state.outcome.exception()) is not None:
                on_retry(error)

        return AsyncRetrying(
            retry=retry_if_exception_type(RETRYABLE),
            stop=stop_after_attempt(self.attempts) | stop_before_delay(budget),
            wait=wait_random_exponential(multiplier=self.first_wait, max=self.max_wait),
            before_sleep=before_sleep,
            reraise=True,
        )


def error_type_of(error: BaseException) -> str:
    """The label a retry is counted under."""
    return Unavailable.error_type if isinstance(error, Unavailable) else "connection"
