"""The real parts replicated front doors run on: a 3-node NATS cluster and a Redis server.

Shared by every test of the package (the cluster takes seconds to form); the
tests use names of their own in them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.nats.cluster import NatsCluster
from tests.redis.server import RedisServer


@pytest.fixture(scope="session")
def scaling_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    with NatsCluster(tmp_path_factory.mktemp("scaling-nats")).running() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def scaling_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("scaling-redis"))
    with server.running():
        yield server


@pytest.fixture(params=["nats", "redis"])
def store_url(
    request: pytest.FixtureRequest, scaling_cluster: NatsCluster
) -> tuple[str, dict[str, object]]:
    """Where the replicas keep their state: R3 key-value buckets on the cluster, or Redis.

    The broker is the cluster either way.
    """
    if request.param == "nats":
        return scaling_cluster.url(), {"replicas": 3, "bucket": "toolbus-scaling"}
    server: RedisServer = request.getfixturevalue("scaling_redis")
    return server.url, {"prefix": "toolbus-scaling"}
