"""TLS and authentication: what ``pulsar.Client`` takes for them.

TLS options have the names they have on every broker (``tls``, ``tls_ca``,
``tls_cert``, ``tls_key``, ``tls_check_hostname``; see
``toolbus._internal.broker_tls``), plus ``tls_allow_insecure``; TLS itself is
the ``pulsar+ssl`` scheme of the service URL (see :func:`~toolbus_pulsar.options.parse_options`).
A client certificate is Pulsar's TLS authentication, one of the authentication
methods, of which one may be configured: a token (or a token file, read again on
every connection so that a rotated token is picked up), OAuth 2, basic, or TLS.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulsar

from toolbus_pulsar.options import PulsarOptions


def security_arguments(options: PulsarOptions) -> dict[str, Any]:
    """Keyword arguments for ``pulsar.Client``: TLS and authentication."""
    arguments: dict[str, Any] = {
        "tls_allow_insecure_connection": options.tls_allow_insecure,
        "tls_validate_hostname": options.tls_check_hostname,
    }
    if options.tls_ca:
        arguments["tls_trust_certs_file_path"] = options.tls_ca
    method = authentication(options)
    if method is not None:
        arguments["authentication"] = method
    return arguments


def authentication(options: PulsarOptions) -> pulsar.Authentication | None:
    """The one authentication method configured, if any."""
    if options.token is not None:
        return pulsar.AuthenticationToken(options.token)
    if options.token_file is not None:
        path = Path(options.token_file)
        # Read on every (re)connection, so that a rotated token is picked up.
        return pulsar.AuthenticationToken(lambda: path.read_text().strip())
    if options.oauth2 is not None:
        return pulsar.AuthenticationOauth2(options.oauth2)
    if options.basic_username is not None:
        return pulsar.AuthenticationBasic(options.basic_username, options.basic_password or "")
    if options.tls_cert is not None and options.tls_key is not None:
        return pulsar.AuthenticationTLS(options.tls_cert, options.tls_key)
    return None
