"""What the console is told: which panels changed (:class:`ConsoleChanges`), and the recent
audit records it shows (:class:`RecentAudit`)."""

from __future__ import annotations

from collections import deque

import anyio

from toolbus.application.agent.audit import AuditEntry, AuditRecord, LoggingAuditSink
from toolbus_gateway.events import Event, Topic

#: Audit records the console keeps for its "recent" table.
RECENT_AUDIT = 200


class ConsoleChanges:
    """Tells the console which panels changed, at most once per panel per ``interval``.

    Changes are marked as they happen and sent by :meth:`run`: a busy gateway
    (a hundred calls a second) then costs each open console one event per
    panel per interval, not one per call.
    """

    def __init__(self, topic: Topic, interval: float = 0.5) -> None:
        self.topic = topic
        self.interval = interval
        self._dirty: dict[str, None] = {}
        self._wake = anyio.Event()

    def mark(self, panel: str) -> None:
        self._dirty[panel] = None
        self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            changed, self._dirty = list(self._dirty), {}
            for panel in changed:
                self.topic.publish(Event(panel))
            await anyio.sleep(self.interval)


class RecentAudit:
    """The audit sink of the gateway: the log, and the console's recent records."""

    def __init__(self, changes: ConsoleChanges, keep: int = RECENT_AUDIT) -> None:
        self.records: deque[AuditRecord] = deque(maxlen=keep)
        self._log = LoggingAuditSink()
        self._changes = changes

    def emit(self, record: AuditEntry) -> None:
        self._log.emit(record)
        if isinstance(record, AuditRecord):
            self.records.appendleft(record)
            self._changes.mark("audit")
