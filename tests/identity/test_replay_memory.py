"""A verifier's in-process memory of token uses: each taken once, forgotten as it expires."""

from __future__ import annotations

import base64
import random

import pytest

from toolbus.application.identity.replays import InProcessReplays
from toolbus.domain.identity import base64url


def test_a_use_is_taken_once() -> None:
    replays = InProcessReplays()
    assert replays.take("c-1 100 ", 160.0, 100.0)
    assert not replays.take("c-1 100 ", 160.0, 101.0)
    assert replays.take("c-1 100 2", 160.0, 101.0)  # a retry is a use of its own


def test_expired_uses_are_forgotten_as_new_ones_come() -> None:
    replays = InProcessReplays()
    assert replays.take("a", 10.0, 0.0)
    assert replays.take("b", 30.0, 11.0)  # "a" expired at 10: forgotten now
    assert replays.take("a", 40.0, 12.0)
    assert not replays.take("b", 40.0, 12.0)
    # Emptied and filled again, the memory still knows when its oldest use expires.
    assert replays.take("c", 50.0, 45.0)  # forgets "b" (30) and "a" (40)
    assert replays.take("b", 60.0, 51.0)  # forgets "c" (50)
    assert replays.take("a", 70.0, 51.0)
    assert not replays.take("b", 70.0, 59.0)


def test_the_memory_keeps_the_newest_uses_when_full() -> None:
    replays = InProcessReplays(memory=2)
    assert replays.take("a", 100.0, 0.0)
    assert replays.take("b", 100.0, 0.0)
    assert replays.take("c", 100.0, 0.0)  # "a" is forgotten to make room
    assert not replays.take("b", 100.0, 0.0)
    assert not replays.take("c", 100.0, 0.0)
    assert replays.take("a", 100.0, 0.0)


def _read(read: object, text: str) -> object:
    try:
        return read(text)  # type: ignore[operator]
    except ValueError:
        return ValueError


@pytest.mark.parametrize("seed", range(5))
def test_base64url_reads_and_writes_as_the_base64_module(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(200):
        data = rng.randbytes(rng.randrange(80))
        written = base64url.encode(data)
        assert written == base64.urlsafe_b64encode(data).rstrip(b"=")
        text = written.decode()
        # Padded or not, with characters outside the alphabet, not ASCII, cut short.
        for given in (text, text + "=", text + "==", text + "!*", "é" + text, text[:-1], "a"):
            assert _read(base64url.decode, given) == _read(
                lambda t: base64.urlsafe_b64decode(t + "=="), given
            )
