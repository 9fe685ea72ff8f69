"""The TLS options every broker adapter takes, by the same names, and the context they make.

=====================  ============================================================
``tls``                use TLS (a TLS URL scheme, ``nats+tls://``, says so too)
``tls_ca``             CA file to verify the server with; default: the system's
``tls_cert``           client certificate, for mutual TLS
``tls_key``            the client certificate's key, when not in ``tls_cert``'s file
``tls_check_hostname`` check that the server's certificate names its host
=====================  ============================================================

Giving ``tls_ca`` or ``tls_cert`` asks for TLS as much as ``tls`` does. An
adapter's options inherit :class:`TlsOptions` and add what only its client has
(``tls_key_password``, ``tls_hostname``, ...); its ``security`` module turns them
into what the client takes.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator

from toolbus._internal.broker_options import BrokerOptions, Flag, Text


class TlsOptions(BrokerOptions):
    """A broker's options with the TLS ones every broker shares."""

    tls: Flag = False
    tls_ca: Text | None = None
    tls_cert: Text | None = None
    tls_key: Text | None = None
    tls_check_hostname: Flag = True

    @property
    def uses_tls(self) -> bool:
        """Whether the connection is to use TLS: asked for, or implied by a CA or certificate."""
        return self.tls or self.tls_ca is not None or self.tls_cert is not None

    def conflicts(self) -> Iterator[tuple[str, str]]:
        yield from super().conflicts()
        if self.tls_key is not None and self.tls_cert is None:
            yield "tls_key", "needs 'tls_cert' (the client certificate)"

    def ssl_context(self, key_password: str | None = None) -> ssl.SSLContext | None:
        """The client's TLS context, from the system's CAs unless ``tls_ca``; None without TLS.

        ``key_password`` unlocks an encrypted ``tls_key``.
        """
        if not self.uses_tls:
            return None
        context = ssl.create_default_context(cafile=self.tls_ca)
        context.check_hostname = self.tls_check_hostname
        if self.tls_cert is not None:
            context.load_cert_chain(self.tls_cert, self.tls_key, key_password)
        return context
