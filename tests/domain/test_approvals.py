"""What an approver sees of a call's arguments: secrets replaced, long values cut."""

from __future__ import annotations

from typing import Any

import pytest

from toolbus.domain.access.approvals import (
    DEFAULT_MAX_PENDING_PER_USER,
    MAX_SHOWN_VALUE,
    REDACTED,
    parse_approval_settings,
    redacted_arguments,
)
from toolbus.domain.config.loading import load_registry
from toolbus.domain.errors import ConfigError


def tool_with(arguments: list[dict[str, Any]]) -> Any:
    registry = load_registry(
        {
            "tool-service": {"svc": {"request-queue": "q-req", "response-queue": "q-resp"}},
            "tool": {
                "t": {
                    "type": "tool-service",
                    "name": "t",
                    "description": "t",
                    "service": "svc",
                    "arguments": arguments,
                }
            },
        }
    )
    return registry.tools["t"]


def test_secrets_are_redacted_by_name_by_schema_and_inside_objects() -> None:
    tool = tool_with(
        [
            {"name": "query", "type": "string", "description": "q"},
            {"name": "code", "type": "string", "description": "c", "format": "password"},
            {"name": "blob", "type": "string", "description": "b", "writeOnly": True},
        ]
    )
    shown = redacted_arguments(
        {
            "query": "x" * 1000,
            "code": "1234",
            "blob": "hidden",
            "api_key": "sk-1",
            "userPassword": "pw",
            "auth_token": "t",
            "options": {"db": {"password": "pw", "host": "h"}, "list": [{"secret": "s"}]},
        },
        tool,
    )
    assert shown["code"] == shown["blob"] == REDACTED
    assert shown["api_key"] == shown["userPassword"] == shown["auth_token"] == REDACTED
    assert shown["options"] == {
        "db": {"password": REDACTED, "host": "h"},
        "list": [{"secret": REDACTED}],
    }
    assert len(shown["query"]) == MAX_SHOWN_VALUE + 1 and shown["query"].endswith("…")
    for secret in ("1234", "hidden", "sk-1", "pw"):
        assert secret not in repr(shown)


def test_one_users_share_of_the_pending_approvals_fits_in_the_whole() -> None:
    assert parse_approval_settings({}).pending_per_user == DEFAULT_MAX_PENDING_PER_USER
    assert parse_approval_settings({"max-pending": 5}).pending_per_user == 5
    given = {"max-pending": 50, "max-pending-per-user": 3}
    assert parse_approval_settings(given).pending_per_user == 3

    with pytest.raises(ConfigError) as refused:
        parse_approval_settings({"max-pending": 5, "max-pending-per-user": 6})
    assert "max-pending-per-user (6) is more than max-pending (5)" in str(refused.value)
