"""Isolated Python environments holding a real trustgraph-base release, made on first use.

The two generations cannot share one environment (the same package at two
versions, each with its own dependencies), nor the workspace's. Each is built
from a requirements file pinned with hashes (``requirements-<version>.txt``
beside this module) into a directory under the system's temp directory whose
name is the hash of that file and of the Python version: the first run
downloads and installs, later runs reuse it; a changed pin builds a new one.
Regenerate a requirements file with::

    echo 'trustgraph-base==2.11.1' | uv pip compile --universal --python-version 3.11 \\
        --generate-hashes --no-header - -o tests/trustgraph/requirements-2.11.1.txt
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support.uv import uv_executable

HERE = Path(__file__).parent
#: The releases under test: the first with tool services; the last of the 2.1
#: request generation (2.3.21, with Kafka and RabbitMQ backends as they stand,
#: which arrived in 2.3.15 and 2.3.14); the first of the 2.4 generation; and the
#: newest 2.x.
VERSIONS = ("2.1.28", "2.3.21", "2.4.0", "2.11.1")
PEER = HERE / "peer.py"


def trustgraph_python(version: str) -> Path:
    """The interpreter of an environment with trustgraph-base ``version`` (built if need be)."""
    requirements = HERE / f"requirements-{version}.txt"
    if not requirements.is_file():
        raise RuntimeError(f"no pinned requirements for trustgraph-base {version}: {requirements}")
    digest = hashlib.sha256(requirements.read_bytes() + sys.version.encode()).hexdigest()[:16]
    root = Path(tempfile.gettempdir()) / "toolbus-test-environments"
    root.mkdir(exist_ok=True)
    target = root / f"trustgraph-base-{version}-{digest}"
    python = target / "bin" / "python"
    done = target / ".complete"
    if done.exists():
        return python
    # Another test run (another checkout on this machine) may be building it too.
    with (root / f".{target.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return python
        shutil.rmtree(target, ignore_errors=True)
        uv = uv_executable()
        install = [uv, "pip", "install", "--python", str(python), "--require-hashes"]
        steps = [
            [uv, "venv", "--python", sys.executable, str(target)],
            [*install, "-r", str(requirements)],
        ]
        try:
            for step in steps:
                subprocess.run(step, check=True, capture_output=True, text=True)
        except subprocess.CalledProcessError as exc:
            shutil.rmtree(target, ignore_errors=True)
            raise RuntimeError(
                f"could not build the trustgraph-base {version} environment:\n{exc.stderr}"
            ) from exc
        done.touch()
    return python


def generation(version: str) -> str:
    """The request generation a release writes: "2.1" (with ``user``) or "2.4"."""
    minor = int(version.split(".")[1])
    return "2.4" if minor >= 4 else "2.1"
