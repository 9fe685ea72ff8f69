"""What a call passes after its session allowed it: a front door's call steps.

A session decides whether a tool is *offered* (groups, state); a front door
may also check each *call*, once the code hooks had their say and the tool's
argument options are applied. Each concern it checks is one
:class:`CallStep` (the call policy on the arguments, a person's approval),
and the door gives its sessions its steps, in order, as one
:class:`CallSteps` (in its :class:`~toolbus.application.agent.rules.SessionRules`).
Before every call the session runs them:

* a step answers :class:`CallPermitted` (the call goes on to the next step),
  :class:`CallStopped` (the call is refused with an observation the model
  reads, recorded under the step's name; the steps after it do not run), or
  :class:`CallAnswered` (the call is answered without being made: a cached
  answer; the steps after it do not run);
* what permitting steps add (a person must approve the call first; the
  approval it waited for; what to do once the call has ended) accumulates:
  each step sees what the steps before it decided (:attr:`CheckedCall.permitted`),
  and the session is given the sum, whose approval reaches the audit record;
* a step that needs to see how the call ended (to charge its cost, to keep
  its answer) adds an :data:`AfterCall` to what it permits; the session calls
  each with the :class:`CallEnded` once the tool answered (or the cache did).

A door with no steps that apply to a configuration gives its sessions
``None``: nothing runs per call.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from toolbus.application.agent.audit import ApprovalNote, CacheLookup, Refusal
from toolbus.domain.access.policy import ApproveFirst
from toolbus.domain.config.descriptors import ToolDescriptor
from toolbus.domain.config.registry import Registry
from toolbus.domain.errors import Problem, StateStoreError

log = logging.getLogger("toolbus.doors")

#: The names of a door's steps (a stopping step's name is also its ``Refusal``).
StepName = Literal["policy", "approval", "limit", "budget", "cache"]


@dataclass(frozen=True, slots=True)
class CallEnded:
    """How a call that passed the steps ended, for the steps that asked (:data:`AfterCall`).

    ``status`` is ``ok`` or ``error`` (the tool answered with an error); calls
    that fail on the bus, or are cancelled, end no step's business. ``observation``
    and ``after_execution`` are the tool's answer (``ok`` only); ``cost`` what the
    call cost (``[costs]``); ``cached``: a cached answer stood in for the call.
    ``asked``: the call ended asking its caller for input (``input-required``): the
    state its tool sealed, which the call made again with the answers brings back.
    """

    status: Literal["ok", "error"]
    observation: str | None = None
    after_execution: str | None = None
    cost: float | None = None
    cached: bool = False
    asked: str | None = None


#: What a step does once a call it permitted has ended.
AfterCall = Callable[[CallEnded], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class CallPermitted:
    """The call goes on. What a step adds for the steps after it and for the record:

    ``approve_first``: a person must approve the call before it is made (a call
    policy's answer; the approvals step acts on it); ``approval``: the approval
    the call waited for, recorded with the call; ``after``: what to do once the
    call has ended (each step's, in order); ``cache``: ``miss``, the call was
    looked up in the cache and is made.
    """

    approval: ApprovalNote | None = None
    approve_first: ApproveFirst | None = None
    after: tuple[AfterCall, ...] = ()
    cache: CacheLookup | None = None

    def then(self, later: CallPermitted) -> CallPermitted:
        """This and what a later step added; the later one's word wins where both speak."""
        if later is PERMITTED:
            return self
        if self is PERMITTED:
            return later
        return CallPermitted(
            approval=later.approval if later.approval is not None else self.approval,
            approve_first=(
                later.approve_first if later.approve_first is not None else self.approve_first
            ),
            after=self.after + later.after,
            cache=later.cache if later.cache is not None else self.cache,
        )

    async def ended(self, ended: CallEnded) -> None:
        """Tell the steps that asked how the call ended. A step that fails (its store
        away) is logged: the call has been answered, and its answer stands."""
        for after in self.after:
            try:
                await after(ended)
            except (StateStoreError, ValueError) as exc:
                log.warning("after a call, a call step could not do its part: %s", exc)


#: A step's plain yes: nothing added.
PERMITTED = CallPermitted()


@dataclass(frozen=True, slots=True)
class CallStopped:
    """The call is refused.

    ``step`` names the step that stopped it (also the audit record's
    ``refusal``); ``observation`` is what the model reads; ``approval`` the
    approval the call waited for, and ``policy`` the policy that forbade it,
    when there is one; ``retry_after``: seconds after which the same call may
    pass (a door answers it as HTTP's ``Retry-After``), ``None`` when waiting
    does not help.
    """

    step: Refusal
    observation: str
    approval: ApprovalNote | None = None
    policy: str | None = None
    retry_after: float | None = None
    #: The limit or budget that stopped it (steps ``limit`` and ``budget``).
    limit: str | None = None


@dataclass(frozen=True, slots=True)
class CallAnswered:
    """The call is answered without being made: ``observation`` (and ``after_execution``)
    are its answer, as the tool gave it to an earlier call (the cache step's).

    ``permitted`` is what the steps before it decided (the runner fills it in):
    their approval is recorded, and their :data:`AfterCall` s are told.
    """

    step: StepName
    observation: str
    after_execution: str | None = None
    permitted: CallPermitted = PERMITTED


@dataclass(frozen=True, slots=True)
class CheckedCall:
    """One call, as the steps see it. ``arguments`` have the argument options applied.

    ``wait``: the call may wait for a person (calls made for configured hooks
    may not: a request does not start with a question to somebody).
    ``permitted``: what the steps before this one decided.
    """

    user: str
    groups: tuple[str, ...]
    state: str
    request_id: str
    tool_call_id: str | None
    tool: ToolDescriptor
    arguments: Mapping[str, Any]
    registry: Registry
    wait: bool = True
    permitted: CallPermitted = PERMITTED


class CallStep(Protocol):
    """One concern a front door checks of every call; see the module docs.

    ``name`` is short (``policy``, ``approval``): it names the step in the
    audit record of a call it stopped. A step that subclasses this protocol
    inherits the defaults of everything but :meth:`check`.
    """

    name: StepName

    async def check(self, call: CheckedCall) -> CallPermitted | CallStopped | CallAnswered:
        """Let the call go on (adding what later steps and the record need), stop it, or
        answer it."""
        ...

    def applies(self, registry: Registry) -> bool:
        """Whether calls on ``registry`` may need this step (``False``: it is skipped)."""
        return True

    def problems(self, registry: Registry) -> list[Problem]:
        """What in ``registry`` this step cannot work with; at start a door refuses to start
        on a problem, later it logs them."""
        return []

    def close(self) -> None:
        """Let go of what the step holds (files it follows); the door closes its steps."""
        return None


class CallSteps:
    """A door's steps, run in order for each call; see the module docs."""

    __slots__ = ("steps",)

    def __init__(self, steps: Sequence[CallStep]) -> None:
        names = [step.name for step in steps]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"call steps are named once each; given twice: {', '.join(twice)}")
        self.steps: tuple[CallStep, ...] = tuple(steps)

    def on(self, registry: Registry) -> CallSteps | None:
        """The steps calls on ``registry`` pass; ``None`` when none applies (no cost per call)."""
        applying = tuple(step for step in self.steps if step.applies(registry))
        if not applying:
            return None
        return self if len(applying) == len(self.steps) else CallSteps(applying)

    def problems(self, registry: Registry) -> list[Problem]:
        return [problem for step in self.steps for problem in step.problems(registry)]

    async def check(self, call: CheckedCall) -> CallPermitted | CallStopped | CallAnswered:
        """Each step in turn: the first that stops or answers the call ends the run; else
        what every step permitted it with."""
        permitted = call.permitted
        for step in self.steps:
            verdict = await step.check(call)
            if isinstance(verdict, CallStopped):
                if verdict.approval is None and permitted.approval is not None:
                    # Refused after it was approved: the record keeps the approval.
                    verdict = dataclasses.replace(verdict, approval=permitted.approval)
                return verdict
            if isinstance(verdict, CallAnswered):
                if permitted is PERMITTED:
                    return verdict
                return dataclasses.replace(verdict, permitted=permitted)
            if verdict is not PERMITTED:
                permitted = permitted.then(verdict)
                call = dataclasses.replace(call, permitted=permitted)
        return permitted

    def close(self) -> None:
        for step in self.steps:
            step.close()
