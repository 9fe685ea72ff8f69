"""The signing benchmark's parts run and measure what they name (no figure is checked)."""

from __future__ import annotations

import pytest

from tests.benchmarks import bench_signing


@pytest.mark.parametrize("algorithm", bench_signing.ALGORITHMS)
def test_every_stage_and_library_is_measured(algorithm: str) -> None:
    stages = bench_signing.stages(algorithm, repeat=3)
    libraries = bench_signing.libraries(algorithm, repeat=3)

    assert all(0 < cost < float("inf") for cost in stages.values())
    assert {"joserfc", "PyJWT", "(cryptography alone)"} <= set(libraries)


@pytest.mark.anyio
async def test_the_calls_contest_runs_on_the_memory_bus() -> None:
    contestants = await bench_signing.compare("memory://", seconds=0.3)

    assert [c.name for c in contestants] == ["unsigned", *bench_signing.ALGORITHMS]
    assert all(c.throughput > 0 for c in contestants)
    ratios = bench_signing.report("memory", contestants, dict.fromkeys(bench_signing.ALGORITHMS, 1))
    assert set(ratios) == set(bench_signing.ALGORITHMS)
