"""The config service's durable store: one JSON file, replaced atomically on every change.

The file holds the store's identity, its version and the whole snapshot (see
:func:`toolbus.domain.live.items.encode_version`)::

    {"format": "toolbus-config-store/1", "store": "5f0c...", "version": 7,
     "snapshot": {"tool-service": {...}, "tool": {...}}}

A change is written to a temporary file in the same directory, flushed and
fsynced, then renamed over the old file (``os.replace``, atomic on POSIX and
Windows), and the directory is fsynced so the rename itself survives a power
cut. A crash at any moment leaves either the old file or the new one, never a
mix. A missing file is a new, empty store at version 0; an unreadable one is an
error naming the file, and is never overwritten.

While a :class:`ConfigStore` is open it holds an exclusive lock on
``<file>.lock`` (where the platform has ``fcntl``), so that two config services
cannot write one store and undo each other's changes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import uuid
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from toolbus.domain.errors import ConfigError, Problem
from toolbus.domain.live.items import STORE_FORMAT, ConfigVersion, decode_version, encode_version

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows has no fcntl; the lock is advisory anyway
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("toolbus.config.store")


class StoreLocked(ConfigError):
    """Another process has the store open."""


class ConfigStore:
    """A versioned snapshot kept in one file. Open it with ``with ConfigStore(path) as store``.

    Reading (:attr:`current`) is free; :meth:`commit` writes synchronously (the
    config service calls it from a worker thread) and only then makes the new
    version current.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock: IO[Any] | None = None
        self._current: ConfigVersion | None = None

    def __repr__(self) -> str:
        version = "closed" if self._current is None else f"version {self._current.version}"
        return f"<ConfigStore {str(self.path)!r} {version}>"

    # -- lifecycle -----------------------------------------------------------------

    def open(self) -> ConfigVersion:
        """Lock the store and read it (a new, empty store when the file does not exist)."""
        if self._current is not None:
            return self._current
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = self._acquire_lock()
        try:
            self._current = self._read()
        except BaseException:
            self.close()
            raise
        return self._current

    def close(self) -> None:
        """Release the lock. The file stays as the last commit left it."""
        self._current = None
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.close()  # closing the descriptor releases the lock

    def __enter__(self) -> ConfigStore:
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _acquire_lock(self) -> IO[Any]:
        lock_path = self.path.with_name(self.path.name + ".lock")
        handle = lock_path.open("a+")
        if fcntl is not None:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.close()
                raise StoreLocked(
                    [
                        Problem(
                            f"config store '{self.path}'",
                            "",
                            f"is in use by another process (it holds '{lock_path}'); "
                            "run one config service per store",
                        )
                    ]
                ) from None
        return handle

    def _read(self) -> ConfigVersion:
        where = f"config store '{self.path}'"
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            # Written at once, so that the store keeps its identity across restarts
            # even before its first change.
            log.info("%s does not exist yet; creating an empty store", where)
            empty = ConfigVersion(uuid.uuid4().hex, 0, {})
            self._write(encode_version(empty, format=STORE_FORMAT))
            return empty
        except OSError as exc:
            raise ConfigError([Problem(where, "", f"cannot be read: {exc.strerror}")]) from exc
        try:
            return decode_version(data, where=where, format=STORE_FORMAT)
        except ConfigError as exc:
            problems = [*exc.problems, Problem(where, "", "was left untouched; repair or move it")]
            raise ConfigError(problems) from None

    # -- reading and writing -------------------------------------------------------

    @property
    def current(self) -> ConfigVersion:
        """The version last committed (or read at open)."""
        if self._current is None:
            raise RuntimeError("the config store is not open; use 'with ConfigStore(path)'")
        return self._current

    def commit(self, snapshot: dict[str, Any]) -> ConfigVersion:
        """Write ``snapshot`` as the next version and make it current; returns it.

        The caller validates first and serialises commits. On any failure the
        file and :attr:`current` are unchanged and the error propagates.
        """
        current = self.current
        version = ConfigVersion(current.store, current.version + 1, snapshot)
        self._write(encode_version(version, format=STORE_FORMAT))
        self._current = version
        return version

    def _write(self, data: bytes) -> None:
        directory = self.path.parent
        fd, temporary = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=directory)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        _fsync_directory(directory)


def _fsync_directory(directory: Path) -> None:
    # Makes the rename durable; not possible (nor needed) on every platform.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
