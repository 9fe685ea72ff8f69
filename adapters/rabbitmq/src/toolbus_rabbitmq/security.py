"""TLS and credentials: the TLS context, and the password from wherever the options say.

A password may be given in the URL, as the ``password`` option, in an
environment variable named by ``password_env`` or in a file named by
``password_file``. The last two are read when connecting, not when the options
are parsed, so a rotated secret is picked up by the next connection. Errors name
the variable or the file, never the value; the value is handed to aio-pika and
kept nowhere else.
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path

from toolbus.domain.errors import BrokerOptionError
from toolbus_rabbitmq.options import RabbitMQOptions

#: RabbitMQ's default user, which the broker accepts from localhost only.
GUEST = "guest"


def credentials(options: RabbitMQOptions) -> tuple[str, str]:
    """``(user, password)`` to log in with; RabbitMQ's ``guest`` when none is given."""
    if options.user is None:
        return GUEST, GUEST
    return options.user, password(options)


def password(options: RabbitMQOptions) -> str:
    """The password the options point at ("" for none)."""
    if options.password is not None:
        return options.password
    if options.password_env is not None:
        value = os.environ.get(options.password_env)
        if value is None:
            raise BrokerOptionError(
                f"RabbitMQ option 'password_env' names the environment variable "
                f"{options.password_env!r}, which is not set; set it to the password, "
                "or give the password another way"
            )
        return value
    if options.password_file is not None:
        try:
            return Path(options.password_file).read_text(encoding="utf-8").rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as exc:
            raise BrokerOptionError(
                f"RabbitMQ option 'password_file': cannot read {options.password_file!r} "
                f"({type(exc).__name__}: {exc.strerror if isinstance(exc, OSError) else exc}); "
                "check the path and that this process may read it"
            ) from None
    return ""


def tls_context(options: RabbitMQOptions) -> ssl.SSLContext | None:
    """The TLS context the options ask for (the shared TLS options), or None for plain TCP."""
    try:
        return options.ssl_context(options.tls_key_password)
    except (OSError, ssl.SSLError) as exc:
        raise BrokerOptionError(
            f"RabbitMQ TLS files cannot be used ({exc}); check 'tls_ca', 'tls_cert' and "
            "'tls_key' (PEM files this process may read) and 'tls_key_password'"
        ) from None
