"""What a benchmark run was measured on, written next to its figures.

Every JSON file the benchmarks write carries this, and every chart is labelled
with it: a figure without its machine, versions, date and load means little.
"""

from __future__ import annotations

import asyncio
import importlib.metadata as metadata
import json
import os
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

PACKAGES = ("toolbus", "nats-py", "pulsar-client", "aiokafka", "uvloop", "faststream", "redis")


def _memory_gib() -> float:
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0.0
    return round(pages / 2**30, 1)


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def run_info(event_loop: str | None = None) -> dict[str, Any]:
    """The machine, the versions, the date and the load this run is measured under."""
    load = os.getloadavg()
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{os.cpu_count()}-core {platform.machine()}, {_memory_gib():g} GiB, "
        f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "versions": {p: v for p in PACKAGES if (v := _version(p)) is not None},
        "load_average": [round(x, 2) for x in load],
        "event_loop": event_loop or loop_name(),
    }


def loop_name() -> str:
    """The running event loop's kind, or asyncio when none runs."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return "asyncio"
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


def label(info: dict[str, Any]) -> str:
    """One line for a chart or a table caption."""
    versions = ", ".join(f"{k} {v}" for k, v in info["versions"].items())
    load = " ".join(f"{x:g}" for x in info["load_average"])
    if "load_average_after" in info:
        load += " at start, " + " ".join(f"{x:g}" for x in info["load_average_after"]) + " at end"
    return (
        f"{info['machine']}; Python {info['python']} ({info['event_loop']}); {versions}; "
        f"{info['date']}; load {load}"
    )


def write(path: Path | None, kind: str, info: dict[str, Any], results: Any) -> None:
    """Save a run as ``{"kind", "info", "results"}`` (what ``charts.py`` reads)."""
    if path is None:
        return
    info = {**info, "load_average_after": [round(x, 2) for x in os.getloadavg()]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"kind": kind, "info": info, "results": results}, indent=1) + "\n")
    print(f"wrote {path}", file=sys.stderr)
