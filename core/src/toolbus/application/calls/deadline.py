"""The caller's deadline of the call being served, for tool code that waits on others.

A client sends every call with its ``deadline`` (absolute Unix seconds); the
service host does not start a call whose deadline has passed, and while the
call runs the tool can ask :func:`call_deadline` how long the caller still
waits, to bound its own work (an HTTP request, a query) by it.
"""

from __future__ import annotations

from toolbus.application.identity.caller import serving


def call_deadline() -> float | None:
    """When the caller of the call being served stops waiting (Unix seconds).

    ``None`` outside a call, and for a call whose caller sent no (readable) deadline.
    """
    served = serving.get()
    return None if served is None else served[1]
