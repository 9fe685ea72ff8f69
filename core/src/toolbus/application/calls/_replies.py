"""Publishing one call's answer: what the tool returned (a value, a ``ToolResult``, a
stream: :func:`send_result`), secrets redacted, what was sent remembered, failures logged.

Values injected from the environment are secrets: they never reach the bus or
the log, in a whole answer or split across a stream's chunks (:class:`Holdback`).
An unexpected exception is logged in full under a reference, and answered with
the reference only. An answer the bus would not take raises
:class:`AnswerNotPublished`: that is the broker failing, not the tool, and the
host hands the request back rather than answer it with an error
(:func:`settle_unpublished`).
"""

from __future__ import annotations

import inspect
import json
import logging
import traceback
import uuid
from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import Any, Protocol

import anyio

from toolbus._internal.throttled_log import ThrottledLog
from toolbus.application.calls.asking import asking_call
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.application.calls.service import JOIN_STREAM_PARAM, ToolResult, ToolService
from toolbus.domain.calls import wire
from toolbus.domain.calls.input_requests import InputAsk
from toolbus.domain.errors import MessageTooLarge
from toolbus.ports import Bus, Delivery

log = logging.getLogger("toolbus.service")


class AnswerNotPublished(Exception):
    """The bus did not take a message of the answer (the broker is away, say).

    Not raised for an answer too large for the broker, which would be just as
    large the next time: that one is answered with an error like any failure.
    """

    def __init__(self, cause: Exception, *, final: bool) -> None:
        super().__init__(str(cause) or type(cause).__name__)
        #: The message was the answer's last: everything the answer is was made.
        self.final = final


#: Seconds a host waits before handing back a request whose answer the broker refused:
#: an immediate redelivery would most likely meet the same broker.
HAND_BACK_PAUSE = 0.5


async def settle_unpublished(
    delivery: Delivery,
    call_id: str,
    exc: AnswerNotPublished,
    *,
    service: str,
    persistent: bool,
    metrics: ToolbusMetrics,
    warnings: ThrottledLog,
) -> None:
    """The broker would not take the answer: hand the request back where it can go back.

    On a persistent queue the broker delivers it again (to this replica or
    another) and it is answered then; on a non-persistent one it is lost,
    and its caller waits out its timeout. Said once per minute, with a count.
    """
    if persistent:
        metrics.answer_unpublished(service, "handed-back")
        warnings.warning(
            "unpublished",
            "%r: the broker did not take the answer to call %s (%s); the request is "
            "handed back to be answered again",
            service,
            call_id,
            exc,
        )
        await anyio.sleep(HAND_BACK_PAUSE)
        settle = delivery.nack
    else:
        metrics.answer_unpublished(service, "lost")
        warnings.warning(
            "unpublished-lost",
            "%r: the broker did not take the answer to call %s (%s); on a non-persistent "
            "queue nothing can answer it again: its caller waits out its timeout",
            service,
            call_id,
            exc,
        )
        settle = delivery.ack
    try:
        await settle()
    except Exception as failure:
        log.debug("%r: settling call %s failed too: %s", service, call_id, failure)


class Answering(Protocol):
    """What a reply needs of its host: the bus to answer on and the service answering."""

    bus: Bus
    service: ToolService


class Reply:
    """Publishes one call's answer: redacts secrets, remembers what it sent."""

    __slots__ = (
        "after_execution",
        "answered",
        "call_id",
        "cost",
        "host",
        "record",
        "secrets",
        "sent",
    )

    def __init__(self, host: Answering, call_id: str, record: bool) -> None:
        self.host = host
        #: The last message of the answer (an error, or the end of the stream) is out.
        self.answered = False
        self.call_id = call_id
        self.record = record
        self.sent: list[tuple[bytes, dict[str, str]]] = []
        #: Values injected from the environment: never to appear on the bus or in logs.
        self.secrets: list[str] = []
        self.after_execution: str | None = None
        #: What the call cost, as the tool said (a stream's ``ToolResult`` chunks).
        self.cost: float | None = None

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            if secret:
                text = text.replace(secret, "***")
        return text

    async def send(
        self,
        text: str,
        after_execution: str | None = None,
        *,
        end_of_stream: bool = True,
        cost: float | None = None,
    ) -> None:
        if self.secrets:
            text = self.redact(text)
        properties = {wire.PROP_ID: self.call_id}
        if end_of_stream:
            if after_execution is not None:
                properties[wire.PROP_AFTER_EXECUTION] = after_execution
            if cost is not None:
                properties[wire.PROP_COST] = wire.cost_property(cost)
        body = wire.encode_response(text, end_of_stream=end_of_stream)
        try:
            await self._publish(body, properties)
        except MessageTooLarge:
            raise
        except Exception as exc:
            raise AnswerNotPublished(exc, final=end_of_stream) from exc
        self.answered = end_of_stream

    async def error(self, error_type: str, message: str, input: InputAsk | None = None) -> None:
        body = wire.encode_error(error_type, self.redact(message), input)
        if input is not None and self.secrets:  # a secret may be in what the tool asks
            body = self.redact(body.decode()).encode()
        try:
            await self._publish(body, {wire.PROP_ID: self.call_id})
        except Exception as exc:
            raise AnswerNotPublished(exc, final=True) from exc
        self.answered = True

    def _publish(self, body: bytes, properties: dict[str, str]) -> Awaitable[None]:
        # Recorded first: if publishing fails the call is handed back, records and all.
        if self.record:
            self.sent.append((body, properties))
        return self.host.bus.publish(self.host.service.response_queue, body, properties)

    def log_failure(self, exc: BaseException, expose: bool) -> str:
        """Log an unexpected failure in full under a fresh reference; the answer's text.

        The answer names only the reference, unless ``expose``: an exception's
        text can hold anything (a password in a connection string), and the
        answer goes to the caller, and from there to an LLM.
        """
        service = self.host.service.id
        reference = uuid.uuid4().hex[:12]
        details = self.redact("".join(traceback.format_exception(exc)).rstrip())
        log.error(
            "%r: tool raised for call %s (ref %s)\n%s", service, self.call_id, reference, details
        )
        if expose:
            return describe(exc)
        return (
            f"internal error in tool service {service!r} (ref {reference}); "
            "the service's log has the details under this reference"
        )


def secret_forms(value: str) -> set[str]:
    """A secret as injected, and as it reads inside JSON text (escaped)."""
    return {value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}


class Holdback:
    """Holds back a stream's tail that could be the start of a secret split across chunks."""

    def __init__(self, secrets: list[str]) -> None:
        self.secrets = [secret for secret in secrets if secret]
        self.keep = max(map(len, self.secrets), default=1) - 1
        self.pending = ""

    def push(self, text: str) -> str:
        """The part of the stream so far that no secret can straddle; keeps the rest."""
        text = self.pending + text
        cut = max(len(text) - self.keep, 0)
        moved = True
        while moved:
            moved = False
            for secret in self.secrets:
                start = text.find(secret, max(cut - len(secret) + 1, 0))
                if start != -1 and start < cut:  # begins before the cut, ends after it
                    cut, moved = start, True
        self.pending = text[cut:]
        return text[:cut]

    def flush(self) -> str:
        rest, self.pending = self.pending, ""
        return rest


def describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def send_result(
    reply: Reply, result: Any, join_stream: bool, config: Mapping[str, Any] | None = None
) -> None:
    """Answer with what the tool returned: a value, a ``ToolResult``, or a stream (as one
    response when ``join_stream``, or when the call's ``config`` asks for it)."""
    if isinstance(result, str):
        await reply.send(result)
    elif isinstance(result, ToolResult):
        await reply.send(
            wire.observation_text(result.content), result.after_execution, cost=result.cost
        )
    elif (inspect.isasyncgen(result) or isinstance(result, AsyncIterator)) and (
        join_stream or (config is not None and _asks_joined(config))
    ):
        await _send_joined(reply, result)
    elif inspect.isasyncgen(result) or isinstance(result, AsyncIterator):
        # With secrets, hold back what could be a secret's beginning until the
        # next chunk shows whether it is: each message is redacted on its own.
        held = Holdback(reply.secrets) if reply.secrets else None
        asking = asking_call.get()
        async for chunk in result:
            if asking is not None:
                asking.streaming = True  # from now on, too late to ask
            if isinstance(chunk, ToolResult):
                reply.after_execution = chunk.after_execution
                reply.cost = chunk.cost if chunk.cost is not None else reply.cost
                chunk = chunk.content
            text = wire.observation_text(chunk)
            if held is not None:
                text = held.push(text)
            if text:
                await reply.send(text, end_of_stream=False)
        if held is not None and (rest := held.flush()):
            await reply.send(rest, end_of_stream=False)
        # The end is a message of its own: a generator cannot tell us its last
        # chunk in advance, and holding chunks back would defeat streaming.
        await reply.send("", reply.after_execution, cost=reply.cost)
    else:
        await reply.send(wire.observation_text(result))


async def _send_joined(reply: Reply, chunks: AsyncIterator[Any]) -> None:
    """A stream answered as one response, for callers that keep only the first one.

    TrustGraph's non-streaming ``ToolServiceClient.call`` returns the first
    response with the call's id: it would see only the first chunk.
    """
    texts: list[str] = []
    async for chunk in chunks:
        if isinstance(chunk, ToolResult):
            reply.after_execution = chunk.after_execution
            reply.cost = chunk.cost if chunk.cost is not None else reply.cost
            chunk = chunk.content
        texts.append(wire.observation_text(chunk))
    await reply.send("".join(texts), reply.after_execution, cost=reply.cost)


def _asks_joined(config: Mapping[str, Any]) -> bool:
    # TrustGraph's tool CLI may store config values as text: "true" counts too.
    value = config.get(JOIN_STREAM_PARAM)
    return value is True or (isinstance(value, str) and value.lower() == "true")
