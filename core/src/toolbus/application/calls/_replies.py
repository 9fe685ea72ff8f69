"""Publishing one call's answer: redacting secrets, remembering what was sent, logging failures.

Values injected from the environment are secrets: they never reach the bus or
the log, in a whole answer or split across a stream's chunks (:class:`Holdback`).
An unexpected exception is logged in full under a reference, and answered with
the reference only. An answer the bus would not take raises
:class:`AnswerNotPublished`: that is the broker failing, not the tool, and the
host hands the request back rather than answer it with an error.
"""

from __future__ import annotations

import json
import logging
import traceback
import uuid
from collections.abc import Awaitable
from typing import Protocol

from toolbus.application.calls.service import ToolService
from toolbus.domain.calls import wire
from toolbus.domain.calls.input_requests import InputAsk
from toolbus.domain.errors import MessageTooLarge
from toolbus.ports import Bus

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


class Answering(Protocol):
    """What a reply needs of its host: the bus to answer on and the service answering."""

    bus: Bus
    service: ToolService


class Reply:
    """Publishes one call's answer: redacts secrets, remembers what it sent."""

    __slots__ = ("after_execution", "answered", "call_id", "host", "record", "secrets", "sent")

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

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            if secret:
                text = text.replace(secret, "***")
        return text

    async def send(
        self, text: str, after_execution: str | None = None, *, end_of_stream: bool = True
    ) -> None:
        if self.secrets:
            text = self.redact(text)
        properties = {wire.PROP_ID: self.call_id}
        if after_execution is not None and end_of_stream:
            properties[wire.PROP_AFTER_EXECUTION] = after_execution
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
