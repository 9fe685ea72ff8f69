"""Secrets in broker and state store URLs never reach what the commands print.

A nats-server that takes a token and a redis-server that takes a password, each
given in the URL (as a query option, or as user info), to ``toolbus serve``,
``toolbus gateway`` and ``toolbus approvals list`` as real processes: they
connect (so the secrets were read) and say where, and neither secret is in
anything they print, verbose logs included.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.doors.processes import LISTEN, TOOLBUS, door_environment, door_process
from tests.nats.server import NatsServer
from tests.redis.server import RedisServer
from tests.support.servers import LOOPBACK
from toolbus.application.sealing import new_seal_jwk

pytestmark = [pytest.mark.broker, pytest.mark.slow]

NATS_TOKEN = "nats-token-0f3a9c"
REDIS_PASSWORD = "redis-password-7d21e4"
SECRETS = (NATS_TOKEN, REDIS_PASSWORD)
ALICE_KEY = "alice-key-0123456789abcdef"


@pytest.fixture(scope="module")
def nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    server = NatsServer(
        tmp_path_factory.mktemp("nats-token"),
        extra_config=f'authorization {{ token: "{NATS_TOKEN}" }}',
    )
    with server.running():
        yield server


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis-password"), password=REDIS_PASSWORD)
    with server.running():
        yield server


@pytest.fixture(params=["query options", "user info"])
def urls(request: pytest.FixtureRequest, nats: NatsServer, redis: RedisServer) -> tuple[str, str]:
    """The broker's and the state store's URLs, each carrying its secret."""
    if request.param == "query options":
        return (
            f"nats://{LOOPBACK}:{nats.port}?token={NATS_TOKEN}",
            f"redis://{LOOPBACK}:{redis.port}?password={REDIS_PASSWORD}",
        )
    return (
        f"nats://{NATS_TOKEN}@{LOOPBACK}:{nats.port}",
        f"redis://:{REDIS_PASSWORD}@{LOOPBACK}:{redis.port}",
    )


@pytest.fixture
def directory(tmp_path: Path, urls: tuple[str, str]) -> Path:
    broker, state = urls
    (tmp_path / "toolbus.toml").write_text(
        f"broker = {json.dumps(broker)}\n"
        f"state = {json.dumps(state)}\n"
        'seal-keys = ["seal.jwk"]\n'
        'config = "config.json"\n\n'
        '[permissions]\nfallback = []\n\n[permissions.users]\nalice = ["default"]\n\n'
        '[[credentials.api-keys]]\nuser = "alice"\nenv = "ALICE_KEY"\n',
        encoding="utf-8",
    )
    (tmp_path / "config.json").write_text('{"tool-service": {}, "tool": {}}', encoding="utf-8")
    (tmp_path / "seal.jwk").write_text(json.dumps(new_seal_jwk("seal-test")), encoding="utf-8")
    return tmp_path


def _run(args: list[str], cwd: Path) -> str:
    done = subprocess.run(
        [TOOLBUS, *args],
        cwd=cwd,
        # The approver's own key: approvals are read as whoever it belongs to.
        env=door_environment({"ALICE_KEY": ALICE_KEY, "TOOLBUS_API_KEY": ALICE_KEY}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def _assert_redacted(output: str, *expected: str) -> None:
    for secret in SECRETS:
        assert secret not in output, output
    for line in expected:
        assert line in output, output


@pytest.fixture
def verify_key(directory: Path) -> str:
    _run(["keys", "new", "gateway.jwk", "--kid", "gw-1", "--public", "gw.pub.jwk"], directory)
    return "gw.pub.jwk"


@pytest.mark.anyio
async def test_serve_says_where_it_serves_and_remembers_replays_without_the_secrets(
    directory: Path, verify_key: str
) -> None:
    args = ["serve", "joke-service", "--verify-key", verify_key, "--no-announce", "--verbose"]
    async with door_process(
        args, cwd=directory, environment={}, ready="replays refused on every replica"
    ) as served:
        pass

    _assert_redacted(served.output(), "serving joke-service", "in the state store at redis://")


@pytest.mark.anyio
async def test_the_gateway_says_where_its_broker_and_sessions_are_without_the_secrets(
    directory: Path,
) -> None:
    args = ["gateway", "--verbose", *LISTEN]
    async with door_process(
        args, cwd=directory, environment={"ALICE_KEY": ALICE_KEY}, http=True
    ) as served:
        pass

    _assert_redacted(served.output(), "(broker nats://", "sessions in redis://")


def test_approvals_say_which_store_they_read_without_its_secret(
    directory: Path, urls: tuple[str, str]
) -> None:
    listed = _run(["approvals", "list", "--verbose"], directory)
    on_nats = _run(["approvals", "list", "--state", urls[0], "--verbose"], directory)

    _assert_redacted(listed, "approvals in redis://", "No call is waiting for approval.")
    _assert_redacted(on_nats, "approvals in nats://")


def test_a_secret_that_is_refused_is_not_printed_either(
    directory: Path, redis: RedisServer
) -> None:
    wrong = f"redis://{LOOPBACK}:{redis.port}?password=wrong-{REDIS_PASSWORD}"
    done = subprocess.run(
        [TOOLBUS, "approvals", "list", "--state", wrong, "--verbose"],
        cwd=directory,
        env=door_environment({"ALICE_KEY": ALICE_KEY, "TOOLBUS_API_KEY": ALICE_KEY}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode != 0
    assert "refused the credentials" in done.stderr
    _assert_redacted(done.stdout + done.stderr, "approvals in redis://")
