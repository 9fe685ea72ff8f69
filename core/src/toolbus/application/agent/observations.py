"""What the model reads when a call does not run: refusals, denials, unusable arguments.

Every text here says what happened and what the model can do next, and no more:
a tool outside the session's groups reads exactly like a tool that does not
exist, so a caller learns nothing about tools it was not offered.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from toolbus.domain.config.descriptors import ToolDescriptor

#: How many tool names a refusal observation lists before "and N more".
MAX_NAMES_IN_OBSERVATION = 20


def offer_text(available: Sequence[ToolDescriptor]) -> str:
    """The tools the model may use now, for a refusal's last sentence."""
    names = [tool.llm_name for tool in available]
    if not names:
        return "No tools are available now."
    shown = ", ".join(names[:MAX_NAMES_IN_OBSERVATION])
    more = len(names) - MAX_NAMES_IN_OBSERVATION
    return f"Tools you can use now: {shown}{f', and {more} more' if more > 0 else ''}."


def not_offered(name: str, available: Sequence[ToolDescriptor]) -> str:
    """An unknown tool, or one outside the session's groups: the same words for both."""
    return f"There is no tool named {name!r} available to you. No call was made. " + offer_text(
        available
    )


def not_in_state(tool: ToolDescriptor, state: str, available: Sequence[ToolDescriptor]) -> str:
    return (
        f"The tool {tool.llm_name!r} cannot be used in the current state ({state!r}). "
        f"No call was made. {offer_text(available)}"
    )


def unusable_arguments(tool: ToolDescriptor, problem: str) -> str:
    return (
        f"Error: the arguments for tool {tool.llm_name!r} {problem}. No call was "
        "made; call it again with a JSON object of arguments."
    )


#: How many characters of an argument's name an observation quotes.
_NAME_SHOWN = 64


def undeclared_arguments(tool: ToolDescriptor, names: Sequence[str]) -> str:
    """The call gives arguments its tool does not declare: which, and the ones it takes."""
    shown = ", ".join(
        repr(name if len(name) <= _NAME_SHOWN else name[:_NAME_SHOWN] + "…")
        for name in names[:MAX_NAMES_IN_OBSERVATION]
    )
    more = len(names) - MAX_NAMES_IN_OBSERVATION
    if more > 0:
        shown += f", and {more} more"
    hidden = tool.options.hidden
    takes = [repr(argument.name) for argument in tool.arguments if argument.name not in hidden]
    return (
        f"Error: tool {tool.llm_name!r} takes no argument {shown}; it takes "
        f"{', '.join(takes) if takes else 'no arguments'}. No call was made; call it again "
        "with only the arguments it takes."
    )


def failed(tool: ToolDescriptor, error_type: str, message: str) -> str:
    return f"Error: tool {tool.llm_name!r} failed ({error_type}): {message}"


def parse_arguments(arguments: Mapping[str, Any] | str | None) -> dict[str, Any] | str:
    """The arguments as a dict, or a description of what is wrong with them."""
    if arguments is None:
        return {}
    if isinstance(arguments, str):
        if not arguments.strip():
            return {}  # some models send "" for a call without arguments
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            return f"are not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
    if not isinstance(arguments, Mapping):
        return f"must be a JSON object, not {type(arguments).__name__}"
    return dict(arguments)


def forbidden(tool: ToolDescriptor, reason: str | None) -> str:
    """The call policy refused the call, on its arguments or who calls."""
    why = f": {reason}" if reason else ""
    return (
        f"The access policy does not allow this call of {tool.llm_name!r}{why}. No call was "
        "made; do not call it again with the same arguments."
    )


def approval_denied(tool: ToolDescriptor, approver: str, note: str | None) -> str:
    """A person denied the call: the model reads who, and their reason."""
    why = f": {note}" if note else ""
    return f"{approver} denied the call of {tool.llm_name!r}{why}. No call was made."


def approval_expired(tool: ToolDescriptor, seconds: float) -> str:
    return (
        f"No one approved the call of {tool.llm_name!r} within {seconds:g} s, so it was not "
        "made. Tell the user it needs approval, or go on without it."
    )


def approval_unavailable(tool: ToolDescriptor, why: str) -> str:
    return f"The call of {tool.llm_name!r} needs a person's approval, but {why}. No call was made."
