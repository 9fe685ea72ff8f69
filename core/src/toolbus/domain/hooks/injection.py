"""Synthetic tool-call injection into an OpenAI-style chat history.

A *synthetic pair* is what the history would look like had the agent called a
tool itself: an assistant message with one ``tool_calls`` entry, followed by the
``tool`` message carrying the observation. Hooks use it to put a tool's output
(memories, user preferences, ...) in front of the model before it starts.

Call ids encode who made the pair, so that later requests can find it again in
a history that travelled through a client and back::

    synth_t_{h6(tool)}_a_{h6(json.dumps(arguments, sort_keys=True))}_c_{h6(content)}
        [_n_{counter}]            only when the plain id is already used in the history
        [_ttl_{expiry:08x}]       Unix seconds, lower-case hex, when a TTL applies

``synth_t_…_a_…_`` is the *identity prefix*: same tool and arguments, same
prefix. ``_ttl_`` is always the last segment, so ids written by DIAL Quick Apps
(which have no ``_n_`` segment) read the same way.

Everything here is pure: the clock is an argument, inputs are never mutated.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

InjectionFrequency = Literal["always", "append_if_changed"]
"""``always``: a new pair at the end every time. ``append_if_changed``: see :func:`inject`."""

FREQUENCIES: Final[tuple[InjectionFrequency, ...]] = ("always", "append_if_changed")

_TTL_SEP: Final = "_ttl_"
# `{expiry:08x}` never yields fewer than 8 digits nor upper case, so anything else
# was not written by us and must not be trusted as an expiry.
_TTL_HEX = re.compile(r"[0-9a-f]{8,}")
# The part after the identity prefix: content hash, then the optional counter.
_AFTER_PREFIX = re.compile(r"c_([0-9a-f]{6})(?:_n_([0-9]+))?")
# A tuple, not `list | tuple`: the scan runs per message and a union is built per use.
_CALL_LISTS: Final = (list, tuple)
_MAPPINGS: Final = (dict, Mapping)  # dict first: an exact-type hit skips the ABC check


def h6(s: str) -> str:
    """The first six hex digits of the SHA-256 of ``s`` (UTF-8)."""
    return hashlib.sha256(s.encode()).hexdigest()[:6]


def identity_prefix(tool_name: str, arguments: Mapping[str, Any]) -> str:
    """The id prefix shared by every synthetic pair of ``tool_name`` called with ``arguments``.

    Arguments are hashed with sorted keys, so key order does not change identity.
    Raises :class:`TypeError` when ``arguments`` is not JSON-serialisable.
    """
    args_json = json.dumps(dict(arguments), sort_keys=True)
    return f"synth_t_{h6(tool_name)}_a_{h6(args_json)}_"


def make_call_id(
    tool_name: str,
    arguments: Mapping[str, Any],
    content: str,
    ttl_expiry: int | None = None,
    *,
    counter: int | None = None,
) -> str:
    """The call id of a synthetic pair (format in the module docstring).

    ``ttl_expiry`` is the Unix time (whole seconds) until which the content counts
    as fresh. ``counter`` is only for telling apart pairs whose id would otherwise
    be equal; :func:`inject` picks it, callers normally leave it out.
    """
    call_id = f"{identity_prefix(tool_name, arguments)}c_{h6(content)}"
    if counter is not None:
        if counter < 1:
            raise ValueError(f"counter must be a positive integer, got {counter}")
        call_id += f"_n_{counter}"
    if ttl_expiry is not None:
        if not isinstance(ttl_expiry, int) or isinstance(ttl_expiry, bool):
            raise TypeError(f"ttl_expiry must be whole Unix seconds (int), got {ttl_expiry!r}")
        if ttl_expiry < 0:
            raise ValueError(f"ttl_expiry must be Unix seconds >= 0, got {ttl_expiry}")
        call_id += f"{_TTL_SEP}{ttl_expiry:08x}"
    return call_id


def parse_ttl_expiry(call_id: str) -> int | None:
    """The expiry stamped into ``call_id``; ``None`` when there is none or it is unreadable."""
    head, sep, tail = call_id.rpartition(_TTL_SEP)
    if not sep or not head or _TTL_HEX.fullmatch(tail) is None:
        return None
    return int(tail, 16)


@dataclass(frozen=True, slots=True)
class SyntheticPair:
    """Where a synthetic pair sits in a message list."""

    assistant_index: int  # the assistant message holding the call
    call_index: int  # position of the call in that message's ``tool_calls``
    tool_index: int  # the ``tool`` message answering it
    call_id: str


def find_latest_pair(
    messages: Sequence[Mapping[str, Any]],
    *,
    tool_name: str,
    arguments: Mapping[str, Any],
) -> SyntheticPair | None:
    """The latest synthetic pair of ``tool_name`` with ``arguments``, or ``None``.

    "Latest" is the one whose call comes last. A call with no ``tool`` message
    after it, or a ``tool`` message with no call, is not a pair and is passed over.
    """
    latest, _ = _scan(messages, identity_prefix(tool_name, arguments), stop_at_latest=True)
    return latest


def ttl_is_fresh(
    messages: Sequence[Mapping[str, Any]],
    *,
    tool_name: str,
    arguments: Mapping[str, Any],
    now: float,
) -> bool:
    """Whether the latest pair of this tool and arguments is still fresh at ``now``.

    Only the latest pair counts. No pair, no ``_ttl_`` segment or an unreadable
    one all mean "expired", so the tool gets called again: a wrong "fresh" would
    hide data, a wrong "expired" only costs a call.
    """
    pair = find_latest_pair(messages, tool_name=tool_name, arguments=arguments)
    if pair is None:
        return False
    expiry = parse_ttl_expiry(pair.call_id)
    return expiry is not None and expiry > now


def synthetic_pair(
    call_id: str, tool_name: str, arguments: Mapping[str, Any], content: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The assistant message with one tool call, and the tool message answering it."""
    return (
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_tool_call(call_id, tool_name, arguments)],
        },
        {"role": "tool", "tool_call_id": call_id, "content": content},
    )


def inject(
    messages: Sequence[Mapping[str, Any]],
    *,
    tool_name: str,
    arguments: Mapping[str, Any],
    content: str,
    frequency: InjectionFrequency,
    ttl_expiry: int | None = None,
) -> list[dict[str, Any]]:
    """A new message list with ``content`` injected as a synthetic call of ``tool_name``.

    * ``always``: a new pair goes at the end.
    * ``append_if_changed``: the latest pair with the same tool and arguments is
      found. Same content (by content hash) → that pair is replaced where it
      stands, with a new id (so a TTL is re-stamped); other content → a new pair
      goes at the end; no such pair → the new pair goes right after the first
      user message, or at the end when there is none.

    Ids are unique in the result: when the plain id is already used in the
    history, a ``_n_{k}`` segment is added, ``k`` one more than the highest
    counter among ids with the same identity prefix (the replaced pair aside).
    That keeps ids deterministic, and equal to DIAL's whenever possible.

    ``messages`` and its dicts are left untouched; the result shares the
    messages it does not change (non-dict mappings are copied into dicts).
    """
    if frequency not in FREQUENCIES:
        raise ValueError(f"unknown frequency {frequency!r}; use one of {', '.join(FREQUENCIES)}")
    prefix = identity_prefix(tool_name, arguments)
    content_hash = h6(content)
    out: list[dict[str, Any]] = [m if isinstance(m, dict) else dict(m) for m in messages]

    latest, found = _scan(messages, prefix, stop_at_latest=False)
    if frequency == "always":
        latest = None
    if latest is not None and _content_hash(latest.call_id, prefix) == content_hash:
        # The replaced pair's own id does not count as taken: same id again is fine.
        replaced = {(latest.assistant_index, latest.call_index), (latest.tool_index, -1)}
        taken = {call_id for index, at, call_id in found if (index, at) not in replaced}
        call_id = _unique_id(tool_name, arguments, content, ttl_expiry, taken, prefix)
        assistant = out[latest.assistant_index]
        calls = list(assistant["tool_calls"])
        calls[latest.call_index] = _tool_call(call_id, tool_name, arguments)
        # Keep whatever else the client put on these messages; only our call changes.
        out[latest.assistant_index] = {**assistant, "tool_calls": calls}
        out[latest.tool_index] = {
            **out[latest.tool_index],
            "tool_call_id": call_id,
            "content": content,
        }
        return out

    taken = {call_id for _, _, call_id in found}
    call_id = _unique_id(tool_name, arguments, content, ttl_expiry, taken, prefix)
    pair = synthetic_pair(call_id, tool_name, arguments, content)
    if frequency == "append_if_changed" and latest is None:
        first_user = next((i for i, m in enumerate(messages) if m.get("role") == "user"), None)
        if first_user is not None:
            out[first_user + 1 : first_user + 1] = pair
            return out
    out.extend(pair)
    return out


def _tool_call(call_id: str, tool_name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": tool_name, "arguments": json.dumps(dict(arguments))},
    }


def _content_hash(call_id: str, prefix: str) -> str | None:
    match = _AFTER_PREFIX.match(call_id, len(prefix))
    return match.group(1) if match else None


def _counter(call_id: str, prefix: str) -> int:
    match = _AFTER_PREFIX.match(call_id, len(prefix))
    return int(match.group(2)) if match and match.group(2) else 0


def _unique_id(
    tool_name: str,
    arguments: Mapping[str, Any],
    content: str,
    ttl_expiry: int | None,
    taken: set[str],
    prefix: str,
) -> str:
    call_id = make_call_id(tool_name, arguments, content, ttl_expiry)
    if call_id not in taken:
        return call_id
    # Higher than every counter in use under this prefix, hence free.
    counter = 1 + max(_counter(other, prefix) for other in taken)
    return make_call_id(tool_name, arguments, content, ttl_expiry, counter=counter)


_Found = tuple[int, int, str]  # (message index, call index or -1 for a tool message, id)


def _scan(
    messages: Sequence[Mapping[str, Any]], prefix: str, *, stop_at_latest: bool
) -> tuple[SyntheticPair | None, list[_Found]]:
    """The latest pair under ``prefix``, and every id under it, found walking backwards.

    Walking backwards meets a pair's tool message before its call, so the first
    call already answered is the latest pair. Nothing is hashed and only string
    ids are looked at: a long history costs one cheap pass at most.
    """
    found: list[_Found] = []
    answered: dict[str, int] = {}
    latest: SyntheticPair | None = None
    last = len(messages) - 1
    for offset, message in enumerate(reversed(messages)):
        index = last - offset
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if isinstance(call_id, str) and call_id.startswith(prefix):
                found.append((index, -1, call_id))
                answered.setdefault(call_id, index)
        elif role == "assistant":
            calls = message.get("tool_calls")
            if not calls or not isinstance(calls, _CALL_LISTS):
                continue
            for call_index in range(len(calls) - 1, -1, -1):
                call = calls[call_index]
                call_id = call.get("id") if isinstance(call, _MAPPINGS) else None
                if not (isinstance(call_id, str) and call_id.startswith(prefix)):
                    continue
                found.append((index, call_index, call_id))
                if latest is None and call_id in answered:
                    latest = SyntheticPair(index, call_index, answered[call_id], call_id)
                    if stop_at_latest:
                        return latest, found
    return latest, found
