"""Errors of the Pulsar adapter, and pulsar-client failures translated into them.

pulsar-client reports a failure as a bare result code (``Timeout``), either as
an exception from a blocking call or as a result handed to a callback. Users
get an error that says what we were doing, where, and what to try next.
"""

from __future__ import annotations

import pulsar

from toolbus.domain.errors import BrokerUnavailable, BusClosed, ToolbusError

#: Result codes that mean "the broker cannot be reached or did not answer in time".
UNREACHABLE_RESULTS = frozenset(
    {
        pulsar.Result.Timeout,
        pulsar.Result.ConnectError,
        pulsar.Result.NotConnected,
        pulsar.Result.ServiceUnitNotReady,
        pulsar.Result.LookupError,
    }
)
_ACCESS = frozenset({pulsar.Result.AuthenticationError, pulsar.Result.AuthorizationError})


class PulsarAdapterError(ToolbusError):
    """A Pulsar operation failed; the message names the operation, the broker and the result."""

    def __init__(self, message: str, result: pulsar.Result | None = None) -> None:
        super().__init__(message)
        #: pulsar-client's result code, when the failure came from the client.
        self.result = result


class BrokerUnreachable(PulsarAdapterError, BrokerUnavailable):
    """The broker could not be reached (or did not answer) in time."""


def result_of(exc: BaseException) -> pulsar.Result:
    """The result code of an exception raised by a blocking pulsar-client call.

    pulsar-client raises one exception class per result code, named after it.
    """
    result: pulsar.Result = getattr(pulsar.Result, type(exc).__name__, pulsar.Result.UnknownError)
    return result


def unreachable(url: str, seconds: float, result: pulsar.Result | None = None) -> BrokerUnreachable:
    """The error for a broker that did not answer ``connect`` within ``seconds``."""
    detail = f" ({result.name})" if result is not None else ""
    return BrokerUnreachable(
        f"cannot reach the Pulsar broker at {url} within {seconds:g} s{detail}; check that it "
        "is running and that the URL is right, or raise the 'connect_timeout' option",
        result,
    )


def translate(result: pulsar.Result, action: str, url: str, timeout: float) -> ToolbusError:
    """A toolbus error for pulsar-client's ``result`` while doing ``action`` on ``url``."""
    if result == pulsar.Result.AlreadyClosed:
        return BusClosed(f"could not {action}: the connection to {url} is closed")
    if result in UNREACHABLE_RESULTS:
        return BrokerUnreachable(
            f"could not {action} on {url} within {timeout:g} s ({result.name}); the broker may "
            "be down or overloaded: check it, or raise the 'operation_timeout' option",
            result,
        )
    if result in _ACCESS:
        return PulsarAdapterError(
            f"could not {action} on {url}: {result.name}; check the credentials "
            "(token, token_file, oauth2, basic_username, tls_cert) and the broker's "
            "permissions for this topic",
            result,
        )
    return PulsarAdapterError(f"could not {action} on {url}: {result.name}", result)
