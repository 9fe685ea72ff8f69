"""TLS and SASL: what aiokafka's producer, consumer and admin client take for them.

TLS options have the names they have on every broker (``tls``, ``tls_ca``,
``tls_cert``, ``tls_key``, ``tls_check_hostname``; see
``toolbus._internal.broker_tls``), plus ``tls_key_password``. SASL is asked for
with ``sasl``; together they make Kafka's security protocol: ``tls`` alone is
``SSL``, ``sasl`` alone ``SASL_PLAINTEXT``, both ``SASL_SSL``.
"""

from __future__ import annotations

from typing import Any

from toolbus_kafka.options import KafkaOptions


def security_protocol(options: KafkaOptions) -> str:
    """Kafka's name for the protocol ``tls`` and ``sasl`` ask for."""
    transport = "SSL" if options.uses_tls else "PLAINTEXT"
    return f"SASL_{transport}" if options.sasl else transport


def security_kwargs(options: KafkaOptions) -> dict[str, Any]:
    """Keyword arguments for aiokafka's clients: the security protocol, TLS, SASL."""
    kwargs: dict[str, Any] = {"security_protocol": security_protocol(options)}
    context = options.ssl_context(options.tls_key_password)
    if context is not None:
        kwargs["ssl_context"] = context
    if options.sasl:
        kwargs["sasl_mechanism"] = options.sasl_mechanism
        kwargs["sasl_plain_username"] = options.sasl_username
        kwargs["sasl_plain_password"] = options.sasl_password
        kwargs["sasl_kerberos_service_name"] = options.sasl_kerberos_service_name
        if options.sasl_oauth_token_provider is not None:
            kwargs["sasl_oauth_token_provider"] = options.sasl_oauth_token_provider
    return kwargs
