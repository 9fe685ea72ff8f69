"""What an A2A message asks of a toolbus agent: :func:`read_message`.

A message's text parts (and data parts, as JSON) are the question. Which tool
groups the agent may use, and the workflow state to start in, ride in the
message's metadata (or the request's) under ``toolbus``::

    {"toolbus": {"groups": ["default", "billing"], "state": "browsing"}}

File parts (bytes or URLs) are refused: the agent reads text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from a2a.types import Message, Role, SendMessageRequest
from a2a.utils.errors import ContentTypeNotSupportedError, InvalidParamsError
from google.protobuf.json_format import MessageToDict

#: The metadata key toolbus's options ride under.
METADATA_KEY = "toolbus"
#: Characters of question a message may carry.
MAX_QUESTION = 100_000


@dataclass(frozen=True, slots=True)
class Question:
    """A message read: the question, and the groups and state it asks for."""

    text: str
    groups: list[str] | None
    state: str


def _options(params: SendMessageRequest) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for holder in (params.metadata, params.message.metadata):
        given = MessageToDict(holder).get(METADATA_KEY) if holder.fields else None
        if given is None:
            continue
        if not isinstance(given, dict):
            raise InvalidParamsError(
                message=f"metadata.{METADATA_KEY} must be an object like "
                '{"groups": ["default"], "state": "browsing"}'
            )
        found.update(given)
    unknown = sorted(set(found) - {"groups", "state"})
    if unknown:
        raise InvalidParamsError(
            message=f"metadata.{METADATA_KEY} has no {', '.join(map(repr, unknown))}; "
            "it takes 'groups' (a list of tool groups) and 'state' (an entry state)"
        )
    return found


def _text(message: Message) -> str:
    texts = []
    for index, part in enumerate(message.parts):
        kind = part.WhichOneof("content")
        if kind == "text":
            texts.append(part.text)
        elif kind == "data":
            texts.append(json.dumps(MessageToDict(part)["data"], ensure_ascii=False))
        else:
            raise ContentTypeNotSupportedError(
                message=f"message.parts[{index}] is a file ({kind}); this agent reads text and "
                "JSON data parts: send the file's content as text"
            )
    return "\n".join(texts)


def read_message(params: SendMessageRequest) -> Question:
    """The question ``params`` asks; A2A's ``InvalidParams`` or ``ContentTypeNotSupported``
    naming what is wrong and the fix."""
    message = params.message
    if message.role == Role.ROLE_AGENT:
        raise InvalidParamsError(message="message.role must be ROLE_USER: the caller speaks")
    text = _text(message)
    if not text.strip():
        raise InvalidParamsError(message="the message has no text: put the question in a text part")
    if len(text) > MAX_QUESTION:
        raise InvalidParamsError(
            message=f"the message is {len(text)} characters; send at most {MAX_QUESTION}"
        )
    options = _options(params)
    groups = options.get("groups")
    if groups is not None and (
        not isinstance(groups, list) or not all(isinstance(g, str) for g in groups)
    ):
        raise InvalidParamsError(
            message=f"metadata.{METADATA_KEY}.groups must be a list of tool group names"
        )
    state = options.get("state", "")
    if not isinstance(state, str):
        raise InvalidParamsError(
            message=f"metadata.{METADATA_KEY}.state must be a string: an entry state"
        )
    return Question(text, groups, state)
