"""Every error toolbus raises on purpose derives from :class:`ToolbusError`.

Tool-call failures carry a wire ``type`` (the TrustGraph ``Error.type`` field) so
that a service raising, say, :class:`NotFound` makes the caller's client raise
:class:`NotFound` too. ``tool-service-error`` is TrustGraph's generic type; the
others extend it for production use and are ignored, harmlessly, by TrustGraph.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


class ToolbusError(Exception):
    """Base class of every error toolbus raises deliberately."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a configuration snapshot."""

    where: str  # e.g. "tool 'tell-joke'" or "tool-service 'joke-service'"
    field: str  # the descriptor field at fault, "" when the whole entry is
    message: str  # what is wrong and, where obvious, how to fix it

    def __str__(self) -> str:
        field = f" field '{self.field}'" if self.field else ""
        return f"{self.where}{field}: {self.message}"


class ConfigError(ToolbusError):
    """A configuration snapshot is invalid. Lists *every* problem found, not the first."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        count = len(self.problems)
        lines = [f"invalid configuration ({count} problem{'s' if count != 1 else ''}):"]
        lines += [f"  - {p}" for p in self.problems]
        super().__init__("\n".join(lines))


class WireError(ToolbusError, ValueError):
    """A message body could not be decoded as a tool-service request or response."""


class QueueNameError(ToolbusError, ValueError):
    """A queue name cannot be mapped onto a broker."""


class UnknownTool(ToolbusError, LookupError):
    """No tool of that name is configured."""


class PluginError(ToolbusError):
    """A broker adapter or tool plugin is missing or broken."""


class ToolCallError(ToolbusError):
    """A tool call failed. ``error_type`` is the wire ``error.type``."""

    error_type = "tool-service-error"

    def __init__(self, message: str, *, error_type: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if error_type is not None:
            self.error_type = error_type


class ToolServiceError(ToolCallError):
    """The tool itself failed (TrustGraph's ``tool-service-error``)."""

    error_type = "tool-service-error"


class BadRequest(ToolCallError):
    """The request was malformed: bad JSON, wrong shape, invalid arguments."""

    error_type = "bad-request"


class NotFound(ToolCallError):
    """The thing the tool was asked about does not exist."""

    error_type = "not-found"


class BrokerOptionError(ConfigError, ValueError):
    """A broker URL or connection option is wrong, in any adapter (the in-memory bus too).

    The message names the URL or option and says what to write instead. Built
    from a list of problems like any :class:`ConfigError`, or from one sentence.
    """

    def __init__(self, problems: Iterable[Problem] | str) -> None:
        if isinstance(problems, str):
            self.problems = (Problem("broker options", "", problems),)
            ToolbusError.__init__(self, problems)
        else:
            super().__init__(problems)


class AccessDenied(ToolCallError):
    """This user may not do that: one error for every refusal on access grounds.

    An :class:`~toolbus.application.agent.session.AgentSession` raises it when a
    request asks for tool groups its user may not use (``user`` and ``denied``
    say who and which); a tool service raises it to refuse a caller, and the
    caller's client raises it again (wire type ``access-denied``).
    """

    error_type = "access-denied"

    def __init__(
        self,
        message: str | None = None,
        *,
        user: str = "",
        denied: Iterable[str] = (),
        error_type: str | None = None,
    ) -> None:
        self.user = user
        self.denied: tuple[str, ...] = tuple(denied)
        super().__init__(
            message
            or f"user {user!r} may not use group(s) {', '.join(map(repr, self.denied))}; "
            "ask an administrator to grant them, or request only allowed groups",
            error_type=error_type,
        )


class StateRefused(AccessDenied):
    """A caller asked to start in a state it has not earned.

    A front door lets a caller ask for the states the operator marks as entry
    states; any other state is reached by calls, and resumed only through a
    session the door holds (docs/access-control.md).
    """

    error_type = "state-refused"

    def __init__(self, user: str, state: str, entry_states: Iterable[str]) -> None:
        self.state = state
        entries = ", ".join(map(repr, entry_states)) or "none"
        # The state is the caller's to choose, any length: quote a bounded prefix.
        shown = repr(state) if len(state) <= 64 else f"{state[:64]!r}…"
        super().__init__(
            f"user {user!r} may not start in state {shown}: the entry states are {entries}. "
            "Start in one of them, or continue the session that reached the state",
            user=user,
        )


class SessionNotFound(ToolbusError, LookupError):
    """No session of this user has this id: closed, expired, or someone else's."""

    def __init__(self, session_id: str, fix: str) -> None:
        self.session_id = session_id
        super().__init__(
            f"no open session {session_id[:200]!r}; it was closed, expired after being idle, "
            f"or belongs to someone else. {fix}"
        )


class LimitReached(ToolbusError):
    """A user holds as many places of one kind as a front door allows.

    ``kind`` is ``sessions``, ``streams`` or ``workflows``; ``retry_after`` the
    seconds after which one is likely free again. HTTP doors answer 429 with
    ``Retry-After``; MCP answers a protocol error.
    """

    def __init__(self, kind: str, user: str, limit: int, retry_after: int, fix: str) -> None:
        self.kind = kind
        self.user = user
        self.limit = limit
        self.retry_after = retry_after
        super().__init__(
            f"too many {kind}: user {user!r} already has {limit} open, the most allowed; "
            f"{fix}, or retry after {retry_after} s"
        )


class ApprovalNotFound(ToolbusError, LookupError):
    """No approval with this id is pending for this person to see: decided and gone,
    expired long ago, mistyped, or one they may not decide."""

    def __init__(self, approval_id: str) -> None:
        self.approval_id = approval_id
        super().__init__(
            f"no approval {approval_id[:100]!r} for you; list the ones you may decide "
            "(toolbus approvals list, or GET /v1/approvals)"
        )


class AmbiguousApproval(ToolbusError, LookupError):
    """An id prefix that begins more than one pending approval's id."""

    def __init__(self, prefix: str, candidates: Iterable[str]) -> None:
        self.prefix = prefix
        self.candidates = tuple(candidates)
        listed = "\n".join(f"  {candidate}" for candidate in self.candidates)
        super().__init__(
            f"{prefix[:100]!r} begins the ids of {len(self.candidates)} pending approvals; "
            f"give more of the id:\n{listed}"
        )


class NotAnApprover(ToolbusError):
    """This person may not decide this approval: not among its approvers, or it is their own
    call and callers do not approve their own calls."""

    def __init__(
        self,
        approver: str,
        approval_id: str,
        approvers: Iterable[str],
        *,
        own_call: bool = False,
    ) -> None:
        self.approver = approver
        self.approval_id = approval_id
        named = ", ".join(map(repr, approvers)) or "nobody"
        if own_call:
            super().__init__(
                f"{approver!r} may not decide approval {approval_id[:100]!r}: it is their own "
                f"call, and callers do not approve their own calls (callers-approve in "
                f"[approvals]); it may be decided by {named}"
            )
        else:
            super().__init__(
                f"{approver!r} may not decide approval {approval_id[:100]!r}: its approvers "
                f"are {named} (approvers and [approvals.teams] in toolbus.toml)"
            )


class TaskNotFound(ToolbusError, LookupError):
    """No task with this id for this person: never made, expired, mistyped, or another's."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(
            f"no task {task_id[:100]!r} for you; list yours (toolbus tasks list, or "
            "GET /v1/tasks): a task is kept for a while after it ends, then it is gone"
        )


class TaskClosed(ToolbusError):
    """The task has ended (completed, failed or cancelled): it does not move again."""

    def __init__(self, task_id: str, status: str) -> None:
        self.task_id = task_id
        self.status = status
        super().__init__(f"task {task_id[:100]!r} is {status} already; nothing was changed")


class TaskNotAsking(ToolbusError):
    """Answers were given to a task whose tool asks nothing now."""

    def __init__(self, task_id: str, status: str) -> None:
        self.task_id = task_id
        self.status = status
        super().__init__(
            f"task {task_id[:100]!r} asks nothing now (it is {status}); answer a task while "
            "it is input-required with input_requests, by their keys"
        )


class UnfitAnswers(ToolbusError, ValueError):
    """Answers to a task's questions that do not fit them: keys it never asked, or an
    answer of the wrong shape. Nothing of them was given to the task."""


class ApprovalClosed(ToolbusError):
    """The approval was decided already, it expired, or it was withdrawn (its call will not
    be made): it cannot be decided again."""

    def __init__(
        self, approval_id: str, status: str, by: str | None, *, why: str | None = None
    ) -> None:
        self.approval_id = approval_id
        self.status = status
        if status == "withdrawn":
            reason = f" ({why})" if why else ""
            super().__init__(
                f"approval {approval_id[:100]!r} was withdrawn{reason}: its call will not be "
                "made, so there is nothing to decide; nothing was changed"
            )
            return
        who = f" by {by!r}" if by else ""
        super().__init__(
            f"approval {approval_id[:100]!r} is {status}{who} already; nothing was changed"
        )


class Unauthorized(ToolCallError):
    """The call carried no valid call token, and the service requires one."""

    error_type = "unauthorized"


class DeadlineExceeded(ToolCallError):
    """The caller's deadline passed before the service could start the work."""

    error_type = "deadline-exceeded"


class QueuedTooLong(DeadlineExceeded):
    """A signed call waited in its queue longer than the service's maximum queue age.

    The service does not run it: it moves the request to the queue's dead letters.
    """

    def __init__(self, message: str, *, age: float, limit: float) -> None:
        super().__init__(message)
        self.age = age
        self.limit = limit


class Unavailable(ToolCallError):
    """The service cannot serve now; trying again later may work."""

    error_type = "unavailable"


class InternalError(ToolCallError):
    """An unexpected failure inside the service."""

    error_type = "internal"


class ToolTimeout(ToolCallError, TimeoutError):
    """No (complete) answer arrived within the caller's time limit."""

    error_type = "deadline-exceeded"

    def __init__(self, service: str, seconds: float) -> None:
        self.service = service
        self.seconds = seconds
        super().__init__(
            f"tool service {service!r} did not answer within {seconds:g} s; "
            "check that the service is running on this broker, or raise the timeout"
        )


ERROR_TYPES: dict[str, type[ToolCallError]] = {
    cls.error_type: cls
    for cls in (
        ToolServiceError,
        BadRequest,
        NotFound,
        AccessDenied,
        Unauthorized,
        DeadlineExceeded,
        Unavailable,
        InternalError,
    )
}


def error_for(error_type: str, message: str) -> ToolCallError:
    """The exception matching a wire error type; unknown types keep their name."""
    cls = ERROR_TYPES.get(error_type)
    if cls is None:
        return ToolServiceError(message, error_type=error_type)
    return cls(message)


class MessageTooLarge(ToolbusError, ValueError):
    """A message body is larger than the broker (or the service) accepts."""

    def __init__(self, size: int, limit: int, how_to_raise: str) -> None:
        self.size = size
        self.limit = limit
        super().__init__(
            f"message of {size:,} bytes is larger than the limit of {limit:,} bytes; {how_to_raise}"
        )


class MessageRefused(MessageTooLarge):
    """The broker refused a message as too large: its own limit, below toolbus's, is one
    the client does not know (``limit`` is 0). ``refusal`` says what the broker did and
    where, ``how_to_raise`` what to change."""

    def __init__(self, size: int, refusal: str, how_to_raise: str) -> None:
        self.size = size
        self.limit = 0
        ToolbusError.__init__(self, f"{refusal}; {how_to_raise}")


class BusClosed(ToolbusError, ConnectionError):
    """The bus connection was closed (or lost) while it was being used."""


class BrokerUnavailable(BusClosed):
    """The broker cannot be reached now; the bus is reconnecting and works again once it is back.

    What a publish or subscribe raises while a broker restarts or the network is
    down: the call failed, the bus did not. Sending again later may work (a
    :class:`~toolbus.application.calls.retries.RetryPolicy` does), and work that
    repeats by itself (announcements, pushed configuration) carries on. A plain
    :class:`BusClosed` is final: the bus was closed.
    """


class StateStoreError(ToolbusError):
    """A state store could not do what it was asked."""


class StateStoreUnavailable(StateStoreError, ConnectionError):
    """The state store's engine cannot be reached now (gone, restarting, or too slow).

    The connection keeps trying: the same store works again once its engine is back.
    """


class StateKeyError(StateStoreError, ValueError):
    """A namespace or key a state store cannot hold; the message says which rule it breaks."""


class StateValueTooLarge(StateStoreError, ValueError):
    """A value is larger than the state store accepts."""

    def __init__(self, size: int, limit: int, how_to_raise: str) -> None:
        self.size = size
        self.limit = limit
        super().__init__(
            f"a state value of {size:,} bytes is larger than the limit of {limit:,} bytes; "
            f"{how_to_raise}"
        )
