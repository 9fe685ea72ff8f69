"""The fault matrix's brokers and deployments, and its report at the end of the run."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.faults import report
from tests.faults.brokers import KINDS, faulty_broker
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


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    text = report.lines()
    if text:
        terminalreporter.write_sep("-", "fault matrix")
        for line in text:
            terminalreporter.write_line(line)
    report.write()
