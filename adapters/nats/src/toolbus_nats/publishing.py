"""Sending: sizing a message against the server's limit, and storing one in JetStream.

Core NATS publishing is one call into nats-py, made by the bus itself. A
message for a persistent queue is stored in JetStream, and only counts as sent
once its stream confirms it: :func:`store`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping

import nats.errors
import nats.js.errors

from toolbus_nats.errors import translate
from toolbus_nats.provisioning import Streams

#: JetStream stores a message sent twice with the same id once.
MSG_ID = "Nats-Msg-Id"
#: Seconds between attempts to store a message while its stream has no leader.
NO_LEADER_RETRY_WAIT = 0.25
#: Seconds to wait for JetStream's confirmation before sending a message again.
STORE_ATTEMPT_TIMEOUT = 2.0
#: A last attempt shorter than this is not worth making.
MIN_STORE_ATTEMPT = 0.05

_HEADER_OVERHEAD = len(b"NATS/1.0\r\n\r\n")


def headers_size(headers: Mapping[str, str]) -> int:
    """Bytes the properties take on the wire as a NATS header block."""
    size = _HEADER_OVERHEAD
    for key, value in headers.items():
        # ": " and CRLF; encoding only the (rare) non-ASCII values.
        size += len(key) + 4 + (len(value) if value.isascii() else len(value.encode("utf-8")))
    return size


async def store(
    streams: Streams,
    subject: str,
    body: bytes,
    headers: dict[str, str] | None,
    *,
    timeout: float,
    where: str,
) -> None:
    """Publish into JetStream and wait until the stream has stored it.

    The confirmation can be lost with a server that goes away (the client
    moves to another one) and the stream can be without a leader for a few
    seconds in a cluster. Both are waited out, for up to ``timeout`` (the
    ``publish_timeout`` option): the message carries a ``Nats-Msg-Id``, so a
    copy sent again after a lost confirmation is recognised by JetStream and
    stored once. ``where`` names the servers in errors.
    """
    js = streams.js
    headers = {**(headers or {}), MSG_ID: uuid.uuid4().hex}
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            ack = await js.publish(
                subject, body, timeout=min(left, STORE_ATTEMPT_TIMEOUT), headers=headers
            )
            streams.remember(subject, ack.stream)
            return
        except nats.js.errors.NoStreamResponseError as exc:
            if streams.known(subject) is None:
                # No stream holds the subject (nobody subscribed yet): make one,
                # so that this message is kept for the groups that will. The
                # stream is not looked up before publishing, as that needs the
                # cluster's meta leader, which may be away while the stream is not.
                await streams.stream_for(subject)
                continue
            # The stream is electing a leader: nobody stores the subject now.
            if time.monotonic() + NO_LEADER_RETRY_WAIT >= deadline:
                raise translate(exc, f"store a message on {subject!r}", where) from exc
            await asyncio.sleep(NO_LEADER_RETRY_WAIT)
        except nats.errors.TimeoutError as exc:
            # No confirmation: lost with a node, or the stream is busy electing.
            if deadline - time.monotonic() < MIN_STORE_ATTEMPT:
                raise translate(exc, f"store a message on {subject!r}", where) from exc
        except Exception as exc:
            raise translate(exc, f"store a message on {subject!r}", where) from exc
