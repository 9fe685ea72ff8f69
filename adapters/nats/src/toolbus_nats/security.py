"""TLS and credentials: what nats-py's ``connect`` takes for them.

TLS options have the names they have on every broker (``tls``, ``tls_ca``,
``tls_cert``, ``tls_key``, ``tls_check_hostname``; see
``toolbus._internal.broker_tls``), plus NATS's own ``tls_hostname`` and
``tls_handshake_first``. Credentials are a user and password, a token, a
``.creds`` file or an NKey seed file, from the URL or the options; they go to
nats-py apart from the server URLs, which are shown in messages.
"""

from __future__ import annotations

from typing import Any

from toolbus_nats.options import NatsOptions


def security_kwargs(options: NatsOptions) -> dict[str, Any]:
    """Keyword arguments for ``nats.connect``: credentials and TLS."""
    kwargs: dict[str, Any] = {}
    if options.user is not None:
        kwargs["user"] = options.user
        kwargs["password"] = options.password or ""
    if options.token is not None:
        kwargs["token"] = options.token
    if options.credentials:
        kwargs["user_credentials"] = options.credentials
    if options.nkey_seed:
        kwargs["nkeys_seed"] = options.nkey_seed
    context = options.ssl_context()
    if context is not None:
        kwargs["tls"] = context
        if options.tls_hostname:
            kwargs["tls_hostname"] = options.tls_hostname
        kwargs["tls_handshake_first"] = options.tls_handshake_first
    return kwargs
