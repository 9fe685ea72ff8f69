"""Following the policy files: a thread that reloads them when they change.

``watchfiles`` (the kernel's change notifications) watches the folders that
hold the files, so that an editor that saves by writing a new file and
renaming it over the old one is seen too. A change is taken only when the
files read and check; the engine swaps its policies between two calls, so no
call is dropped or decided half on the old policies and half on the new.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import watchfiles

log = logging.getLogger("toolbus.policy")


def watch(
    paths: Sequence[Path], reload: Callable[[], object], stop: threading.Event
) -> threading.Thread:
    """Call ``reload`` whenever one of ``paths`` (files, or folders of them) changes,
    until ``stop`` is set."""
    folders = sorted({path if path.is_dir() else path.parent for path in paths})
    watched = {path.resolve() for path in paths}

    def concerns(_change: watchfiles.Change, name: str) -> bool:
        path = Path(name).resolve()
        return path in watched or path.parent in watched

    def follow() -> None:
        try:
            for _ in watchfiles.watch(
                *folders,
                watch_filter=concerns,
                stop_event=stop,
                raise_interrupt=False,
                debounce=200,
            ):
                reload()
        except Exception:
            log.exception("stopped following the policy files; restart to take changes")

    thread = threading.Thread(target=follow, name="toolbus-policy-files", daemon=True)
    thread.start()
    return thread
