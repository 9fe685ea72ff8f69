"""Secrets in URLs: one function shows every URL, without user info or option values."""

from __future__ import annotations

import logging

import pytest
import typer

from toolbus._internal.urls import RedactingFormatter, redact_url, redact_urls
from toolbus.cli.plugin_api import redact_url as redact_url_for_commands

SECRET = "s3cret-value"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("memory://", "memory://"),
        ("memory://tests", "memory://tests"),
        ("nats://127.0.0.1:4222", "nats://127.0.0.1:4222"),
        (f"nats://127.0.0.1:4222?token={SECRET}", "nats://127.0.0.1:4222?token=***"),
        (f"nats://{SECRET}@h1:4222,h2:4222", "nats://***@h1:4222,h2:4222"),
        (f"kafka://alice:{SECRET}@h1:9092", "kafka://***@h1:9092"),
        (f"redis://:{SECRET}@127.0.0.1:6379/2", "redis://***@127.0.0.1:6379/2"),
        (
            f"redis://127.0.0.1:6379?username=ops&password={SECRET}&tls",
            "redis://127.0.0.1:6379?username=***&password=***&tls",
        ),
        (f"rediss://h?password={SECRET}#{SECRET}", "rediss://h?password=***"),
        (f"openai+http://{SECRET}@127.0.0.1:1/v1/m", "openai+http://***@127.0.0.1:1/v1/m"),
        (f"user:{SECRET}@host:4222", "***@host:4222"),
        (f"127.0.0.1:4222?token={SECRET}", "127.0.0.1:4222?token=***"),
        (f"nats://[::1?token={SECRET}", "nats://***"),
    ],
)
def test_a_url_is_shown_without_user_info_or_option_values(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert SECRET not in redact_url(url)


def test_commands_and_plugins_use_the_same_function() -> None:
    assert redact_url_for_commands is redact_url


def test_urls_within_text_are_redacted_and_the_text_kept() -> None:
    text = f"lost nats://{SECRET}@h:4222?token={SECRET}, retrying (redis://h/0?password={SECRET})."

    assert redact_urls(text) == (
        "lost nats://***@h:4222?token=***, retrying (redis://h/0?password=***)."
    )
    assert redact_urls("no address here") == "no address here"


def test_the_command_lines_log_lines_and_tracebacks_show_urls_redacted() -> None:
    formatter = RedactingFormatter("%(message)s")
    try:
        raise ConnectionError(f"cannot reach redis://:{SECRET}@h:6379")
    except ConnectionError as exc:
        record = logging.LogRecord(
            "toolbus", logging.WARNING, __file__, 1, "via %s", (f"nats://h?token={SECRET}",),
            (type(exc), exc, exc.__traceback__),
        )  # fmt: skip
    line = formatter.format(record)

    assert SECRET not in line
    assert "via nats://h?token=***" in line and "redis://***@h:6379" in line


def test_a_commands_error_shows_a_url_it_quotes_redacted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from toolbus.cli.plugin_api import fail

    with pytest.raises(typer.Exit):
        fail(f"cannot fetch https://ops:{SECRET}@specs.example/api.json?key={SECRET}: 401")

    printed = capsys.readouterr().err
    assert SECRET not in printed
    assert "error: cannot fetch https://***@specs.example/api.json?key=***: 401" in printed
