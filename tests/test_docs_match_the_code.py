"""What the docs list, held to the code, both ways, so that neither drifts from the other:

* every command of the command line (the typer application, the commands installed
  distributions add included) in docs/cli.md's table and text;
* every metric toolbus and the gateway register, with its labels, in
  docs/audit-and-metrics.md or docs/gateway.md, and no metric the code lacks
  anywhere in the docs; every label value the docs name is one the code writes;
* every field of the audit record and of its calls in the record's tables;
* every path of the gateway's API in docs/gateway.md's table.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main

import toolbus.cli
from toolbus.application.agent.audit import AuditRecord, CallRecord
from toolbus.application.calls.metrics import OTHER, ToolbusMetrics
from toolbus.cli import app
from toolbus.cli._app import SERVE_SERVICES, DefaultCommandGroup

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SOURCES = [ROOT / "core" / "src", *ROOT.glob("adapters/*/src"), *ROOT.glob("bridges/*/src")]
SOURCES += list(ROOT.glob("plugins/*/src"))

BACKTICKED = re.compile(r"`([^`\n]+)`")
#: A metric as the docs write one with its labels: ``name{a,b}`` or ``name{a="x",b="y"}``.
WITH_LABELS = re.compile(r"\b([a-z][a-z0-9_]*)\{([^}]*)\}")
#: What only a metric's name ends with, among the words the docs put in backticks.
METRIC_ENDINGS = ("_total", "_seconds", "_open", "_availability", "_count", "_usage")


def page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


# ------------------------------------------------------------------ the command line


def command_paths() -> Iterator[tuple[tuple[str, ...], Any, Any]]:
    """``(path, command, its group)`` for every command, groups included."""
    toolbus.cli.assemble()

    def walk(command: Any, path: tuple[str, ...], parent: Any) -> Iterator[Any]:
        yield path, command, parent
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, (*path, name), command)

    yield from walk(typer.main.get_command(app), (), None)


def documented_commands() -> set[str]:
    """Every ``toolbus a b`` docs/cli.md writes; ``toolbus a b\\|c`` is ``a b`` and ``a c``."""
    found = set()
    for match in re.finditer(
        r"toolbus ((?:[a-z][a-z0-9-]*)(?: [a-z][a-z0-9-]*(?:\\?\|[a-z0-9-]+)*)?)", page("cli.md")
    ):
        first, _, rest = match.group(1).partition(" ")
        found.add(first)
        for name in re.split(r"\\?\|", rest) if rest else ():
            found.add(f"{first} {name}")
    return found


def test_every_command_has_a_row_in_the_table_of_docs_cli() -> None:
    table = page("cli.md").split("\n## ", 1)[0]
    rows = {
        match.group(1) for match in re.finditer(r"^\| \[?`toolbus ([a-z][a-z0-9-]*)", table, re.M)
    }
    commands = {path[0] for path, _, _ in command_paths() if len(path) == 1}

    assert commands - rows == set(), "commands missing from the table in docs/cli.md"
    assert rows - commands == set(), "rows of docs/cli.md's table for no command"


def test_every_command_is_written_in_docs_cli() -> None:
    written = documented_commands()
    missing = []
    for path, command, parent in command_paths():
        if not path or hasattr(command, "commands"):
            continue
        if isinstance(parent, DefaultCommandGroup) and path[-1] == SERVE_SERVICES:
            path = path[:-1]  # "toolbus serve SERVICE..." is the default command
        if " ".join(path) not in written:
            missing.append(" ".join(path))

    assert missing == [], "commands docs/cli.md never writes as `toolbus ...`"


# ------------------------------------------------------------------ metrics


def registered_metrics() -> dict[str, set[str]]:
    """Every metric the code registers, as scraped (counters with ``_total``): its labels."""
    from prometheus_client import CollectorRegistry

    from toolbus_gateway.metrics import GatewayMetrics

    registry = CollectorRegistry()
    metrics = ToolbusMetrics(registry)
    recorder = metrics.for_service("probe")  # kept: the collector reads live recorders
    recorder.record(0.01, "bad-request")
    gateway = GatewayMetrics()
    labels: dict[str, set[str]] = {}
    for target in (registry, gateway.registry):
        by_name = {
            getattr(collector, "_name", None): set(getattr(collector, "_labelnames", ()))
            for collector in target._collector_to_names
        }
        for family in target.collect():
            name = family.name + ("_total" if family.type == "counter" else "")
            found = by_name.get(family.name) or set()
            for sample in family.samples:
                found |= set(sample.labels) - {"le"}
            labels[name] = labels.get(name, set()) | found  # the gateway's has them too
    del recorder
    return labels


#: The pages that list metrics: in tables, as ``name{labels}``, or by name (no labels).
METRIC_PAGES = ("audit-and-metrics.md", "gateway.md")


def metric_rows() -> Iterator[tuple[str, str, list[str], str]]:
    """``(page, metric, its label names, the rest of the row)`` for every row of a metrics
    table, every ``name{labels}`` the docs write, and every metric they name alone."""
    with_labels: set[str] = set()
    for name in METRIC_PAGES:
        text = page(name)
        for line in text.splitlines():
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not line.startswith("| `") or len(cells) < 4:
                continue
            metric = BACKTICKED.fullmatch(cells[0])
            if metric is None or "_" not in metric.group(1):
                continue
            labels = [] if cells[2] == "—" else cells[2]
            with_labels.add(metric.group(1))
            yield name, metric.group(1), _label_names(labels), " ".join(cells[2:])
        for match in WITH_LABELS.finditer(text):
            names = [part.split("=")[0].strip() for part in match.group(2).split(",")]
            with_labels.add(match.group(1))
            yield name, match.group(1), names, match.group(2)
    for name in METRIC_PAGES:
        for word in BACKTICKED.findall(page(name)):
            if _named_metric(word) and word not in with_labels:
                yield name, word, [], ""


def _named_metric(word: str) -> bool:
    return re.fullmatch(r"(toolbus|agent|gen_ai)_[a-z0-9_]+", word) is not None and word.endswith(
        METRIC_ENDINGS
    )


def _label_names(cell: Any) -> list[str]:
    if not cell:
        return []
    # "`tool`, `service`, `outcome` (`ok`/`error`)": the names outside parentheses.
    outside = re.sub(r"\([^)]*\)", "", cell)
    return BACKTICKED.findall(outside)


def test_every_metric_the_code_registers_is_documented_with_its_labels() -> None:
    registered = registered_metrics()
    documented = {metric: labels for _, metric, labels, _ in metric_rows()}

    assert set(registered) - set(documented) == set(), "metrics the docs do not list"
    wrong = {
        metric: (sorted(documented[metric]), sorted(labels))
        for metric, labels in registered.items()
        if set(documented[metric]) != labels
    }
    assert wrong == {}, "documented labels (left) differ from the code's (right)"


def test_no_page_names_a_metric_the_code_lacks() -> None:
    registered = registered_metrics()
    named: dict[str, set[str]] = {}
    for path in DOCS.rglob("*.md"):
        if path.name == "changelog.md":
            continue  # it names the metrics as they were called before, on purpose
        for word in BACKTICKED.findall(path.read_text(encoding="utf-8")):
            for match in re.finditer(r"\b((?:toolbus|agent|gen_ai)_[a-z0-9_]+)\b", word):
                metric = match.group(1)
                if metric.endswith(METRIC_ENDINGS) or metric in registered:
                    named.setdefault(metric, set()).add(path.name)
    for _, metric, _, _ in metric_rows():
        named.setdefault(metric, set()).add("a metrics table")

    unknown = {
        metric: sorted(pages)
        for metric, pages in named.items()
        if metric not in registered and _series_of(metric) not in registered
    }
    assert unknown == {}, "metrics the docs name and the code does not register"


def _series_of(sample: str) -> str:
    """The metric a sample name belongs to (``x_bucket`` -> ``x``)."""
    return re.sub(r"_(bucket|sum|count|created)$", "", sample)


def source_text() -> str:
    return "\n".join(
        path.read_text(encoding="utf-8") for root in SOURCES for path in root.rglob("*.py")
    )


def documented_label_values() -> Iterator[tuple[str, str, str]]:
    """``(page, metric, value)`` for each label value a metric's row or sample names."""
    registered = registered_metrics()
    for name, metric, labels, rest in metric_rows():
        values = re.findall(r'="([^"]*)"', rest)  # name{label="value"}
        for word in BACKTICKED.findall(rest):
            value = re.fullmatch(r"[a-z(][a-z0-9_.()-]*", word) is not None
            if value and word not in labels and word not in registered:
                values.append(word)
        for value in values:
            yield name, metric, value


@pytest.fixture(scope="module")
def source() -> str:
    return source_text()


@pytest.mark.parametrize(("page_name", "metric", "value"), list(documented_label_values()))
def test_every_label_value_the_docs_name_is_one_the_code_writes(
    source: str, page_name: str, metric: str, value: str
) -> None:
    assert value == OTHER or f'"{value}"' in source, (
        f"{page_name} says {metric} has the value {value!r}, which no code writes"
    )


def test_the_label_value_check_sees_the_values() -> None:
    values = {(metric, value) for _, metric, value in documented_label_values()}

    assert ("agent_invalid_state_transition_total", "other") in values
    assert ("toolbus_call_checks_total", "forbidden") in values


# ------------------------------------------------------------------ the audit record


@pytest.mark.parametrize("model", [AuditRecord, CallRecord], ids=lambda m: m.__name__)
def test_every_field_of_the_audit_record_is_in_its_tables(model: Any) -> None:
    text = page("audit-and-metrics.md").split("### What is never in it")[0]
    rows = set()
    for line in text.splitlines():
        if line.startswith("| `"):
            rows.update(BACKTICKED.findall(line.split("|")[1]))
    fields = {
        field.serialization_alias or name
        for name, field in model.model_fields.items()
        if name != "event"
    }

    assert fields - rows == set(), f"{model.__name__} fields docs/audit-and-metrics.md omits"


# ------------------------------------------------------------------ the gateway's API


def test_every_path_of_the_gateways_api_is_in_its_table() -> None:
    from toolbus.application.identity.bearer import Authenticator
    from toolbus.application.identity.credentials import CredentialTable
    from toolbus_gateway import Gateway, create_app

    gateway = Gateway("memory://", authenticator=Authenticator(CredentialTable([])), config={})
    served = {
        (method.upper(), re.sub(r"\{[^}]*\}", "{}", path))
        for path, operations in create_app(gateway).openapi()["paths"].items()
        for method in operations
    }
    table = page("gateway.md").split("\n## ", 1)[0]
    listed = {
        (method, re.sub(r"\{[^}]*\}", "{}", path))
        for method, path in re.findall(r"`(GET|POST|DELETE|PUT|PATCH) (/[^`]*)`", table)
    }

    assert served - listed == set(), "paths docs/gateway.md's table omits"
    # The console's page, and the API's description FastAPI serves itself.
    beside = {("GET", "/console"), ("GET", "/openapi.json")}
    assert listed - served - beside == set(), "paths the gateway does not serve"
