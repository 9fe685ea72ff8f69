"""Charts for docs/performance.md from the JSON the benchmark scripts write.

Each ``*.json`` in the folder (``bench_loops.py``, ``bench_streams.py``,
``bench_payloads.py``, ``bench_replicas.py`` and ``side_by_side.py`` with
``--json``) becomes a PNG of
the same name beside it, labelled with the machine, versions, date and load it
was measured under. One command regenerates them all:

    uv run --group charts python tests/benchmarks/charts.py [docs/charts]
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.benchmarks.run_info import label

DEFAULT_FOLDER = Path(__file__).resolve().parents[2] / "docs" / "charts"
COLOURS = {
    "raw": "#9e9e9e",
    "toolbus": "#1f77b4",
    "asyncio": "#9e9e9e",
    "uvloop": "#2ca02c",
    "1 replica": "#c6dbef",
    "2 replicas": "#6baed6",
    "4 replicas": "#08519c",
}


def bars(
    ax: Axes,
    groups: Sequence[str],
    series: dict[str, Sequence[float]],
    notes: Sequence[str],
    unit: str,
    log: bool = True,
) -> None:
    """Grouped bars (one colour per series) with a note above each group.

    A log scale by default, since raw and toolbus can be orders of magnitude
    apart; ``log=False`` where the bars are steps of one curve.
    """
    width = 0.8 / len(series)
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, values, width, label=name, color=COLOURS.get(name))
    ax.set_xticks(range(len(groups)), groups, fontsize=7)
    ax.set_ylabel(unit)
    top = max(max(v) for v in series.values())
    if log:
        ax.set_yscale("log")
        ax.set_ylim(top=top * 4)
    else:
        ax.set_ylim(0, top * 1.15)
    for g, note in enumerate(notes):
        tallest = max(values[g] for values in series.values())
        ax.annotate(note, (g, tallest), xytext=(0, 3), textcoords="offset points",
                    ha="center", fontsize=8, weight="bold")  # fmt: skip
    ax.grid(axis="y", alpha=0.3)


def note(row: dict[str, Any], ratio: str) -> str:
    """The ratio above a group, unless a message was lost: then the figure is void."""
    lost = sum(v["errors"] for v in row.values() if isinstance(v, dict) and "errors" in v)
    return f"{lost} lost" if lost else ratio


def per_broker(
    title: str, info: dict[str, Any], brokers: Sequence[str], draw: Callable[[Axes, str], None]
) -> Figure:
    width = max(7.0, 5.0 * len(brokers))
    fig, axes = plt.subplots(1, len(brokers), figsize=(width, 4.6), squeeze=False)
    for ax, broker in zip(axes[0], brokers, strict=True):
        ax.set_title(broker)
        draw(ax, broker)
    axes[0][0].legend(fontsize=8, loc="upper left")
    fig.suptitle(title, fontsize=11)
    footer = "\n".join(textwrap.wrap(label(info), int(width * 19)))
    fig.text(0.01, 0.01, footer, fontsize=6.5, va="bottom")
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def loops_chart(info: dict[str, Any], rows: list[dict[str, Any]]) -> Figure:
    brokers = list(dict.fromkeys(r["broker"] for r in rows))

    def draw(ax: Axes, broker: str) -> None:
        mine = [r for r in rows if r["broker"] == broker]
        bars(
            ax,
            [f"{r['contestant']}\n{r['in_flight']} in flight" for r in mine],
            {loop: [r[loop]["throughput"] for r in mine] for loop in ("asyncio", "uvloop")},
            [note(r, f"{r['ratio']:.2f}×") for r in mine],
            "calls/s",
        )

    return per_broker("uvloop against asyncio: calls/s (uvloop / asyncio above)", info,
                      brokers, draw)  # fmt: skip


def streams_chart(info: dict[str, Any], rows: list[dict[str, Any]]) -> Figure:
    brokers = list(dict.fromkeys(r["broker"] for r in rows))

    def size(r: dict[str, Any]) -> str:
        b = r["chunk_bytes"]
        return f"{r['chunks']}×{b // 1024} KB" if b >= 1024 else f"{r['chunks']}×{b} B"

    def draw(ax: Axes, broker: str) -> None:
        mine = [r for r in rows if r["broker"] == broker]
        bars(
            ax,
            [f"{size(r)}\n{r['in_flight']} in flight" for r in mine],
            {c: [r[c]["chunks_per_s"] for r in mine] for c in ("raw", "toolbus")},
            [note(r, f"{r['ratio']:.0%}") for r in mine],
            "chunks/s",
        )

    return per_broker("Streams: chunks/s, toolbus against the raw client (toolbus / raw above)",
                      info, brokers, draw)  # fmt: skip


def payloads_chart(info: dict[str, Any], rows: list[dict[str, Any]]) -> Figure:
    brokers = list(dict.fromkeys(r["broker"] for r in rows))

    def size(b: int) -> str:
        return f"{b // 2**20} MB" if b >= 2**20 else f"{b // 1024} KB"

    def draw(ax: Axes, broker: str) -> None:
        mine = [r for r in rows if r["broker"] == broker]
        bars(
            ax,
            [f"{size(r['bytes'])}\n{r['in_flight']} in flight" for r in mine],
            {c: [r[c]["mb_per_s"] for r in mine] for c in ("raw", "toolbus")},
            [note(r, f"{r['ratio']:.0%}") for r in mine],
            "MB/s of payload each way",
        )

    text = rows[0]["text"] if rows else ""
    return per_broker(f"Payloads ({text} text): MB/s, toolbus against the raw client "
                      "(toolbus / raw above)", info, brokers, draw)  # fmt: skip


def side_by_side_chart(info: dict[str, Any], results: dict[str, Any]) -> Figure:
    rows = results["rows"]
    brokers = list(dict.fromkeys(r["broker"] for r in rows))

    def draw(ax: Axes, broker: str) -> None:
        mine = {r["contestant"]: r["figures"] for r in rows if r["broker"] == broker}
        levels = list(mine["raw"])
        series = {c: [f[level]["throughput"] for level in levels] for c, f in mine.items()}
        notes = [f"{series['toolbus'][i] / series['raw'][i]:.0%}" for i in range(len(levels))]
        bars(ax, [f"{level} in flight" for level in levels], series, notes, "calls/s")

    return per_broker("Tool calls: calls/s by contestant (toolbus / raw above)", info,
                      brokers, draw)  # fmt: skip


def replicas_chart(info: dict[str, Any], rows: list[dict[str, Any]]) -> Figure:
    brokers = list(dict.fromkeys(r["broker"] for r in rows))
    counts = list(dict.fromkeys(r["replicas"] for r in rows))

    def draw(ax: Axes, broker: str) -> None:
        mine = [r for r in rows if r["broker"] == broker]
        kinds = list(dict.fromkeys((r["tool"], r["queue"]) for r in mine))
        figure = {(r["tool"], r["queue"], r["replicas"]): r for r in mine}
        bars(
            ax,
            [f"{tool}\n{queue}" for tool, queue in kinds],
            {
                f"{n} replica{'s' if n > 1 else ''}": [
                    figure[(*k, n)]["calls_per_s"] for k in kinds
                ]
                for n in counts
            },
            [f"{figure[(*k, counts[-1])]['ratio']:.2f}×" for k in kinds],
            "calls/s, 64 in flight",
            log=False,
        )
        partitions = mine[0].get("partitions")
        if partitions:
            ax.set_title(f"{broker} ({partitions} partitions per topic)")

    return per_broker(f"Replicas: calls/s with 1, 2 and 4 service processes ({counts[-1]} / 1 "
                      "above)", info, brokers, draw)  # fmt: skip


CHARTS: dict[str, Callable[[dict[str, Any], Any], Figure]] = {
    "loops": loops_chart,
    "streams": streams_chart,
    "payloads": payloads_chart,
    "side_by_side": side_by_side_chart,
    "replicas": replicas_chart,
}


def render(path: Path) -> Path:
    run = json.loads(path.read_text())
    kind = run.get("kind")
    if kind not in CHARTS:
        raise SystemExit(f"{path}: unknown kind {kind!r}; expected one of {sorted(CHARTS)}")
    fig = CHARTS[kind](run["info"], run["results"])
    target = path.with_suffix(".png")
    fig.savefig(target, dpi=110)
    plt.close(fig)
    return target


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, nargs="?", default=DEFAULT_FOLDER)
    folder = parser.parse_args().folder
    runs = sorted(folder.glob("*.json"))
    if not runs:
        raise SystemExit(f"no benchmark JSON in {folder}: run a benchmark with --json first")
    for found in runs:
        print(f"wrote {render(found)}")
