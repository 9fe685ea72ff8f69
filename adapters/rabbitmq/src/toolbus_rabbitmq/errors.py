"""aio-pika's exceptions turned into toolbus errors that say what happened and what to do."""

from __future__ import annotations

import aiormq.exceptions

from toolbus.domain.errors import BusClosed, MessageRefused, MessageTooLarge, ToolbusError

HOW_TO_RAISE_MAX_MESSAGE = (
    "raise it with amqp://...?max_message_size=BYTES (the broker's own max_message_size, "
    "128 MiB by default, must allow it too), or send a smaller message"
)


class RabbitMQUnavailable(BusClosed):
    """The RabbitMQ nodes could not be reached, refused the login, or went away."""


class RabbitMQRefused(ToolbusError):
    """The broker refused an operation: a queue declared otherwise before, no permission,
    or a message it would not take."""


def message_refused(size: int, exchange: str, reason: str) -> MessageRefused:
    """The broker refused a message of ``size`` bytes on ``exchange`` as too large."""
    return MessageRefused(
        size,
        f"RabbitMQ refused a message of {size:,} bytes on exchange {exchange!r} ({reason})",
        "raise the broker's max_message_size in rabbitmq.conf, or lower the adapter's "
        "max_message_size to what the broker accepts",
    )


def too_large(size: int, limit: int) -> MessageTooLarge:
    """The error for a body over the adapter's ``max_message_size``."""
    return MessageTooLarge(size, limit, HOW_TO_RAISE_MAX_MESSAGE)


#: What to check when RabbitMQ refuses the login.
CHECK_LOGIN = "check the user, the password and that the user may use the vhost"


def login_refused(exc: BaseException) -> bool:
    """Whether ``exc`` is RabbitMQ refusing the login (not the node being away)."""
    return isinstance(
        exc, aiormq.exceptions.AuthenticationError | aiormq.exceptions.ProbableAuthenticationError
    )


def why_not_connected(exc: BaseException) -> str:
    """What one node's failure to connect was, in a few words (no advice: the caller
    gives it once for every node)."""
    return "refused the login" if login_refused(exc) else reason(exc)


def translate(exc: Exception, doing: str, where: str) -> Exception:
    """A toolbus error for an aio-pika failure while ``doing`` something at ``where``."""
    if isinstance(exc, ToolbusError):
        return exc
    if isinstance(exc, aiormq.exceptions.ChannelPreconditionFailed):
        return RabbitMQRefused(
            f"cannot {doing}: RabbitMQ said {reason(exc)}. A queue or exchange of that "
            "name exists with other settings (durable or not, its queue type, its "
            "arguments): delete it (rabbitmqctl delete_queue NAME) or use another name"
        )
    if isinstance(exc, aiormq.exceptions.ChannelAccessRefused):
        return RabbitMQRefused(
            f"cannot {doing}: RabbitMQ refused access ({reason(exc)}); grant the user "
            "configure, write and read permissions on the vhost for these names "
            "(rabbitmqctl set_permissions)"
        )
    if isinstance(exc, aiormq.exceptions.ChannelLockedResource):
        return RabbitMQRefused(
            f"cannot {doing}: {reason(exc)}; another connection holds that exclusive queue"
        )
    if login_refused(exc):
        return RabbitMQUnavailable(
            f"cannot {doing}: RabbitMQ at {where} refused the login; {CHECK_LOGIN}"
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
            f"cannot {doing}: RabbitMQ at {where} is not reachable now ({reason(exc)}); "
            "the connection is being restored"
        )
    return exc


def reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) < 300 else text[:297] + "..."
