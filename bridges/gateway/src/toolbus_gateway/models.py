"""What the HTTP API takes and answers: request bodies and answers, as pydantic models."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from toolbus import CallOutcome

Format = Literal["openai", "anthropic", "mcp"]
#: What a caller may say it can answer when its tool asks (MCP's kinds of request).
InputKindName = Literal["elicitation", "sampling", "roots"]

CAN_ANSWER: Any = Field(
    default_factory=list,
    description="What this caller can answer when its tool asks (elicitation, sampling, "
    "roots). The call then runs as a task (unless its tool forbids tasks): answered as a "
    "call when it ends within approval-wait without asking; when its tool asks, 202 with "
    "the task, input-required, its input_requests to answer at POST /v1/tasks/{id}/input. "
    "Absent or []: a tool that asks hears at once that its caller cannot be asked.",
)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorAnswer(BaseModel):
    """Every error the gateway answers: a type to branch on and a message to show.

    Some errors add fields of their own (``reason``, ``denied_groups``, ``problems``,
    ``error_type``...).
    """

    model_config = ConfigDict(extra="allow")

    error: str
    message: str


class ToolList(BaseModel):
    """The tools offered to the caller for these groups in this state."""

    format: Format
    groups: list[str]
    state: str
    tools: list[dict[str, Any]]


class CallRequest(_Body):
    """A single tool call, outside any session."""

    arguments: dict[str, Any] = Field(default_factory=dict)
    groups: list[str] | None = Field(
        None, description="Requested tool groups; absent means ['default'], [] means none."
    )
    state: str | None = Field(
        None,
        description="The state to call in: absent means 'undefined'; any other must be an "
        "entry state ([doors] entry-states). Other states are reached in a session.",
    )
    can_answer: list[InputKindName] = CAN_ANSWER


class Transition(BaseModel):
    tool: str
    from_state: str = Field(serialization_alias="from")
    to_state: str = Field(serialization_alias="to")


class CallOutcomeView(BaseModel):
    """How a call came out; ``observation`` is what a model would be shown."""

    name: str
    tool: str | None
    status: Literal["ok", "error", "refused"]
    observation: str
    state: str
    refusal: str | None = None
    error_type: str | None = None
    tool_call_id: str | None = None
    transition: Transition | None = None
    after_execution: str | None = None
    #: What the call cost, when its tool has a price ([costs]).
    cost: float | None = None
    #: A cached answer stood in for the call.
    cached: bool = False
    #: For a call a limit or budget refused: which, and the seconds until it may pass.
    limit: str | None = None
    retry_after: float | None = None


class OpenSession(_Body):
    """Open an agent session: the request's groups, initial state and history."""

    groups: list[str] | None = Field(
        None, description="Requested tool groups; absent means ['default'], [] means none."
    )
    state: str | None = Field(None, description="An entry state ([doors] entry-states).")
    messages: list[dict[str, Any]] = Field(
        default_factory=list, description="The history so far; hooks add their results to it."
    )
    format: Format = "openai"
    request_id: str | None = Field(None, min_length=1, max_length=200)


class SessionView(BaseModel):
    session_id: str
    user: str
    groups: list[str]
    state: str
    format: Format
    tools: list[dict[str, Any]]
    messages: list[dict[str, Any]] | None = None


class SessionCall(_Body):
    """A tool call in a session, as an LLM produced it."""

    name: str = Field(min_length=1)
    arguments: dict[str, Any] | str | None = Field(
        None, description="An object, or the JSON text a model produced."
    )
    tool_call_id: str | None = None
    can_answer: list[InputKindName] = CAN_ANSWER


class ServiceView(BaseModel):
    service: str
    replicas: list[str]
    age_seconds: float
    expires_in_seconds: float
    request_queue: str | None
    tools: list[str]


class ServicesView(BaseModel):
    """Running services (from their announcements) and the configured service ids,
    as far as the caller's groups reach."""

    live: list[ServiceView]
    configured: list[str]
    announced_tools: list[str]


def outcome_view(outcome: CallOutcome) -> CallOutcomeView:
    transition = outcome.transition
    return CallOutcomeView(
        name=outcome.name,
        tool=outcome.tool,
        status=outcome.status,
        observation=outcome.observation,
        state=outcome.state,
        refusal=outcome.refusal,
        error_type=outcome.error_type,
        tool_call_id=outcome.tool_call_id,
        transition=None
        if transition is None
        else Transition(
            tool=transition.tool, from_state=transition.from_state, to_state=transition.to_state
        ),
        after_execution=outcome.after_execution,
        cost=outcome.cost,
        cached=outcome.cached,
        limit=outcome.limit,
        retry_after=outcome.retry_after,
    )


def outcome_json(outcome: CallOutcome) -> bytes:
    """A call's answer body: :class:`CallOutcomeView` as JSON."""
    return _OUTCOME_JSON.to_json(outcome_view(outcome), by_alias=True)


_OUTCOME_JSON = CallOutcomeView.__pydantic_serializer__


def call_status(outcome: CallOutcome) -> int:
    """The HTTP status of a call outside a session."""
    if outcome.ok:
        return 200
    if outcome.status == "error":
        # Unusable arguments are the caller's to fix; any other error is the tool's.
        return 422 if outcome.error_type == "bad-request" else 502
    if outcome.refusal == "unknown":
        return 404  # unknown, or outside the caller's groups: the same answer
    if outcome.refusal == "state":
        return 409
    return 403  # denied by a code hook


class ApprovalView(BaseModel):
    """A call waiting for (or past) a person's decision; times are Unix seconds.

    ``arguments`` are what the approvers may see: secrets are redacted.
    """

    id: str
    user: str
    tool: str
    arguments: dict[str, Any]
    approvers: list[str]
    team: str | None = None
    reason: str
    request_id: str
    tool_call_id: str | None = None
    created_at: float
    expires_at: float
    status: Literal["pending", "approved", "denied", "expired", "withdrawn"]
    decided_by: str | None = None
    decided_at: float | None = None
    note: str | None = None


class ApprovalList(BaseModel):
    """The pending approvals the caller may decide, or asked for, oldest first."""

    approvals: list[ApprovalView]


class Decision(_Body):
    """An approver's decision: an optional note, which the caller's model reads on a denial."""

    note: str | None = Field(None, max_length=500)


class TaskErrorView(BaseModel):
    """Why a task failed: a type to branch on (a tool's error type, ``refused-<why>`` for a
    call that was not made, ``unavailable``, ``access-denied``) and what a model would read."""

    type: str
    message: str


class TaskView(BaseModel):
    """A call that runs as a task; times are Unix seconds. ``GET /v1/tasks/{id}`` reads it
    until ``ttl`` seconds after it ended."""

    id: str
    owner: str
    tool: str
    door: str
    status: Literal["working", "input-required", "completed", "failed", "cancelled"]
    message: str | None = Field(
        None, description="What it waits for (input-required), or who cancelled it."
    )
    approval_id: str | None = Field(None, description="The approval it waits for.")
    input_requests: dict[str, Any] | None = Field(
        None,
        description="What its tool asks its caller and is not answered yet (input-required), "
        "by key, as MCP writes requests: {method, params}. Answer at POST "
        "/v1/tasks/{id}/input.",
    )
    result: str | None = Field(None, description="The tool's answer, once completed.")
    error: TaskErrorView | None = None
    state: str | None = Field(None, description="The session's state after the call.")
    progress: int = 0
    created_at: float
    updated_at: float
    ttl: float


class TaskInput(_Body):
    """Answers to what a task's tool asks, by the keys of its ``input_requests``, each as
    MCP's client writes the result of that request (an elicitation:
    ``{"action": "accept", "content": {...}}``)."""

    responses: dict[str, Any] = Field(min_length=1)


class TaskList(BaseModel):
    """The caller's tasks still kept, newest first."""

    tasks: list[TaskView]
