"""The fault matrix's brokers and deployments, and its report at the end of the run."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.faults import report
from tests.faults.brokers import ESCAPE_THE_PROXY, KINDS, PROXY_FAULTS, faulty_broker
from tests.faults.deployment import BrokerDeployment, deployed


@pytest.fixture(scope="module", params=KINDS)
async def deployment(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[BrokerDeployment]:
    """One broker and the matrix's processes on it, shared by every fault of the module:
    the processes must survive all of them, one after the other."""
    kind: str = request.param
    workdir = tmp_path_factory.mktemp(f"faults-{kind}")
    with faulty_broker(kind, workdir / "broker") as broker:
        async with deployed(broker, workdir / "processes") as running:
            yield running


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The proxy's faults are not made on a broker that escapes the proxy: such cases are
    deselected (they could only skip, and CI allows no skip it does not list)."""
    escaped = []
    for item in items:
        params = getattr(item, "callspec", None)
        given = {} if params is None else params.params
        if given.get("deployment") in ESCAPE_THE_PROXY and given.get("fault") in PROXY_FAULTS:
            escaped.append(item)
    if escaped:
        config.hook.pytest_deselected(items=escaped)
        items[:] = [item for item in items if item not in escaped]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    text = report.lines()
    if text:
        terminalreporter.write_sep("-", "fault matrix")
        for line in text:
            terminalreporter.write_line(line)
    report.write()
