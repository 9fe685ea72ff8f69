"""Keeping what a long-running process built at start-up out of the garbage collector's way.

A server imports its libraries, reads its configuration and builds its app once,
then keeps all of it for its life: a hundred thousand objects or more, which
CPython's cycle collector walks on every full collection. Under load, calls in
flight are promoted to the oldest generation and full collections follow every
few thousand calls, each walking that start-up heap again (about 100 ms each in
the gateway). :func:`settle_heap` collects once and then freezes what is left
(``gc.freeze()``), so that later collections look only at what was made after.
"""

from __future__ import annotations

import gc


def settle_heap() -> None:
    """Collect the start-up garbage, then exempt every object still alive from later
    collections. Call it once, when the process is ready to serve."""
    gc.collect()
    gc.freeze()
