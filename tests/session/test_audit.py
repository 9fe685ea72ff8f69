"""Audit records: one per session, complete, JSON, and free of argument values and secrets."""

from __future__ import annotations

import json
import logging
import uuid

import pytest

from toolbus.application.agent.audit import (
    AUDIT_LOGGER,
    AuditRecord,
    AuditSink,
    ListAuditSink,
    LoggingAuditSink,
)
from toolbus.application.agent.session import AgentSession
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.testing.kit import ToolTestKit

from .support import (
    BROKEN_DATASET,
    SECRET_COLLECTION,
    SERVICES,
    WORKFLOW_GROUPS,
    FakeClock,
    open_session,
    workflow_registry,
)

pytestmark = pytest.mark.anyio

SECRET_ARGUMENT = "card 4111-1111-1111-1111"


async def test_the_record_holds_everything_the_spec_asks_for(toolbus: ToolTestKit) -> None:
    await toolbus.serve(*SERVICES)
    audit = ListAuditSink()
    clock = FakeClock()
    async with open_session(
        toolbus,
        workflow_registry(),
        audit=audit,
        clock=clock,
        user="alice",
        groups=["read-only", "knowledge"],
        request_id="req-123",
    ) as session:
        clock.advance(1)
        await session.call("knowledge-query", {"question": "Company X?"}, "call-1")
        clock.advance(0.2)
    assert audit.records[0].to_dict() == {
        "event": "agent-session",
        "request_id": "req-123",
        "user": "alice",
        "requested_groups": ["read-only", "knowledge"],
        "granted_groups": ["read-only", "knowledge"],
        "allowed_groups": ["*"],
        "initial_state": "undefined",
        "final_state": "analysis",
        "available_tools": ["knowledge-query", "text-completion"],
        "filtered_by_group": ["complex-analysis", "reset-workflow"],
        "filtered_by_state": ["graph-update"],
        "state_transitions": [
            {
                "tool": "knowledge-query",
                "from": "undefined",
                "to": "analysis",
                "timestamp": "2024-01-01T10:00:01Z",
            }
        ],
        "calls": [
            {
                "tool": "knowledge-query",
                "tool_call_id": "call-1",
                "status": "ok",
                "refusal": None,
                "error_type": None,
                "state": "undefined",
                "timestamp": "2024-01-01T10:00:01Z",
                "duration_seconds": 0.0,
                "defaulted_arguments": [],
                "fixed_arguments": [],
                "env_arguments": [],
                "after_execution": "suspend",
                "approval": None,
                "policy": None,
                "limit": None,
                "cost": None,
                "cache": None,
            }
        ],
        "access_denied": None,
        "agent": None,
        "cost": None,
        "outcome": "completed",
        "error": None,
        "started_at": "2024-01-01T10:00:00Z",
        "duration_seconds": pytest.approx(1.2),
    }


async def test_absent_and_empty_requested_groups_are_recorded_distinctly(
    toolbus: ToolTestKit,
) -> None:
    audit = ListAuditSink()
    requests: list[list[str] | None] = [None, []]
    for groups in requests:
        await open_session(
            toolbus, workflow_registry(), audit=audit, user="u", groups=groups
        ).close()
    absent, empty = (record.to_dict() for record in audit.records)
    assert absent["requested_groups"] is None and absent["granted_groups"] == ["default"]
    assert empty["requested_groups"] == [] and empty["granted_groups"] == []


async def test_no_argument_values_config_values_or_error_messages_are_recorded(
    toolbus: ToolTestKit,
) -> None:
    await toolbus.serve(*SERVICES)
    audit = ListAuditSink()
    async with open_session(
        toolbus, workflow_registry(), audit=audit, user="alice", groups=WORKFLOW_GROUPS
    ) as session:
        done = await session.call("knowledge-query", {"question": SECRET_ARGUMENT})
        assert SECRET_COLLECTION in done.observation  # the service did get its config
        failed = await session.call("complex-analysis", {"dataset": BROKEN_DATASET})
        assert BROKEN_DATASET in failed.observation  # the LLM hears the error message
        await session.call("text-completion", f'{{"prompt": "{SECRET_ARGUMENT}"}}')
    line = audit.records[0].to_json()
    for secret in (SECRET_ARGUMENT, SECRET_COLLECTION, BROKEN_DATASET, "corrupt", "Acme"):
        assert secret not in line


async def test_one_record_per_session_however_it_is_closed(toolbus: ToolTestKit) -> None:
    audit = ListAuditSink()
    session = open_session(toolbus, workflow_registry(), audit=audit, user="u")
    async with session:
        await session.close()
    await session.close()
    assert len(audit.records) == 1


async def test_an_error_escaping_the_session_is_recorded_by_type_only(
    toolbus: ToolTestKit,
) -> None:
    audit = ListAuditSink()
    with pytest.raises(KeyError):
        async with open_session(toolbus, workflow_registry(), audit=audit, user="u"):
            raise KeyError("api_key=hunter2")
    [record] = audit.records
    assert record.outcome == "failed" and record.error == "KeyError"
    assert "hunter2" not in record.to_json()


async def test_the_request_id_is_generated_when_absent(toolbus: ToolTestKit) -> None:
    first = open_session(toolbus, workflow_registry(), audit=ListAuditSink(), user="u")
    second = open_session(toolbus, workflow_registry(), audit=ListAuditSink(), user="u")
    assert uuid.UUID(first.request_id) != uuid.UUID(second.request_id)


async def test_the_default_sink_writes_one_json_line_to_the_audit_logger(
    toolbus: ToolTestKit, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=AUDIT_LOGGER)
    session = AgentSession(
        toolbus.tools(workflow_registry()),
        user="alice",
        groups=["admin"],
        request_id="req-log",
        metrics=ToolbusMetrics.disabled(),
    )
    await session.close()
    [entry] = [r for r in caplog.records if r.name == AUDIT_LOGGER]
    assert entry.levelno == logging.INFO
    message = entry.getMessage()
    assert "\n" not in message
    assert json.loads(message)["request_id"] == "req-log"
    assert entry.audit["user"] == "alice"  # type: ignore[attr-defined]
    assert AuditRecord.model_validate_json(message).request_id == "req-log"


async def test_a_failing_sink_is_logged_and_does_not_fail_the_session(
    toolbus: ToolTestKit, caplog: pytest.LogCaptureFixture
) -> None:
    class BrokenSink:
        def emit(self, record: AuditRecord) -> None:
            raise OSError("disk full")

    assert isinstance(BrokenSink(), AuditSink)
    session = open_session(toolbus, workflow_registry(), audit=BrokenSink(), user="u")
    await session.close()
    assert session.closed
    assert any(
        "could not write the audit record" in r.getMessage() and r.name == AUDIT_LOGGER
        for r in caplog.records
    )


def test_the_logging_sink_stays_quiet_when_its_level_is_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger=AUDIT_LOGGER)
    sink = LoggingAuditSink()
    record = AuditRecord.model_validate_json(
        json.dumps(
            {
                "request_id": "r",
                "user": "u",
                "requested_groups": None,
                "granted_groups": ["default"],
                "allowed_groups": ["*"],
                "initial_state": "undefined",
                "final_state": "undefined",
                "available_tools": [],
                "filtered_by_group": [],
                "filtered_by_state": [],
                "state_transitions": [],
                "calls": [],
                "outcome": "completed",
                "started_at": "2024-01-01T10:00:00Z",
                "duration_seconds": 0.5,
            }
        )
    )
    sink.emit(record)
    assert not caplog.records
