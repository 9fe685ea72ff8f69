"""measure() counts a call that never returns as failed instead of stalling the run."""

from __future__ import annotations

import anyio
import pytest

from toolbus.benchmark import measure

pytestmark = pytest.mark.anyio


async def test_a_hung_call_is_cut_off_after_the_grace_period_and_counted() -> None:
    calls = 0

    async def sometimes_lost() -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            await anyio.sleep_forever()  # a reply that never comes

    with anyio.fail_after(5):
        figure = await measure(sometimes_lost, 2, 0.1, grace=0.2)
    assert figure.errors == 1
    assert figure.calls == calls - 1 > 0
