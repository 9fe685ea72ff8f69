"""What of a call the policies look at: the state, and which arguments.

A decision can only depend on what the policies read. Found once per set of
policies, from Cedar's own JSON form of them, this lets the engine hand Cedar
only those arguments and remember decisions by them alone: a call whose
``query`` differs from the last but whose ``tenant`` does not gets the
decision already made, when no policy reads ``query``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_CONTEXT = {"Var": "context"}


@dataclass(frozen=True, slots=True)
class References:
    """What the policies read of a call's context. ``arguments`` ``None``: all of them."""

    state: bool = False
    arguments: frozenset[str] | None = frozenset()

    def __or__(self, other: References) -> References:
        if self.arguments is None or other.arguments is None:
            arguments = None
        else:
            arguments = self.arguments | other.arguments
        return References(self.state or other.state, arguments)


EVERYTHING = References(True, None)
NOTHING = References()


def references(policies: Iterable[Mapping[str, Any]]) -> References:
    """What the policies (Cedar's JSON form) read of the context."""
    found = NOTHING
    for policy in policies:
        found = found | _read(policy)
    return found


def arguments_named(policy: Mapping[str, Any]) -> frozenset[str]:
    """The arguments one policy (Cedar's JSON form) names, read or tested with ``has``."""
    return _read(policy).arguments or frozenset()


def _attribute_of(node: Any) -> tuple[Any, str] | None:
    """``(what, attribute)`` when ``node`` reads an attribute (``x.a``, ``x["a"]``, ``x has a``)."""
    if not isinstance(node, Mapping) or len(node) != 1:
        return None
    ((operator, operand),) = node.items()
    if operator in (".", "has") and isinstance(operand, Mapping) and "attr" in operand:
        return operand.get("left"), str(operand["attr"])
    return None


def _read(node: Any) -> References:
    if node == _CONTEXT:
        return EVERYTHING  # the context as a whole: anything in it may matter
    read = _attribute_of(node)
    if read is not None:
        target, attribute = read
        if target == _CONTEXT:
            if attribute == "state":
                return References(state=True)
            if attribute == "arguments":
                return References(arguments=None)  # the arguments as a whole
            return NOTHING  # nothing else is in the context: Cedar says so at validation
        inner = _attribute_of(target)
        if inner is not None and inner[0] == _CONTEXT and inner[1] == "arguments":
            return References(arguments=frozenset({attribute}))
    found = NOTHING
    if isinstance(node, Mapping):
        for value in node.values():
            found = found | _read(value)
    elif isinstance(node, list):
        for value in node:
            found = found | _read(value)
    return found
