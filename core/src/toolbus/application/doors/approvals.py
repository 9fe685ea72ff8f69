"""Where approvals wait, for every replica of a door: :class:`ApprovalBook`.

An approval (:class:`~toolbus.domain.access.approvals.Approval`) is plain
data in a :class:`~toolbus.ports.StateStore` (namespace ``approvals``): the
configured store when there is one (``state`` in ``toolbus.toml``), so that
whichever replica a decision reaches (the gateway's API and console, the
command line, an MCP client) the call waiting on another replica goes on; a
store in the door's memory otherwise. Decisions are compare-and-set writes,
so of two approvers deciding at once, one wins and the other is told.

The store has no listing, so the book keeps an index of the pending
approvals under one key (their ids, when each expires and whose call it is),
changed by compare-and-set too; an approval whose waiter went away drops out
of the index once its time is up. The index is bounded (``max-pending``), and
so is each user's share of it (``max-pending-per-user``): beyond either, a
call that needs approval is refused rather than queued without end, and one
user's calls cannot take every place.

Nothing here holds an argument's value: an approval keeps what its approvers
may see (secrets redacted) and a digest of the call.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio

from toolbus.domain.access.approvals import (
    DEFAULT_MAX_PENDING,
    DEFAULT_MAX_PENDING_PER_USER,
    Approval,
)
from toolbus.domain.errors import (
    AmbiguousApproval,
    ApprovalClosed,
    ApprovalNotFound,
    StateStoreError,
)
from toolbus.ports import StateEntry, StateStore, WatchableStateStore

log = logging.getLogger("toolbus.approvals")

NAMESPACE = "approvals"
#: The key of the index of pending approvals (ids are hex digits, so never this).
INDEX = "pending-index"
#: Seconds a decided or expired approval stays readable (a resumed run finds it).
RETENTION = 3600.0
#: Seconds between two reads of an approval, on a store that cannot watch.
POLL_INTERVAL = 0.5
_ATTEMPTS = 64
#: Used approvals one process remembers at most (beyond, the oldest are forgotten).
MAX_REMEMBERED_USES = 100_000
#: The shortest id prefix :meth:`ApprovalBook.resolve` takes (git's too): a slip of the
#: finger on one or two characters should not decide somebody's call.
MIN_PREFIX = 4


class ApprovalsFull(StateStoreError):
    """As many approvals are pending as the door keeps (``max-pending``), or as many of
    one user's calls as a user may have waiting (``max-pending-per-user``)."""


#: An index entry: when the approval expires, and the user whose call waits on it.
_Pending = tuple[float, str]


class ApprovalBook:
    """The approvals of one door (and its replicas), kept in ``store``.

    Args:
        store: where approvals are kept; shared by every replica.
        clock: Unix seconds (approvals expire at a time every replica agrees on).
        max_pending: pending approvals kept at most.
        max_pending_per_user: of those, the approvals of one user's calls at most.
    """

    def __init__(
        self,
        store: StateStore,
        *,
        clock: Callable[[], float] = time.time,
        max_pending: int = DEFAULT_MAX_PENDING,
        max_pending_per_user: int = DEFAULT_MAX_PENDING_PER_USER,
        namespace: str = NAMESPACE,
    ) -> None:
        self.store = store
        self.clock = clock
        self.max_pending = max_pending
        self.max_pending_per_user = max_pending_per_user
        self.namespace = namespace
        #: Approvals whose calls this process made, until each leaves the store.
        self._spent: dict[str, float] = {}

    # ------------------------------------------------------------------ reading

    async def get(self, approval_id: str) -> Approval | None:
        found = await self._entry(approval_id)
        return None if found is None else found[0]

    async def _entry(self, approval_id: str) -> tuple[Approval, int] | None:
        if approval_id == INDEX:
            return None
        entry = await self.store.get(self.namespace, approval_id)
        if entry is None:
            return None
        return Approval.from_json(entry.value), entry.version

    async def resolve(self, given: str) -> str:
        """The id of the approval ``given`` names: that id, or, as git takes a commit's,
        the one pending approval whose id begins with it (at least
        :data:`MIN_PREFIX` characters).

        Raises :class:`~toolbus.domain.errors.ApprovalNotFound` when none matches and
        :class:`~toolbus.domain.errors.AmbiguousApproval` when several do.
        """
        if given == INDEX:
            raise ApprovalNotFound(given)
        if await self.get(given) is not None:  # a record that does not open is none
            return given
        if len(given) < MIN_PREFIX:
            raise ApprovalNotFound(given)
        now = self.clock()
        found = sorted(
            approval_id
            for approval_id, (expires_at, _) in (await self._read_index()).items()
            if approval_id.startswith(given) and expires_at > now
        )
        if not found:
            raise ApprovalNotFound(given)
        if len(found) > 1:
            raise AmbiguousApproval(given, found)
        return found[0]

    async def pending(self, viewer: str | None = None) -> list[Approval]:
        """The approvals waiting now, oldest first; with ``viewer``, those they may decide
        or asked for."""
        now = self.clock()
        index = await self._read_index()
        found = []
        for approval_id, (expires_at, _) in sorted(index.items(), key=lambda item: item[1]):
            if expires_at <= now:
                continue
            approval = await self.get(approval_id)
            if approval is None or not approval.open_at(now):
                continue
            if viewer is None or approval.may_decide(viewer) or approval.user == viewer:
                found.append(approval)
        return sorted(found, key=lambda approval: approval.created_at)

    async def waiting_ids(self) -> frozenset[str]:
        """The ids of the approvals pending now, from the index alone (no approval is read)."""
        now = self.clock()
        index = await self._read_index()
        return frozenset(k for k, (expires_at, _) in index.items() if expires_at > now)

    async def changes(self) -> AsyncIterator[None]:
        """Something changed among the pending approvals (one value per change, or more)."""
        store = self.store
        if isinstance(store, WatchableStateStore):
            async with store.watch(self.namespace, INDEX) as states:
                async for _ in states:
                    yield None
        else:
            last: Any = object()
            while True:
                entry = await store.get(self.namespace, INDEX)
                version = None if entry is None else entry.version
                if version != last:
                    last = version
                    yield None
                await anyio.sleep(POLL_INTERVAL)

    # ------------------------------------------------------------------ writing

    async def add(self, approval: Approval) -> Approval:
        """Keep ``approval`` (pending); the one stored under its id already, if any.

        Raises :class:`ApprovalsFull` when as many approvals wait as the book keeps, or
        as many of the same user's calls as a user may have waiting.
        """
        full: list[str] = []

        def admitted(index: dict[str, _Pending]) -> dict[str, _Pending] | None:
            entry = (approval.expires_at, approval.user)
            if approval.id in index:
                return {**index, approval.id: entry}
            if len(index) >= self.max_pending:
                full.append(
                    f"{self.max_pending} calls are waiting for approval already (max-pending "
                    "in [approvals]); decide some of them"
                )
                return None
            mine = sum(1 for _, user in index.values() if user == approval.user)
            if mine >= self.max_pending_per_user:
                full.append(
                    f"{mine} calls of user {approval.user!r} are waiting for approval already "
                    "(max-pending-per-user in [approvals]); wait for their decisions"
                )
                return None
            return {**index, approval.id: entry}

        if not await self._change_index(admitted):
            raise ApprovalsFull(full[-1])
        ttl = approval.expires_at - self.clock() + RETENTION
        created = await self.store.create(self.namespace, approval.id, approval.to_json(), ttl=ttl)
        if created is not None:
            return approval
        stored = await self.get(approval.id)
        if stored is None:  # gone between the two: write it again
            await self.store.put(self.namespace, approval.id, approval.to_json(), ttl=ttl)
            return approval
        if stored.status != "pending":
            await self._unindex(stored.id)
        return stored

    async def decide(
        self,
        approval_id: str,
        approver: str,
        approve: bool,
        note: str | None = None,
        *,
        via: str,
    ) -> Approval:
        """Approve or deny, as ``approver``, whom the calling door authenticated ``via``
        (``api-key``, ``jwt``, ``console``, ``mcp-client``...); the approval as decided.

        Only a door that authenticated the approver calls this: the decision is
        sealed with the door's key, so nobody without it can write one.

        Raises :class:`~toolbus.domain.errors.ApprovalNotFound`,
        :class:`~toolbus.domain.errors.NotAnApprover` or
        :class:`~toolbus.domain.errors.ApprovalClosed`.
        """

        def decided(approval: Approval) -> Approval:
            return approval.decided(approver, approve, note, self.clock(), via=via)

        approval = await self._swap(approval_id, decided)
        await self._unindex(approval_id)
        log.info(
            "approval %s of %r (user %r) %s by %r (%s)",
            approval.id,
            approval.tool,
            approval.user,
            approval.status,
            approver,
            via,
        )
        return approval

    async def expire(self, approval_id: str) -> Approval:
        """Its time is up: expired, unless someone decided it at the last moment."""

        def expired(approval: Approval) -> Approval:
            if approval.status != "pending":
                raise ApprovalClosed(approval.id, approval.status, approval.decided_by)
            return approval.expired(self.clock())

        try:
            approval = await self._swap(approval_id, expired)
        except ApprovalClosed:
            found = await self.get(approval_id)
            if found is None:
                raise ApprovalNotFound(approval_id) from None
            approval = found
        await self._unindex(approval_id)
        return approval

    async def withdraw(self, approval_id: str, why: str) -> Approval | None:
        """The call will not be made (its task was cancelled, its door stopped): a pending
        approval becomes ``withdrawn``, and deciding it then says so. ``why`` is kept as its
        note. The approval as it stands now (decided ones are left as they are); ``None``
        when there is no such approval."""

        def withdrawn(approval: Approval) -> Approval:
            if approval.status != "pending":
                raise ApprovalClosed(approval.id, approval.status, approval.decided_by)
            return approval.withdrawn(self.clock(), why)

        try:
            approval = await self._swap(approval_id, withdrawn)
        except ApprovalNotFound:
            return None
        except ApprovalClosed:
            return await self.get(approval_id)
        await self._unindex(approval_id)
        log.info(
            "approval %s of %r (user %r) withdrawn: %s",
            approval.id,
            approval.tool,
            approval.user,
            why,
        )
        return approval

    async def spend(self, approval_id: str) -> bool:
        """Mark an approved approval used by its call; ``False`` if it was used already.

        The use is also remembered in this process, until the approval leaves the
        store: a store rolled back to the approval's earlier, unused value does not
        let this replica make the call twice.
        """
        now = self.clock()
        if self._spent.get(approval_id, 0.0) > now:
            log.warning(
                "approval %s was used already on this replica; the store says otherwise, "
                "so it was rolled back: the call is refused",
                approval_id,
            )
            return False

        def spent(approval: Approval) -> Approval:
            if approval.used or approval.status != "approved":
                raise ApprovalClosed(approval.id, "used", approval.decided_by)
            return approval.spent()

        try:
            approval = await self._swap(approval_id, spent)
        except (ApprovalClosed, ApprovalNotFound):
            return False
        self._remember_spent(approval_id, approval.expires_at + RETENTION, now)
        return True

    def _remember_spent(self, approval_id: str, until: float, now: float) -> None:
        spent = self._spent
        if len(spent) >= MAX_REMEMBERED_USES:
            for known, expiry in list(spent.items()):
                if expiry <= now:
                    del spent[known]
            while len(spent) >= MAX_REMEMBERED_USES:  # the oldest, in insertion order
                del spent[next(iter(spent))]
        spent[approval_id] = until

    async def wait(self, approval_id: str, until: float) -> Approval | None:
        """The approval once it is decided; ``None`` when ``until`` (Unix seconds) came first.

        Raises :class:`~toolbus.domain.errors.ApprovalNotFound` when the approval
        leaves the store meanwhile (withdrawn, or refused as not sealed by a door).
        """
        with anyio.move_on_after(max(0.0, until - self.clock())):
            store = self.store
            if isinstance(store, WatchableStateStore):
                async with store.watch(self.namespace, approval_id) as states:
                    async for entry in states:
                        decided = _decided(approval_id, entry)
                        if decided is not None:
                            return decided
            else:
                while True:
                    decided = _decided(approval_id, await store.get(self.namespace, approval_id))
                    if decided is not None:
                        return decided
                    await anyio.sleep(POLL_INTERVAL)
        return None

    # ------------------------------------------------------------------ plumbing

    async def _swap(self, approval_id: str, change: Callable[[Approval], Approval]) -> Approval:
        for _ in range(_ATTEMPTS):
            found = await self._entry(approval_id)
            if found is None:
                raise ApprovalNotFound(approval_id)
            current, version = found
            updated = change(current)
            ttl = max(updated.expires_at - self.clock(), 0.0) + RETENTION
            written = await self.store.update(
                self.namespace, approval_id, updated.to_json(), version=version, ttl=ttl
            )
            if written is not None:
                return updated
        raise StateStoreError(f"approval {approval_id!r} kept changing; try again")

    async def _read_index(self) -> dict[str, _Pending]:
        entry = await self.store.get(self.namespace, INDEX)
        return {} if entry is None else _index_of(entry.value)

    async def _unindex(self, approval_id: str) -> None:
        await self._change_index(lambda index: {k: v for k, v in index.items() if k != approval_id})

    async def _change_index(
        self, change: Callable[[dict[str, _Pending]], dict[str, _Pending] | None]
    ) -> bool:
        """Apply ``change`` to the index by compare-and-set; ``False`` if it refused."""
        for _ in range(_ATTEMPTS):
            entry = await self.store.get(self.namespace, INDEX)
            current = {} if entry is None else _index_of(entry.value)
            now = self.clock()
            # Approvals whose waiter went away leave once their time is up.
            current = {k: v for k, v in current.items() if v[0] > now}
            updated = change(current)
            if updated is None:
                return False
            value = json.dumps(updated).encode()
            if entry is None:
                written = await self.store.create(self.namespace, INDEX, value)
            else:
                written = await self.store.update(
                    self.namespace, INDEX, value, version=entry.version
                )
            if written is not None:
                return True
        raise StateStoreError("the index of pending approvals kept changing; try again")


def _index_of(value: bytes) -> dict[str, _Pending]:
    try:
        data = json.loads(value)
    except ValueError:
        log.warning("the index of pending approvals was not JSON; starting it again")
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        str(k): (float(v[0]), v[1])
        for k, v in data.items()
        if isinstance(v, list)
        and len(v) == 2
        and isinstance(v[0], int | float)
        and isinstance(v[1], str)
    }


def _decided(approval_id: str, entry: StateEntry | None) -> Approval | None:
    if entry is None:
        raise ApprovalNotFound(approval_id)
    approval = Approval.from_json(entry.value)
    return None if approval.status == "pending" else approval
