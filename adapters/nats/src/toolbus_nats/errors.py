"""nats-py exceptions turned into toolbus errors that say what happened and what to do."""

from __future__ import annotations

import nats.errors
import nats.js.errors

from toolbus.domain.errors import BrokerUnavailable, BusClosed, MessageTooLarge, ToolbusError

HOW_TO_RAISE_MAX_PAYLOAD = (
    "raise 'max_payload' in the nats-server configuration (for example 'max_payload: 8MB'; "
    "NATS accepts at most 64MB) and reconnect, or send a smaller message"
)


class JetStreamError(ToolbusError):
    """JetStream refused a request (stream or consumer set-up, storing a message)."""


def too_large(size: int, limit: int) -> MessageTooLarge:
    """The error for a message (body plus properties) over the server's max payload."""
    return MessageTooLarge(size, limit, HOW_TO_RAISE_MAX_PAYLOAD)


def translate(exc: Exception, doing: str, servers: str) -> Exception:
    """A toolbus error for a nats-py failure while ``doing`` something."""
    if isinstance(exc, nats.errors.ConnectionClosedError):
        return BusClosed(f"cannot {doing}: the NATS connection to {servers} is closed")
    if isinstance(exc, nats.errors.OutboundBufferLimitError):
        return BrokerUnavailable(
            f"cannot {doing}: the NATS server at {servers} is unreachable and the reconnect "
            "buffer is full; wait for the server to come back, or raise the 'reconnect_buffer' "
            "option"
        )
    if isinstance(exc, nats.errors.MaxPayloadError):
        return JetStreamError(f"cannot {doing}: the message is larger than the server accepts")
    if isinstance(
        exc, nats.js.errors.NoStreamResponseError | nats.js.errors.ServiceUnavailableError
    ):
        return JetStreamError(
            f"cannot {doing}: JetStream does not answer on {servers}; persistent:// queues need "
            "a nats-server started with JetStream enabled (-js), or use non-persistent:// "
            "queues. In a cluster, the queue's stream may have no leader for a while (one of "
            "its replicas' servers is down and the rest have not elected a new one, or too "
            "few are up): check 'nats stream info' and raise 'publish_timeout' to wait longer"
        )
    if isinstance(exc, nats.errors.TimeoutError | TimeoutError):
        return BrokerUnavailable(
            f"cannot {doing}: the NATS server at {servers} did not answer in time "
            "(it may be restarting); a message being stored may or may not have been kept"
        )
    if isinstance(exc, nats.js.errors.APIError):
        return JetStreamError(
            f"cannot {doing}: JetStream said: {exc.description} (code {exc.err_code})"
        )
    if isinstance(exc, nats.errors.Error):
        # The connection's other failures (no server, a stale connection) pass.
        return BrokerUnavailable(f"cannot {doing} on NATS at {servers}: {exc}")
    return exc
