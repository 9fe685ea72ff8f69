"""Finding uv, for tests that build environments or wheels of their own."""

from __future__ import annotations

import os
import shutil


def uv_executable() -> str:
    """The uv that runs the tests (``uv run`` says where it is), or the one on PATH."""
    found = os.environ.get("UV") or shutil.which("uv")
    if not found:
        raise RuntimeError(
            "this test needs uv to build environments; run the tests with 'uv run pytest' "
            "or put uv on PATH"
        )
    return found
