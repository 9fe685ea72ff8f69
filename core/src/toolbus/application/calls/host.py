# One job: ServiceHost, a request's way from the queue to its answer (the workers, the
# inline start on Python 3.12+, the drain); the jobs beside that way are private modules.
# The per-call path is kept in one place on purpose: its cost is measured (performance.md).
"""Hosting a tool service on a bus: decode, invoke, answer, ack — and never crash.

Every request gets exactly one outcome. Bad input (not JSON, wrong shape, no
``id``, too large) is answered with a ``bad-request`` error where a reply target
exists, or logged and dropped where it does not; it is acked either way so that
a poison message cannot cause a redelivery storm. A tool that raises answers
with an error and the service goes on: a deliberate ``ToolCallError`` with its
message, anything else with a reference to the log entry that holds the
details. Concurrency is bounded by a semaphore.

Given a :class:`~toolbus.application.identity.CallVerifier`, a host answers
``unauthorized`` to a call without a valid call token before anything runs;
the tool learns its caller from ``current_caller()`` (docs/security.md). A
signed call that waited in an at-least-once queue longer than the verifier's
``max_queue_age`` is moved to the queue's dead letters instead
(:mod:`toolbus.application.calls.dead_letters`).

This module is the worker pool and a call's path through it; the rest of a
call's jobs are private modules beside it: checking callers
(``_token_checks``), answering with what the tool returned, redacted
(``_replies``), the input side of a tool that asks its caller (``_host_asking``), setting
arguments from the environment (``_environment``) and answering redelivered
requests from memory (``_answer_memory``).

On Python 3.12 and later, where the subscription lets a reader stand by
(:class:`~toolbus.ports.StandbySubscription`: the in-memory bus, core NATS),
a request that arrives while the host has room is answered *inline*: the call
that brought it starts the call's task eagerly, so a tool that does not wait
is answered before that call returns, with neither a worker nor the caller
woken in between (about a quarter of an in-memory call; docs/performance.md).
Each such task runs as itself, in the host's context, as a worker's call
would. Python 3.11 has no eager start (the tool's first step would run as the
caller's task, and a cancel scope entered there breaks), so there every
request goes to a worker.

Stopping (``stop()``, SIGTERM in the CLI, or cancellation of ``serve``) first
stops taking new requests from the broker (the subscription's ``stop_intake``:
the broker gives them to the other replicas), then answers what the
subscription already holds and lets calls in flight finish, for up to
``drain_timeout`` seconds in all, then closes the subscription; a call still
running after that is cancelled and, on a persistent queue, goes back to the
broker. So a replica rolled out loses no call, even on a non-persistent queue.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
import os
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anyio
from anyio.abc import TaskStatus

from toolbus._internal.throttled_log import ThrottledLog
from toolbus.application.calls._answer_memory import AnswerMemory
from toolbus.application.calls._environment import inject_environment
from toolbus.application.calls._host_asking import answer_asking, asking_of
from toolbus.application.calls._input_state import DEFAULT_STATE_TTL, InputStates
from toolbus.application.calls._replies import (
    AnswerNotPublished,
    Reply,
    send_result,
    settle_unpublished,
)
from toolbus.application.calls._token_checks import TokenChecks
from toolbus.application.calls.asking import AskingCall, asking_call
from toolbus.application.calls.dead_letters import QUEUED_TOO_LONG, DeadLetters
from toolbus.application.calls.metrics import ToolbusMetrics, default_metrics
from toolbus.application.calls.service import ToolService
from toolbus.application.calls.supervision import supervised
from toolbus.application.identity.caller import serving as _serving
from toolbus.application.identity.verifying import CallVerifier
from toolbus.application.sealing import SealKeys
from toolbus.application.tracing import conventions
from toolbus.application.tracing import propagation as tracing
from toolbus.domain.calls import wire
from toolbus.domain.calls.input_requests import InputRequired, InputUnavailable
from toolbus.domain.calls.listing import ServedCounts
from toolbus.domain.calls.queues import parse_queue
from toolbus.domain.errors import (
    BadRequest,
    DeadlineExceeded,
    QueuedTooLong,
    ToolCallError,
    Unauthorized,
    Unavailable,
    WireError,
)
from toolbus.domain.identity import PROP_CALL_TOKEN
from toolbus.ports import Bus, Delivery, StandbySubscription, Subscription, broker_known_gone

log = logging.getLogger("toolbus.service")

DEFAULT_CONCURRENCY = 64
DEFAULT_MAX_REQUEST_BYTES = 16 * 1024 * 1024
DEFAULT_DRAIN_TIMEOUT = 30.0
#: How many answered calls (and bytes of answers) a host remembers to make
#: redelivered requests idempotent.
DEFAULT_IDEMPOTENCY_CALLS = 10_000
DEFAULT_IDEMPOTENCY_BYTES = 64 * 1024 * 1024
#: Seconds a shutting-down host spends telling a cut-off call's caller so.
CUT_OFF_TIMEOUT = 2.0
#: Requests are answered inline where the interpreter can start a task eagerly.
ANSWERS_INLINE = sys.version_info >= (3, 12)


class ServiceHost:
    """Serves one :class:`ToolService` from its request queue on ``bus``."""

    def __init__(
        self,
        bus: Bus,
        service: ToolService,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        group: str | None = None,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        drain_timeout: float = DEFAULT_DRAIN_TIMEOUT,
        clock: Callable[[], float] = time.time,
        metrics: ToolbusMetrics | None = None,
        environ: Mapping[str, str] = os.environ,
        idempotency_calls: int = DEFAULT_IDEMPOTENCY_CALLS,
        idempotency_bytes: int = DEFAULT_IDEMPOTENCY_BYTES,
        verifier: CallVerifier | None = None,
        expose_errors: bool = False,
        join_stream: bool | None = None,
        seal_keys: SealKeys | None = None,
        input_state_ttl: float = DEFAULT_STATE_TTL,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.bus = bus
        self.service = service
        #: Replicas in one group compete for requests; by default the service id.
        self.group = group or service.id
        self.concurrency = concurrency
        self.max_request_bytes = max_request_bytes
        self.drain_timeout = drain_timeout
        self.clock = clock
        #: Where ``options.envs`` values come from: this process's environment.
        self.environ = environ
        metrics = default_metrics() if metrics is None else metrics
        self._metrics = metrics
        self._call_metrics = metrics.for_service(service.id)
        described: tuple[str, dict[str, Any]] | None = None

        def describe_span() -> tuple[str, dict[str, Any]]:
            nonlocal described
            if described is None:  # once: the same for every request
                described = conventions.served(service.id, service.request_queue, self.group)
            return described

        self._describe_span = describe_span
        persistent = self._persistent = parse_queue(service.request_queue).persistent
        self._answers = (
            AnswerMemory(service, bus, idempotency_calls, idempotency_bytes)
            if persistent and idempotency_calls > 0
            else None
        )
        #: Checks call tokens; None serves every call as its body's (unverified) user.
        self.verifier = verifier
        self._tokens = TokenChecks(service, verifier)
        #: Where signed calls that waited too long go (only where calls can wait).
        self.dead_letters = (
            DeadLetters(bus, service.id, service.request_queue, metrics, clock)
            if verifier is not None and persistent
            else None
        )
        #: Answer unexpected exceptions with their text (development only: it may
        #: hold secrets); by default a generic message and a log reference.
        self.expose_errors = expose_errors
        #: Answer streamed results as one response (None: as the service says).
        self.join_stream = service.join_stream if join_stream is None else join_stream
        #: Seals the state handed to callers the tool asks for input (every replica of the
        #: service needs the same keys: docs/tool-services.md#tools-that-ask).
        self.input_states = InputStates(service.id, seal_keys, ttl=input_state_ttl, clock=clock)
        # A pool of ``concurrency`` workers, each reading the subscription and
        # handling a request inline: no task spawn, semaphore or cancel scope per
        # call, and the fewest event-loop hops per round trip.
        self._idle: set[asyncio.Task[None]] = set()
        self._busy = 0
        #: Calls answered inline that waited (so are still running), for the drain.
        self._inline: set[asyncio.Task[None]] = set()
        #: Workers holding a request while inline calls hold every place (3.12+).
        self._waiting_for_room: deque[asyncio.Future[None]] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._context = contextvars.Context()
        self._stopping = False
        #: Stopping, answer what the subscription holds (not when the broker is gone).
        self._answer_held = True
        self._subscribed = False
        self._stopped: asyncio.Event | None = None
        #: Requests handled so far (answered or dropped), for tests and metrics.
        self.handled = 0
        #: Warnings about bad requests: a burst of them must not flood the log.
        self._warnings = ThrottledLog(log)
        #: Settles a request whose answer the broker would not take (see _replies.py).
        self._not_published = partial(
            settle_unpublished,
            service=service.id,
            persistent=persistent,
            metrics=metrics,
            warnings=self._warnings,
        )

    @property
    def in_flight(self) -> int:
        return self._busy

    def served(self) -> ServedCounts:
        """Requests answered since this host was made, errors, and the time they took."""
        return self._call_metrics.counts()

    @property
    def state(self) -> str:
        """``ok`` while subscribed and taking requests; else ``starting`` or ``stopping``."""
        if self._stopping:
            return "stopping"
        return "ok" if self._subscribed else "starting"

    def stop(self) -> None:
        """Stop taking requests; ``serve`` returns once what was taken is answered."""
        self._stopping = True
        if self._stopped is not None:
            self._stopped.set()

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until stopped or cancelled. Signals ``task_status`` once subscribed."""
        self._stopped = asyncio.Event()
        self._stopping = False
        self._answer_held = True
        subscription = await self.bus.subscribe(self.service.request_queue, group=self.group)
        self._subscribed = True
        requests = aiter(subscription)
        loop = self._loop = asyncio.get_running_loop()
        # Workers are tasks outside any cancel scope of ours: cancelling ``serve``
        # must let calls in flight finish (the drain below).
        workers = [loop.create_task(self._worker(requests)) for _ in range(self.concurrency)]
        standby = (
            subscription
            if ANSWERS_INLINE and isinstance(subscription, StandbySubscription)
            else None
        )
        if standby is not None:
            # Inline calls run in a copy of the host's context, as a worker's would
            # (not the publisher's: a caller's context variables are not the tool's).
            self._context = contextvars.copy_context()
            standby.stand_by(self._take_inline)
        log.info("serving %r on %s", self.service.id, self.service.request_queue)
        try:
            task_status.started()
            await self._stopped.wait()
        finally:
            with anyio.CancelScope(shield=True):
                self.stop()
                if standby is not None:
                    standby.stand_down(self._take_inline)
                await self._drain(subscription, workers)
                await subscription.close()
            self._subscribed = False
            self._warnings.flush()
            log.info("stopped %r", self.service.id)

    async def _worker(self, requests: AsyncIterator[Delivery]) -> None:
        me = asyncio.current_task()
        assert me is not None
        idle = self._idle
        # Stopping does not end the loop: the subscription does, once it has handed
        # out what it holds (stop_intake), unless that cannot be answered any more.
        while self._answer_held or not self._stopping:
            idle.add(me)
            try:
                delivery = await anext(requests)
            except (StopAsyncIteration, asyncio.CancelledError):
                # Subscription closed, or stop() while waiting (a cancel-safe read).
                if self._stopped is not None:
                    self._stopped.set()
                return
            finally:
                idle.discard(me)
            if self._busy >= self.concurrency:  # inline calls hold every place (3.12+)
                await self._room()
            self._busy += 1
            try:
                await self.handle(delivery)
            except Exception:  # handle() answers every failure itself; a worker must not die
                log.exception("%r: unexpected failure handling a request", self.service.id)
            finally:
                # _done(), written out: no further call on the per-call path.
                self._busy -= 1
                self.handled += 1
                if self._waiting_for_room:
                    self._make_room()

    def _done(self) -> None:
        self._busy -= 1
        self.handled += 1
        if self._waiting_for_room:
            self._make_room()

    def _make_room(self) -> None:
        waiting = self._waiting_for_room
        while waiting:
            room = waiting.popleft()
            if not room.done():
                room.set_result(None)
                return

    async def _room(self) -> None:
        """Wait until fewer than ``concurrency`` calls run (a worker holding a request)."""
        while self._busy >= self.concurrency:
            room = asyncio.get_running_loop().create_future()
            self._waiting_for_room.append(room)
            try:
                await room
            except asyncio.CancelledError:
                if room.done() and not room.cancelled():
                    self._make_room()  # woken in the same instant: pass it on
                raise

    def _take_inline(self, delivery: Delivery) -> bool:
        """Start answering ``delivery`` in the call that brought it, if there is room.

        The call's task starts eagerly (Python 3.12+): its first step runs now,
        as itself, and a tool that does not wait is answered before this returns.
        """
        if self._stopping or self._busy >= self.concurrency:
            return False  # held for the workers
        self._busy += 1
        task = _eager_task(self._answer_inline(delivery), self._loop, self._context.copy())
        if not task.done():
            self._inline.add(task)
            task.add_done_callback(self._inline.discard)
        return True

    async def _answer_inline(self, delivery: Delivery) -> None:
        try:
            await self.handle(delivery)
        except Exception:  # handle() answers every failure itself
            log.exception("%r: unexpected failure handling a request", self.service.id)
        finally:
            self._done()

    async def _drain(self, subscription: Subscription, workers: list[asyncio.Task[None]]) -> None:
        """Stop intake, answer what was taken, let calls finish: all within the drain timeout."""
        deadline = time.monotonic() + self.drain_timeout
        if broker_known_gone(self.bus):
            # Nothing more can come, and nothing held can be answered: don't wait for it.
            self._cancel_idle()
        else:
            try:
                await asyncio.wait_for(subscription.stop_intake(), self.drain_timeout)
            except TimeoutError:
                # No time to drain (a command's in-process services use none) is asked
                # for, not a problem; a slow broker is worth a word.
                if self.drain_timeout > 0:
                    log.warning(
                        "%r: the broker did not stop sending requests within %g s",
                        self.service.id,
                        self.drain_timeout,
                    )
                self._cancel_idle()
            except Exception as exc:  # the broker is away: what it holds goes back with it
                log.warning("%r: could not stop taking requests: %s", self.service.id, exc)
                self._cancel_idle()
        remaining = max(0.0, deadline - time.monotonic())
        _, late = await asyncio.wait([*workers, *self._inline], timeout=remaining)
        for worker in late:
            worker.cancel()
        if late:
            log.warning(
                "%r: call(s) still running after %g s were cut off and not acked",
                self.service.id,
                self.drain_timeout,
            )
            await asyncio.wait(late)

    def _cancel_idle(self) -> None:
        # Only workers waiting for a request are cancelled; busy ones finish their call
        # and take no other.
        self._answer_held = False
        for worker in list(self._idle):
            worker.cancel()

    async def handle(self, delivery: Delivery) -> None:
        """Answer one delivery. Never raises except on cancellation."""
        properties = delivery.properties
        call_id = properties.get(wire.PROP_ID)
        if not call_id:
            self._warnings.warning(
                "no-id",
                "%r: dropped a request with no 'id' property: nobody could match the answer",
                self.service.id,
            )
            await delivery.ack()
            return
        answers = self._answers
        if answers is not None:
            # A redelivery repeats the body too; another request that reuses an id does not.
            key = (call_id, hash(delivery.body))
            try:
                if await answers.settle_duplicate(key, delivery):
                    return
            except AnswerNotPublished as exc:
                await self._not_published(delivery, call_id, exc)
                return
        reply = Reply(self, call_id, answers is not None)
        started = time.perf_counter()
        error_type: str | None = None
        try:
            try:
                await self._answer(reply, delivery)
            except AnswerNotPublished:
                raise  # the broker failed, not the tool: below
            except QueuedTooLong as exc:
                error_type = exc.error_type
                await self._dead_letter(delivery, exc)
                await reply.error(exc.error_type, str(exc))
            except ToolCallError as exc:
                error_type = exc.error_type
                if isinstance(exc, Unauthorized):
                    # The reason only: never the token, which could be replayed.
                    log.warning("%r: refused call %s: %s", self.service.id, call_id, exc)
                asked = exc.ask if isinstance(exc, InputRequired | InputUnavailable) else None
                await reply.error(exc.error_type, str(exc), asked)
            except Exception as exc:
                error_type = wire.GENERIC_ERROR
                await reply.error(wire.GENERIC_ERROR, reply.log_failure(exc, self.expose_errors))
            self._call_metrics.record(time.perf_counter() - started, error_type)
            # "unavailable" says "not now": a client sending the call again under
            # the same id should get another try, not this answer again.
            if answers is not None and error_type != Unavailable.error_type:
                answers.remember(key, reply.sent)
            if self._persistent:  # acking a non-persistent delivery does nothing (ports)
                await delivery.ack()
        except anyio.get_cancelled_exc_class():
            if not self._persistent and not reply.answered:
                await self._answer_cut_off(reply)
            raise
        except AnswerNotPublished as exc:
            if answers is not None and exc.final:
                # The answer is whole: the redelivery gets it without running the tool.
                answers.remember(key, reply.sent)
            await self._not_published(delivery, call_id, exc)
        except Exception:
            # The answer could not be published (broker gone?). Leave the message
            # to the broker: nack makes a persistent queue redeliver it.
            log.exception("%r: could not answer call %s; handing it back", self.service.id, call_id)
            try:
                await delivery.nack()
            except Exception:
                log.debug("nack failed too", exc_info=True)
        finally:
            if answers is not None:
                answers.finished(key)

    async def _dead_letter(self, delivery: Delivery, exc: QueuedTooLong) -> None:
        dead_letters = self.dead_letters
        assert dead_letters is not None  # only a verifying host on a persistent queue raises it
        await dead_letters.move(delivery, str(exc), QUEUED_TOO_LONG)

    async def _answer_cut_off(self, reply: Reply) -> None:
        """Tell the caller of a call cut off (by the drain timeout) that it will get no answer.

        A persistent queue hands the request to another replica instead; on a
        non-persistent one it is lost, and its caller would wait its whole timeout.
        """
        message = (
            f"{self.service.id!r} shut down before the call finished (calls in flight get "
            f"{self.drain_timeout:g} s); call again, another replica may take it"
        )
        try:
            # The task is being cancelled: a plain wait, bounded, outside anyio's scopes.
            await asyncio.wait_for(reply.error(Unavailable.error_type, message), CUT_OFF_TIMEOUT)
        except Exception as exc:
            log.debug("%r: could not tell call %s: %s", self.service.id, reply.call_id, exc)

    async def _answer(self, reply: Reply, delivery: Delivery) -> None:
        body = delivery.body
        properties = delivery.properties
        if len(body) > self.max_request_bytes:
            raise BadRequest(
                f"request of {len(body):,} bytes exceeds this service's limit of "
                f"{self.max_request_bytes:,} bytes; send less, or start the service with a "
                "larger max_request_bytes"
            )
        deadline_text = properties.get(wire.PROP_DEADLINE)
        deadline = None if deadline_text is None else _seconds(deadline_text)
        if deadline is not None and deadline <= self.clock():
            raise DeadlineExceeded(
                f"the caller's deadline passed before {self.service.id!r} could start the call"
            )
        try:
            request = wire.decode_request(body)
        except WireError as exc:
            raise BadRequest(str(exc)) from None
        # A request of TrustGraph's 2.4 generation has no user in its body; a
        # toolbus client sends it as a property instead.
        user = request.user or properties.get(wire.PROP_USER) or ""
        tokens = self._tokens
        if self.verifier is None and PROP_CALL_TOKEN not in properties:
            # The usual unverified call: one Caller per user, not one per call.
            caller = tokens.unverified.get(user) or tokens.unverified_caller(user)
        else:
            # Adapters written before the port named the broker's timestamp have none.
            enqueued_at = getattr(delivery, "enqueued_at", None)
            caller = await tokens.identify(properties, reply.call_id, user, body, enqueued_at)
        arguments = request.arguments
        env_names = properties.get(wire.PROP_ENV_ARGS)
        if env_names:
            arguments = inject_environment(
                arguments,
                env_names,
                service=self.service,
                environ=self.environ,
                secrets=reply.secrets,
                warnings=self._warnings,
            )
        asking: AskingCall | None = None
        if request.input is not None or wire.PROP_INPUT_KINDS in properties:
            # The caller can answer a tool that asks, or brings answers: see asking.py.
            asking = asking_of(self.input_states, caller.user, request, properties)
            asking_token = asking_call.set(asking)
        # Set and reset by hand: no context manager (nor coroutine) on the per-call path.
        serving = _serving.set((caller, deadline))
        try:
            if tracing.recording():
                with tracing.hop("server", properties, self._describe_span):
                    result = await self.service.handle(user, request.config, arguments)
                    await send_result(reply, result, self.join_stream, request.config)
            else:
                # What hop() does without a span, spelled out: a context manager here
                # costs a measurable share of an in-memory round trip.
                token = tracing.enter_served(properties)
                try:
                    result = await self.service.handle(user, request.config, arguments)
                    if isinstance(result, str):  # the common case first: no further checks
                        await reply.send(result)
                    else:
                        await send_result(reply, result, self.join_stream, request.config)
                finally:
                    tracing.leave(token)
        except InputRequired as asked:
            await answer_asking(self.input_states, reply, asking, asked, caller.user, request)
        finally:
            _serving.reset(serving)
            if asking is not None:
                asking_call.reset(asking_token)


if sys.version_info >= (3, 12):

    def _eager_task(
        coro: Coroutine[Any, Any, None],
        loop: asyncio.AbstractEventLoop | None,
        context: contextvars.Context,
    ) -> asyncio.Task[None]:
        """A task whose first step runs now, as itself, in ``context``."""
        return asyncio.Task(coro, loop=loop, context=context, eager_start=True)

else:

    def _eager_task(
        coro: Coroutine[Any, Any, None],
        loop: asyncio.AbstractEventLoop | None,
        context: contextvars.Context,
    ) -> asyncio.Task[None]:
        raise RuntimeError("eager tasks need Python 3.12")  # ANSWERS_INLINE is False here


def _seconds(deadline: str) -> float | None:
    try:
        seconds = float(deadline)
    except ValueError:
        return None  # an unreadable deadline is ignored, not fatal
    return seconds if math.isfinite(seconds) else None


@asynccontextmanager
async def running(
    bus: Bus, *services: ToolService, **host_options: Any
) -> AsyncIterator[list[ServiceHost]]:
    """Serve ``services`` on ``bus`` for the duration of the ``async with`` block.

    Every service is subscribed (so requests cannot be missed) before the block
    starts; leaving the block stops them and drains calls in flight.
    """
    hosts = [ServiceHost(bus, service, **host_options) for service in services]
    async with supervised(hosts, lambda host: host.serve, lambda host: host.stop()):
        yield hosts
