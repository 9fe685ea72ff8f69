"""Per-user places at a front door: sessions, event streams, workflows.

Each kind has its own limit (``[doors]``). A user at the limit is refused a
new place (:class:`~toolbus.domain.errors.LimitReached`, answered 429 with
``Retry-After`` over HTTP, a protocol error over MCP); nobody's place is ever
taken away to make room, least of all another user's.
"""

from __future__ import annotations

from collections.abc import Callable

from toolbus.application.agent.rules import Leave
from toolbus.domain.errors import LimitReached

#: Seconds a refused caller is asked to wait when nothing says when a place frees up.
RETRY_AFTER = 5

#: What each kind of place tells the refused caller to do.
FIXES = {
    "sessions": "close one",
    "streams": "close one",
    "workflows": "end one, or reuse it",
}


class UserPlaces:
    """Places of one kind held in this process, counted per user (streams, requests)."""

    def __init__(self, kind: str, limit: int, *, retry_after: int = RETRY_AFTER) -> None:
        self.kind = kind
        self.limit = limit
        self.retry_after = retry_after
        self._held: dict[str, int] = {}

    def __len__(self) -> int:
        return sum(self._held.values())

    def held_by(self, user: str) -> int:
        return self._held.get(user, 0)

    def take(self, user: str) -> Leave:
        """Take a place for ``user``; call what it returns to give it back (once)."""
        check(self.kind, user, self.held_by(user), self.limit, self.retry_after)
        self._held[user] = self._held.get(user, 0) + 1
        left = False

        def leave() -> None:
            nonlocal left
            if left:
                return
            left = True
            count = self._held.get(user, 0) - 1
            if count > 0:
                self._held[user] = count
            else:
                self._held.pop(user, None)

        return leave


def check(kind: str, user: str, held: int, limit: int, retry_after: int) -> None:
    """Raise :class:`LimitReached` when ``user`` already holds ``limit`` places."""
    if held >= limit:
        raise LimitReached(kind, user, limit, max(1, retry_after), FIXES.get(kind, "close one"))


RetryAfter = Callable[[], int]
