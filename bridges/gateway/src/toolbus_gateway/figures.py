"""The console's figures for the whole gateway, not one process's.

A gateway may be several processes: ``--workers N`` on one machine, replicas
behind a load balancer. With a state store (which both need) they are one
gateway to their callers, and the console shows them as one:

* **sessions** are counted in the store, where every process holds them
  (:meth:`~toolbus.application.doors.stored.StoredHolder.count`);
* what only a process knows (call counts and latency per tool, its recent
  audit rows, its open event streams) each process publishes under a key of
  its own in the store (namespace :data:`NAMESPACE`), written when it changed
  and at least every :data:`HEARTBEAT` seconds, with a time to live of
  :data:`KEPT`: a process that stops (or is killed) drops out of the figures
  by itself. An index key lists the processes, so that the others are found
  without listing the store.

Without a state store the gateway is one process and the figures are its own.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import anyio
from pydantic import TypeAdapter

from toolbus._internal.throttled_log import ThrottledLog
from toolbus.application.agent.audit import AuditRecord
from toolbus.application.doors.keeping import SESSION
from toolbus.application.doors.stored import StoredHolder
from toolbus.domain.errors import ToolbusError
from toolbus.ports import StateStore
from toolbus_gateway.stats import ToolRate

log = logging.getLogger("toolbus.gateway")

#: The state store namespace processes publish their figures in.
NAMESPACE = "gateway-figures"
#: Seconds between two publications of figures that did not change.
HEARTBEAT = 5.0
#: Seconds a process's figures stay in the store after its last publication.
KEPT = 3 * HEARTBEAT
#: Audit rows each process shows (and publishes).
AUDIT_ROWS = 50
#: Tries of an index update that other processes keep overtaking.
INDEX_TRIES = 16
#: Seconds between two looks at the other processes' figures and the sessions in the
#: store, while a console is open here (and the longest a figure shown is behind).
FIGURES_INTERVAL = 1.0

_INDEX = "processes"

#: How the console names each kind of refused call; every refusal is highlighted.
REFUSALS = {
    "group": "outside the groups",
    "unknown": "unknown tool",
    "state": "wrong state",
    "hook": "denied by a hook",
    "policy": "forbidden by the policy",
    "approval": "not approved",
}


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``1 tool``, ``2 tools``: a count with its noun (``plural`` when not the noun and s)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


@dataclass(frozen=True, slots=True)
class AuditRow:
    """One row of the console's audit table, as any process can show it.

    ``kind`` highlights it: ``denied`` (refused at the start), ``refused`` (a
    call refused), else the session's outcome.
    """

    started_at: datetime
    user: str
    outcome: str
    requested: str
    detail: str
    kind: str


def audit_row(record: AuditRecord) -> AuditRow:
    """What the console shows of one audit record."""
    denied = record.access_denied
    refused = [c for c in record.calls if c.refusal is not None]
    refusals = sorted({REFUSALS.get(str(c.refusal), str(c.refusal)) for c in refused})
    if denied is not None and denied.state is not None:
        detail = f"denied: state {denied.state!r} is not an entry state"
    elif denied is not None:
        detail = f"denied: groups {', '.join(denied.denied_groups)}"
    else:
        detail = (
            f"{counted(len(record.calls), 'call')}, {record.initial_state} → {record.final_state}"
        )
        if refusals:
            detail += f"; refused: {', '.join(refusals)}"
    # A session whose every call was refused did nothing: it is not "completed".
    outcome: str = record.outcome
    if refused and len(refused) == len(record.calls) and record.outcome == "completed":
        outcome = "refused"
    elif refused:
        calls = counted(len(record.calls), "call")
        outcome = f"{record.outcome}, {len(refused)} of {calls} refused"
    requested = "default" if record.requested_groups is None else ", ".join(record.requested_groups)
    kind = "denied" if denied is not None else "refused" if refused else record.outcome
    return AuditRow(
        started_at=record.started_at,
        user=record.user,
        outcome=outcome,
        requested=requested or "(none)",
        detail=detail,
        kind=kind,
    )


@dataclass(frozen=True, slots=True)
class ProcessFigures:
    """What one gateway process publishes of itself."""

    process: str
    rates: tuple[ToolRate, ...] = ()
    audit: tuple[AuditRow, ...] = ()
    event_streams: int = 0


_FIGURES: TypeAdapter[ProcessFigures] = TypeAdapter(ProcessFigures)


def merged_rates(rates: Iterable[Sequence[ToolRate]], limit: int = 50) -> list[ToolRate]:
    """Each tool's figures added up over the processes, busiest first."""
    by_tool: dict[str, list[ToolRate]] = {}
    for each in rates:
        for rate in each:
            by_tool.setdefault(rate.tool, []).append(rate)
    rows = []
    for tool, found in by_tool.items():
        calls = sum(rate.calls for rate in found)
        rows.append(
            ToolRate(
                tool,
                calls,
                sum(rate.errors for rate in found),
                sum(rate.per_minute for rate in found),
                sum(rate.mean_ms * rate.calls for rate in found) / calls if calls else 0.0,
                max(rate.max_ms for rate in found),
            )
        )
    rows.sort(key=lambda row: (-row.per_minute, -row.calls, row.tool))
    return rows[:limit]


def merged_audit(rows: Iterable[Sequence[AuditRow]], limit: int = AUDIT_ROWS) -> list[AuditRow]:
    """The most recent rows of every process, newest first."""
    every = [row for each in rows for row in each]
    every.sort(key=lambda row: row.started_at, reverse=True)
    return every[:limit]


class SharedFigures:
    """This process's figures in the store, and the other processes' (see the module).

    Args:
        store: the state store the gateway's processes share.
        process: this process's name among them (default: a fresh random one).
    """

    def __init__(
        self, store: StateStore, *, process: str | None = None, namespace: str = NAMESPACE
    ) -> None:
        self.store = store
        self.process = process or uuid.uuid4().hex
        self.namespace = namespace

    async def publish(self, figures: ProcessFigures) -> None:
        """Keep ``figures`` for :data:`KEPT` seconds, and make sure the index lists us."""
        value = _FIGURES.dump_json(figures)
        await self.store.put(self.namespace, _key(self.process), value, ttl=KEPT)
        await self._change_index(add=self.process)

    async def others(self) -> list[ProcessFigures]:
        """The figures every other process published and still keeps; processes whose
        figures are gone leave the index."""
        found = []
        gone = []
        for process in await self._listed():
            if process == self.process:
                continue
            entry = await self.store.get(self.namespace, _key(process))
            if entry is None:
                gone.append(process)
                continue
            try:
                found.append(_FIGURES.validate_json(entry.value))
            except ValueError:
                log.warning("the console figures of gateway process %s do not read", process)
        if gone:
            await self._change_index(remove=gone)
        return found

    async def withdraw(self) -> None:
        """This process stops: its figures leave at once rather than after :data:`KEPT`."""
        await self.store.delete(self.namespace, _key(self.process))
        await self._change_index(remove=[self.process])

    async def _listed(self) -> list[str]:
        entry = await self.store.get(self.namespace, _INDEX)
        return [] if entry is None else _processes(entry.value)

    async def _change_index(self, *, add: str | None = None, remove: Sequence[str] = ()) -> None:
        for _ in range(INDEX_TRIES):
            entry = await self.store.get(self.namespace, _INDEX)
            listed = [] if entry is None else _processes(entry.value)
            changed = [process for process in listed if process not in remove]
            if add is not None and add not in changed:
                changed.append(add)
            if changed == listed:
                return
            value = json.dumps(changed).encode()
            if entry is None:
                written = await self.store.create(self.namespace, _INDEX, value)
            else:
                written = await self.store.update(
                    self.namespace, _INDEX, value, version=entry.version
                )
            if written is not None:
                return
        log.warning("could not update the list of gateway processes: too busy")


class WholeGateway:
    """The figures the console shows of the whole gateway: this process's own and, once
    its processes share a store (:meth:`sharing`), the other processes' and the sessions
    held there, as last read.

    Args:
        local: this process's own figures now (its rates, audit rows, event streams).
        clock: the gateway's clock.
    """

    def __init__(self, local: Callable[[], ProcessFigures], clock: Callable[[], float]) -> None:
        self._local = local
        self.clock = clock
        #: With a state store: this process's figures there, the other processes' as
        #: last read, and the sessions the store held when last counted (and when).
        self.shared: SharedFigures | None = None
        self._holder: StoredHolder | None = None
        self.others: list[ProcessFigures] = []
        self._others_read = -float("inf")
        self.stored_sessions = 0
        self._sessions_counted = -float("inf")
        self._sharing: anyio.CancelScope | None = None
        self._log = ThrottledLog(log)

    def sharing(self, shared: SharedFigures, holder: StoredHolder) -> None:
        """The processes share ``shared``'s store, where ``holder`` keeps the sessions."""
        self.shared, self._holder = shared, holder

    def own(self) -> ProcessFigures:
        """What this process publishes of itself for the other processes' consoles."""
        local = self._local()
        return local if self.shared is None else replace(local, process=self.shared.process)

    @property
    def processes(self) -> int:
        """The gateway processes the console's figures are of (this one included)."""
        return 1 + len(self.others)

    def rates(self) -> list[ToolRate]:
        """Call rates per tool, over every process."""
        return merged_rates([self._local().rates, *(o.rates for o in self.others)])

    def audit_rows(self) -> list[AuditRow]:
        """The most recent audit rows, of every process."""
        return merged_audit([self._local().audit, *(o.audit for o in self.others)])

    def event_streams(self) -> int:
        """Event streams open, on every process."""
        return self._local().event_streams + sum(o.event_streams for o in self.others)

    async def refresh(self, *, max_age: float = FIGURES_INTERVAL) -> bool:
        """Read the sessions in the store and the other processes' figures again, unless
        read within ``max_age`` seconds; whether anything the console shows changed.

        A store that does not answer leaves the figures as last read (and says so in
        the log): the console and ``/metrics`` still answer.
        """
        shared, holder = self.shared, self._holder
        if shared is None or holder is None:
            return False
        changed = False
        now = self.clock()
        try:
            if now - self._sessions_counted >= max_age:
                self._sessions_counted = now
                count = await holder.count(SESSION)
                changed = count != self.stored_sessions
                self.stored_sessions = count
            if now - self._others_read >= max_age:
                self._others_read = now
                others = sorted(await shared.others(), key=lambda figures: figures.process)
                changed = changed or others != self.others
                self.others = others
        except ToolbusError as exc:
            self._log.warning(
                "figures", "could not read the gateway's figures in the state store: %s", exc
            )
        return changed

    async def share(self, watched: Callable[[], bool], changed: Callable[[str], None]) -> None:
        """Publish this process's figures while they change (and every heartbeat); while
        ``watched`` (a console is open here), follow the other processes' and the store's
        sessions, marking the panels that show them ``changed``."""
        shared = self.shared
        assert shared is not None, "sharing() first"
        published: ProcessFigures | None = None
        published_at = -float("inf")
        with anyio.CancelScope() as self._sharing:
            while True:
                try:
                    own = self.own()
                    if own != published or self.clock() - published_at >= HEARTBEAT:
                        await shared.publish(own)
                        published, published_at = own, self.clock()
                    if watched() and await self.refresh(max_age=0):
                        for panel in ("audit", "stats", "sessions"):
                            changed(panel)
                except ToolbusError as exc:  # the store is away: the console shows the last
                    self._log.warning(
                        "sharing",
                        "could not share the console's figures through the store: %s",
                        exc,
                    )
                await anyio.sleep(FIGURES_INTERVAL)

    async def withdraw(self) -> None:
        """This process stops: no publication after this, and its figures leave the store."""
        if self._sharing is not None:
            self._sharing.cancel()  # no publication after the withdrawal
        if self.shared is None:
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            try:
                await self.shared.withdraw()
            except ToolbusError as exc:  # they leave by themselves when their time is up
                log.info("could not withdraw the console's figures: %s", exc)


def _key(process: str) -> str:
    return f"process/{process}"


def _processes(value: bytes) -> list[str]:
    try:
        data: Any = json.loads(value)
    except ValueError:
        return []
    return [str(item) for item in data] if isinstance(data, list) else []
