"""What an agent session's tool call came to: a :class:`CallOutcome`, ready for the LLM."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from toolbus.application.agent.audit import Refusal, StateTransition
from toolbus.domain.calls.input_requests import InputAsk

#: How a call came out. Failures of the bus itself are exceptions, not outcomes.
OutcomeStatus = Literal["ok", "error", "refused"]


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """What one :meth:`AgentSession.call` came to. ``str(outcome)`` is the observation.

    ``status`` is ``"ok"``, ``"error"`` (the tool answered with an error, or
    the arguments were not a JSON object) or ``"refused"`` (not offered now;
    ``refusal`` says why: ``"state"``, ``"group"`` or ``"unknown"``; refused by
    a door's step: ``"policy"``, ``"approval"``, ``"limit"`` or ``"budget"``; or
    denied by a code hook: ``refusal`` is ``None``, the observation is its
    reason). ``tool`` is the configured name of the tool called, ``None`` when
    ``name`` names no tool the session may see. ``state`` is the session state
    after the call, ``transition`` the change this call made, if any. ``asked`` holds
    what the tool asked its caller when the call ended asking (error type
    ``input-required``, or ``input-unavailable`` for kinds the caller cannot give):
    the requests, and the state to call again with
    (:mod:`toolbus.application.calls.relaying`).
    """

    name: str
    observation: str
    status: OutcomeStatus
    state: str
    tool: str | None = None
    tool_call_id: str | None = None
    error_type: str | None = None
    refusal: Refusal | None = None
    transition: StateTransition | None = None
    #: For calls that ran: "terminate" means the observation is the agent's final
    #: answer; "suspend" that the loop goes on.
    after_execution: str | None = None
    #: For calls that ran: seconds the tool took to answer (a wait for a person's
    #: approval before it is not in it); 0 for calls not made.
    seconds: float = 0.0
    #: What the call cost, when its tool has a price (``[costs]``).
    cost: float | None = None
    #: For a call a limit or budget refused: which (``limit``), and the seconds after
    #: which the same call may pass (``None``: waiting does not help).
    limit: str | None = None
    retry_after: float | None = None
    #: A cached answer stood in for the call: no call was made.
    cached: bool = False
    asked: InputAsk | None = None

    @property
    def ok(self) -> bool:
        """True when the tool ran and succeeded."""
        return self.status == "ok"

    def __str__(self) -> str:
        return self.observation

    def as_openai_message(self) -> dict[str, Any]:
        """The observation as an OpenAI chat ``tool`` message answering the tool call."""
        return {
            "role": "tool",
            "tool_call_id": self._call_id("OpenAI"),
            "content": self.observation,
        }

    def as_anthropic_result(self) -> dict[str, Any]:
        """The observation as an Anthropic ``tool_result`` content block."""
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": self._call_id("Anthropic"),
            "content": self.observation,
        }
        if not self.ok:
            block["is_error"] = True
        return block

    def as_mcp_result(self) -> dict[str, Any]:
        """The observation as an MCP ``CallToolResult``."""
        return {"content": [{"type": "text", "text": self.observation}], "isError": not self.ok}

    def _call_id(self, api: str) -> str:
        if self.tool_call_id is None:
            raise ValueError(
                f"a {api} tool result must answer a tool call id; pass tool_call_id=... "
                f"to AgentSession.call for tool {self.name!r}"
            )
        return self.tool_call_id
