"""How a door runs calls as tasks: the ``[tasks]`` table of ``toolbus.toml``.

::

    [tasks]
    approval-wait = 20      # seconds a call made in place waits for a person's approval
                            # before its caller gets its task instead (HTTP 202)
    ttl = 3600              # seconds a task is kept once it ended
    call-timeout = 900      # seconds a task's tool call may take
    lease = 15              # seconds a replica answers for a task it runs before another
                            # replica may go on with it (it renews every third of it)

``approval-wait`` stays well below the time a load balancer gives a request
(docs/deployment.md's recipe: 120 s), so that a caller gets its task rather
than a gateway timeout.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from toolbus.domain.errors import ConfigError, Problem
from toolbus.domain.tasks.model import DEFAULT_TTL

SECTION = "tasks"
#: Seconds a call waits in place for an approval before its caller gets its task.
DEFAULT_APPROVAL_WAIT = 20.0
#: Seconds a task's tool call may take.
DEFAULT_CALL_TIMEOUT = 900.0
#: Seconds a replica answers for a task before renewing.
DEFAULT_LEASE = 15.0


class TaskSettings(BaseModel):
    """The ``[tasks]`` table; see the module docs."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    approval_wait: float = Field(DEFAULT_APPROVAL_WAIT, alias="approval-wait", ge=0)
    ttl: float = Field(DEFAULT_TTL, gt=0)
    call_timeout: float = Field(DEFAULT_CALL_TIMEOUT, alias="call-timeout", gt=0)
    lease: float = Field(DEFAULT_LEASE, ge=1)


def parse_task_settings(
    table: Mapping[str, Any] | None, *, where: str = "toolbus.toml [tasks]"
) -> TaskSettings:
    """Validate the ``[tasks]`` table; :class:`ConfigError` lists every problem."""
    try:
        return TaskSettings.model_validate(dict(table or {}))
    except ValidationError as exc:
        raise ConfigError(
            Problem(
                where,
                ".".join(str(part) for part in error["loc"]),
                "is not a tasks setting; the settings are approval-wait, ttl, call-timeout "
                "and lease"
                if error["type"] == "extra_forbidden"
                else str(error["msg"]),
            )
            for error in exc.errors()
        ) from None
