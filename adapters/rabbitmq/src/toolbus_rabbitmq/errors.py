"""aio-pika's exceptions turned into toolbus errors that say what happened and what to do."""

from __future__ import annotations

import aiormq.exceptions

from toolbus.domain.errors import BrokerUnavailable, MessageTooLarge, ToolbusError

HOW_TO_RAISE_MAX_MESSAGE = (
    "raise it with amqp://...?max_message_size=BYTES (the broker's own max_message_size, "
    "128 MiB by default, must allow it too), or send a smaller message"
)


class RabbitMQUnavailable(BrokerUnavailable):
    """The RabbitMQ nodes could not be reached, refused the login, or went away."""


class RabbitMQRefused(ToolbusError):
    """The broker refused an operation: a queue declared otherwise before, no permission,
    or a message it would not take."""


class MessageRefused(MessageTooLarge):
    """The broker refused a message as too large: its limit is below toolbus's own."""

    def __init__(self, size: int, exchange: str, reason: str) -> None:
        self.size = size
        #: The broker's limit is in its reason, not known to the client.
        self.limit = 0
        self.exchange = exchange
        ToolbusError.__init__(
            self,
            f"RabbitMQ refused a message of {size:,} bytes on exchange {exchange!r} ({reason}); "
            "raise the broker's max_message_size in rabbitmq.conf, or lower the adapter's "
            "max_message_size to what the broker accepts",
        )


def too_large(size: int, limit: int) -> MessageTooLarge:
    """The error for a body over the adapter's ``max_message_size``."""
    return MessageTooLarge(size, limit, HOW_TO_RAISE_MAX_MESSAGE)


def translate(exc: Exception, doing: str, where: str) -> Exception:
    """A toolbus error for an aio-pika failure while ``doing`` something at ``where``."""
    if isinstance(exc, ToolbusError):
        return exc
    if isinstance(exc, aiormq.exceptions.ChannelPreconditionFailed):
        return RabbitMQRefused(
            f"cannot {doing}: RabbitMQ said {_reason(exc)}. A queue or exchange of that "
            "name exists with other settings (durable or not, its queue type, its "
            "arguments): delete it (rabbitmqctl delete_queue NAME) or use another name"
        )
    if isinstance(exc, aiormq.exceptions.ChannelAccessRefused):
        return RabbitMQRefused(
            f"cannot {doing}: RabbitMQ refused access ({_reason(exc)}); grant the user "
            "configure, write and read permissions on the vhost for these names "
            "(rabbitmqctl set_permissions)"
        )
    if isinstance(exc, aiormq.exceptions.ChannelLockedResource):
        return RabbitMQRefused(
            f"cannot {doing}: {_reason(exc)}; another connection holds that exclusive queue"
        )
    if isinstance(
        exc, aiormq.exceptions.AuthenticationError | aiormq.exceptions.ProbableAuthenticationError
    ):
        return RabbitMQUnavailable(
            f"cannot {doing}: RabbitMQ at {where} refused the login; check the user, the "
            "password and that the user may use the vhost"
        )
    if isinstance(exc, aiormq.exceptions.DeliveryError):
        return RabbitMQRefused(
            f"cannot {doing}: RabbitMQ did not take the message (it answered the publish "
            "with a nack: a queue over its length limit, or a node out of resources)"
        )
    if isinstance(
        exc,
        aiormq.exceptions.AMQPError
        | aiormq.exceptions.ChannelInvalidStateError
        | ConnectionError
        | OSError
        | TimeoutError,
    ):
        return RabbitMQUnavailable(
            f"cannot {doing}: RabbitMQ at {where} is not reachable now ({_reason(exc)}); "
            "the connection is being restored"
        )
    return exc


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) < 300 else text[:297] + "..."
