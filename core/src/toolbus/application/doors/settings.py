"""A front door's settings: the ``[doors]`` table of ``toolbus.toml``.

::

    [doors]
    entry-states = ["undefined"]     # states a caller may ask to start in
    max-sessions-per-user = 16       # sessions a user holds open at once (beyond: refused)
    max-streams-per-user = 8         # event streams a user holds open at once
    max-workflows-per-user = 64      # MCP workflows a user holds at once
    session-idle-timeout = 600       # seconds a held session or workflow may sit unused
    calls-per-record = 1000          # a held session writes an audit record every so many calls
    audit-file = "audit.jsonl"       # audit records as JSON lines (besides the toolbus.audit log)
    live-permissions = ["operator.pub.jwk"]   # opt in: take a signed permissions item from
                                              # the bus, if signed by one of these keys

Every door reads the same table, so a user meets the same limits at each.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from toolbus.domain.config.registry import UNDEFINED_STATE
from toolbus.domain.errors import ConfigError, Problem

SECTION = "doors"


class DoorSettings(BaseModel):
    """The ``[doors]`` table; every field has a default that keeps a single user going."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    entry_states: tuple[str, ...] = Field((UNDEFINED_STATE,), alias="entry-states")
    max_sessions_per_user: int = Field(16, alias="max-sessions-per-user", ge=1)
    max_streams_per_user: int = Field(8, alias="max-streams-per-user", ge=1)
    max_workflows_per_user: int = Field(64, alias="max-workflows-per-user", ge=1)
    session_idle_timeout: float = Field(600.0, alias="session-idle-timeout", gt=0)
    calls_per_record: int = Field(1000, alias="calls-per-record", ge=1)
    audit_file: str | None = Field(None, alias="audit-file", min_length=1)
    live_permissions: tuple[str, ...] | None = Field(None, alias="live-permissions", min_length=1)


def parse_door_settings(
    table: Mapping[str, Any] | None, *, where: str = "toolbus.toml [doors]"
) -> DoorSettings:
    """Validate the ``[doors]`` table; :class:`ConfigError` lists every problem."""
    try:
        return DoorSettings.model_validate(dict(table or {}))
    except ValidationError as exc:
        raise ConfigError(
            Problem(where, ".".join(str(part) for part in error["loc"]), _message(error))
            for error in exc.errors()
        ) from None


def _message(error: Any) -> str:
    if error["type"] == "extra_forbidden":
        return "is not a front-door setting; see docs/access-control.md for the list"
    return str(error["msg"])


POLICY_SECTION = "policy"


class PolicySettings(BaseModel):
    """The ``[policy]`` table: which call-policy engine, on which files, knowing what of users.

    ::

        [policy]
        engine = "cedar"                 # the default; needs toolbus[policy]
        files = ["policies"]             # files, or folders of *.cedar files, relative
                                         # to toolbus.toml
        reload = true                    # follow changes to the files

        [policy.users.alice]             # attributes of users, as policies see them
        tenant = "acme"
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    engine: str = Field("cedar", min_length=1)
    files: tuple[str, ...] = Field(min_length=1)
    reload: bool = True
    users: dict[str, dict[str, Any]] = Field(default_factory=dict)


def parse_policy_settings(
    table: Mapping[str, Any] | None, *, where: str = "toolbus.toml [policy]"
) -> PolicySettings | None:
    """Validate the ``[policy]`` table (``None`` when there is none)."""
    if table is None:
        return None
    try:
        return PolicySettings.model_validate(dict(table))
    except ValidationError as exc:
        raise ConfigError(
            Problem(
                where,
                ".".join(str(part) for part in error["loc"]),
                "is not a policy setting; the settings are engine, files, reload and users"
                if error["type"] == "extra_forbidden"
                else "is required: name the policy files (or folders of .cedar files)"
                if error["type"] == "missing"
                else str(error["msg"]),
            )
            for error in exc.errors()
        ) from None
