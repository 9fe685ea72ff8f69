"""W3C Trace Context (``traceparent``) values: parse, validate, make children.

``traceparent`` is ``{version}-{trace-id}-{parent-id}-{flags}`` in lower-case hex
(https://www.w3.org/TR/trace-context/). Random ids are passed in, so this module
stays pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16


@dataclass(frozen=True, slots=True)
class TraceContext:
    trace_id: str
    span_id: str
    flags: str = "01"
    tracestate: str | None = None

    @property
    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{self.flags}"

    def child(self, span_id: str) -> TraceContext:
        """The context for the next hop: same trace, a new span id."""
        return TraceContext(self.trace_id, span_id, self.flags, self.tracestate)


def parse_traceparent(value: str | None, tracestate: str | None = None) -> TraceContext | None:
    """The context in a ``traceparent`` header, or None when it is absent or invalid.

    As the spec says: version ``ff`` and all-zero ids are invalid; a version
    above ``00`` may carry more fields after the four we read.
    """
    if not value:
        return None
    match = _TRACEPARENT.fullmatch(value.strip())
    if match is None:
        return None
    version, trace_id, span_id, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest) or trace_id == _ZERO_TRACE:
        return None
    if span_id == _ZERO_SPAN:
        return None
    return TraceContext(trace_id, span_id, flags, tracestate or None)


def new_trace(trace_id: str, span_id: str) -> TraceContext:
    """A fresh, sampled trace."""
    return TraceContext(trace_id, span_id, "01")
