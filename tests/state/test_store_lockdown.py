"""The stores locked down as docs/deployment.md says: only toolbus's processes reach the state.

The recipes are read from the page ("Only toolbus reaches the store"), so the
page cannot drift from what runs here: a nats-server with the page's accounts
and permissions, and a redis-server with the page's ACL users. As toolbus's
users, the stores pass the whole state store conformance suite and a gateway
keeps its sessions in the bucket; as another user, a client cannot read or
write the bucket or the keys by any way the tests could think of.
"""

from __future__ import annotations

import json
import re
import secrets
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import nats
import nats.errors
import nats.js.errors
import pytest
import redis.asyncio
import redis.exceptions
from nats.js.api import StreamConfig, StreamSource

from tests.doors.processes import LISTEN, door_process
from tests.nats.server import nats_server_binary
from tests.redis.server import RedisServer
from tests.support.doc_examples import DOCS
from tests.support.servers import LOOPBACK, StickyPort, server_process
from toolbus import running, tool_service
from toolbus.application.sealing import new_seal_jwk
from toolbus.domain.errors import StateStoreError
from toolbus.plugins import connect, connect_state, connect_state_beside_broker
from toolbus.testing.state_conformance import StateStoreConformance, StoreFactory

pytestmark = pytest.mark.broker

PAGE = DOCS / "deployment.md"
BUCKET = "toolbus"  # the recipes name the default bucket and prefix
REFUSED = (TimeoutError, nats.errors.Error)


def recipe(name: str) -> str:
    """The page's block after ``<!-- recipe: NAME -->``."""
    found = re.findall(rf"<!-- recipe: {name} -->\n```\w+\n(.*?)```", PAGE.read_text(), re.S)
    assert len(found) == 1, f"docs/deployment.md has no single recipe {name!r}"
    return str(found[0])


# ---------------------------------------------------------------------------- NATS


@dataclass
class LockedNats:
    """The page's nats-server, and the URLs its recipe gives each kind of client."""

    port: int
    passwords: dict[str, str]
    broker: str  # toolbus's processes, on the account everyone shares
    state: str  # toolbus's processes, on the state's own account

    def url(self, user: str, password_variable: str) -> str:
        return f"nats://{user}:{self.passwords[password_variable]}@{LOOPBACK}:{self.port}"


@pytest.fixture(scope="module")
def locked_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LockedNats]:
    directory = tmp_path_factory.mktemp("locked-nats")
    config = recipe("nats-state-lockdown")
    passwords = {name: secrets.token_hex(12) for name in re.findall(r"\$(\w+_PASSWORD)", config)}
    assert set(passwords) == {"TOOLBUS_BUS_PASSWORD", "APPS_PASSWORD", "TOOLBUS_STATE_PASSWORD"}
    (directory / "nats-server.conf").write_text(config)

    @contextmanager
    def run(port: int) -> Iterator[LockedNats]:
        clients = {}
        for line in recipe("nats-state-lockdown-clients").splitlines():
            variable, _, value = line.removeprefix("export ").partition("=")
            for name, password in passwords.items():
                value = value.replace(f"${name}", password)
            clients[variable] = value.strip('"').replace("nats-1:4222", f"{LOOPBACK}:{port}")
        argv = [nats_server_binary(), "-a", LOOPBACK, "-p", str(port), "-c", "nats-server.conf"]
        with server_process(argv, port=port, workdir=directory, env=passwords):
            yield LockedNats(port, passwords, clients["TOOLBUS_BROKER"], clients["TOOLBUS_STATE"])

    with StickyPort(run).running() as locked:
        yield locked


class TestNatsStateAccount(StateStoreConformance):
    """As the recipe's ``toolbus-state`` user, the bucket is a whole state store."""

    settle_timeout = 5.0

    @pytest.fixture
    def store_factory(self, locked_nats: LockedNats) -> StoreFactory:
        return lambda: connect_state(locked_nats.state)


class Refusals:
    """A nats-py connection's asynchronous errors: the server's permission violations."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def heard(self, error: Exception) -> None:
        self.seen.append(str(error))

    def of(self, subject: str) -> bool:
        return any("permissions violation" in s and subject.lower() in s for s in self.seen)


async def _writes_to_bucket(locked: LockedNats) -> int:
    """The bucket's last sequence: every write takes the next (it keeps one per key)."""
    owner = await nats.connect(locked.state)
    try:
        info = await owner.jetstream(timeout=5).stream_info(f"KV_{BUCKET}")
    except nats.js.errors.NotFoundError:
        return 0  # the bucket is made on first use
    else:
        return int(info.state.last_seq)
    finally:
        await owner.close()


@pytest.mark.anyio
async def test_another_user_can_neither_read_nor_write_the_bucket(locked_nats: LockedNats) -> None:
    store = await connect_state(locked_nats.state)
    try:
        await store.put("door-sessions", "alice/s1", b"alice's session", ttl=60)
        before = await _writes_to_bucket(locked_nats)
        refusals = Refusals()
        app = await nats.connect(
            locked_nats.url("apps", "APPS_PASSWORD"), error_cb=refusals.heard, connect_timeout=5
        )
        js = app.jetstream(timeout=1)
        try:
            with pytest.raises(REFUSED):
                await js.key_value(BUCKET)  # STREAM.INFO on the bucket's stream
            with pytest.raises(REFUSED):
                await app.request(
                    f"$JS.API.DIRECT.GET.KV_{BUCKET}.$KV.{BUCKET}.door-sessions.alice/s1",
                    b"",
                    timeout=1,
                )
            with pytest.raises(REFUSED):
                await js.get_last_msg(f"KV_{BUCKET}", f"$KV.{BUCKET}.door-sessions.alice/s1")
            heard = await app.subscribe(f"$KV.{BUCKET}.>")
            await app.publish(f"$KV.{BUCKET}.door-sessions.alice/s1", b"forged")
            # A stream of its own that sources the bucket: in another account, it finds none.
            await js.add_stream(
                StreamConfig(
                    name="spy", subjects=["spy.x"], sources=[StreamSource(name="KV_toolbus")]
                )
            )
            await store.put("door-sessions", "alice/s1", b"alice's session, later", ttl=60)
            await app.flush()
            spied = (await js.stream_info("spy")).state.messages
        finally:
            await app.close()

        entry = await store.get("door-sessions", "alice/s1")
    finally:
        await store.close()

    assert refusals.of(f"$js.api.stream.info.kv_{BUCKET}")
    assert refusals.of(f"$js.api.direct.get.kv_{BUCKET}")
    assert refusals.of(f"$js.api.stream.msg.get.kv_{BUCKET}")
    assert refusals.of(f"$kv.{BUCKET}.door-sessions")  # the write
    assert any("permissions violation for subscription" in s for s in refusals.seen)
    assert heard.pending_msgs == 0
    assert spied == 0
    assert entry is not None and entry.value == b"alice's session, later"
    assert await _writes_to_bucket(locked_nats) == before + 1  # only toolbus's own write


@pytest.mark.anyio
async def test_a_toolbus_process_without_state_cannot_keep_it_on_the_shared_account(
    locked_nats: LockedNats,
) -> None:
    # What toolbus serve --verify-key does when toolbus.toml names no state: the broker's own
    # bucket, which the recipe denies on the account everyone shares. It fails, loudly.
    with anyio.fail_after(60), pytest.raises(StateStoreError):
        await connect_state_beside_broker(locked_nats.broker, {"timeout": 1})


@tool_service(
    "lockdown-echo",
    request_queue="non-persistent://lockdown/request/echo",
    response_queue="non-persistent://lockdown/response/echo",
)
async def echo(text: str = "") -> str:
    return text


@pytest.fixture
async def apps_serving(locked_nats: LockedNats) -> AsyncIterator[None]:
    """The echo tool, served by a process of the ``apps`` user on the shared account."""
    bus = await connect(locked_nats.url("apps", "APPS_PASSWORD"))
    try:
        async with running(bus, echo):
            yield
    finally:
        await bus.close()


@pytest.mark.slow
@pytest.mark.anyio
async def test_the_gateway_keeps_its_sessions_in_the_locked_bucket(
    locked_nats: LockedNats, apps_serving: None, tmp_path: Path
) -> None:
    key = secrets.token_hex(16)
    (tmp_path / "toolbus.toml").write_text(
        'config = "config.json"\n\n[permissions]\nfallback = []\n\n'
        '[permissions.users]\nalice = ["default"]\n\n'
        '[[credentials.api-keys]]\nuser = "alice"\nenv = "ALICE_KEY"\n'
    )
    tool = {
        "type": "tool-service",
        "name": "echo",
        "description": "Say it back",
        "service": echo.id,
        "arguments": [{"name": "text", "type": "string", "description": "What to say"}],
    }
    config = {"tool-service": {echo.id: echo.descriptor()}, "tool": {"echo": tool}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    before = await _writes_to_bucket(locked_nats)
    environment = {
        "ALICE_KEY": key,
        "TOOLBUS_BROKER": locked_nats.broker,
        "TOOLBUS_STATE": locked_nats.state,
        "TOOLBUS_SEAL_KEYS": "env:SEAL_KEY",
        "SEAL_KEY": json.dumps(new_seal_jwk("seal-lockdown")),
    }
    async with (
        door_process(
            ["gateway", *LISTEN], cwd=tmp_path, environment=environment, http=True
        ) as door,
        httpx.AsyncClient(
            base_url=f"http://{LOOPBACK}:{door.port}",
            headers={"Authorization": f"Bearer {key}"},
            timeout=30,
        ) as http,
    ):
        opened = await http.post("/v1/sessions", json={})
        assert opened.status_code == 201, opened.text
        session = opened.json()["session_id"]
        called = await http.post(
            f"/v1/sessions/{session}/calls", json={"name": "echo", "arguments": {"text": "hi"}}
        )
        read = await http.get(f"/v1/sessions/{session}")

    assert called.status_code == 200, called.text
    assert called.json()["observation"] == "hi"
    assert read.status_code == 200, read.text
    assert await _writes_to_bucket(locked_nats) > before  # the session went to the bucket


# ---------------------------------------------------------------------------- Redis


@dataclass
class LockedRedis:
    port: int
    passwords: dict[str, str]

    def url(self, user: str, password: str, database: int = 1) -> str:
        return f"redis://{user}:{self.passwords[password]}@{LOOPBACK}:{self.port}/{database}"


@pytest.fixture(scope="module")
def locked_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LockedRedis]:
    directory = tmp_path_factory.mktemp("locked-redis")
    acl = recipe("redis-state-lockdown")
    passwords = {name: secrets.token_hex(12) for name in re.findall(r">(\w+_PASSWORD)", acl)}
    assert set(passwords) == {"TOOLBUS_REDIS_PASSWORD", "APPS_REDIS_PASSWORD"}
    for name, password in passwords.items():
        acl = acl.replace(f">{name}", f">{password}")
    (directory / "users.acl").write_text(acl)

    @contextmanager
    def run(port: int) -> Iterator[LockedRedis]:
        argv = [*RedisServer(directory, port).argv(), "--aclfile", str(directory / "users.acl")]
        with server_process(argv, port=port, workdir=directory):
            yield LockedRedis(port, passwords)

    with StickyPort(run).running() as locked:
        yield locked


class TestRedisAclUser(StateStoreConformance):
    """As the recipe's ``toolbus`` ACL user, Redis is a whole state store."""

    settle_timeout = 5.0

    @pytest.fixture
    def store_factory(self, locked_redis: LockedRedis) -> StoreFactory:
        # A limit the value-limit test can exceed (Redis's own is 512 MB).
        url = locked_redis.url("toolbus", "TOOLBUS_REDIS_PASSWORD") + "?max_value_size=8388608"
        return lambda: connect_state(url)


@pytest.mark.anyio
async def test_another_redis_user_cannot_touch_the_keys(locked_redis: LockedRedis) -> None:
    store = await connect_state(locked_redis.url("toolbus", "TOOLBUS_REDIS_PASSWORD"))
    key = f"{uuid.uuid4().hex[:8]}/s1"
    name = f"toolbus:door-sessions:{key}"
    attempts: list[tuple[Any, ...]] = [
        ("HGETALL", name),
        ("HGET", name, "v"),
        ("HSET", name, "v", "forged"),
        ("DEL", name),
        ("RENAME", name, "apps:stolen"),
        ("COPY", name, "apps:stolen"),
        ("DUMP", name),
        ("EXISTS", name),
        ("EVAL", f"return redis.call('HGET', '{name}', 'v')", 0),
        ("SUBSCRIBE", name),
        ("SCAN", 0),
        ("KEYS", "*"),
        ("MONITOR",),
        ("SELECT", 0),  # the database is no way round: keys are checked in every one
    ]
    app = redis.asyncio.Redis.from_url(locked_redis.url("apps", "APPS_REDIS_PASSWORD"))
    refused: list[str] = []
    try:
        await store.put("door-sessions", key, b"alice's session", ttl=60)
        await app.set("apps:mine", "1")  # the other user works on its own keys
        for command in attempts:
            if command[0] == "SELECT":
                await app.execute_command(*command)
                command = ("HGETALL", name)
            try:
                await app.execute_command(*command)
            except redis.exceptions.NoPermissionError as exc:
                refused.append(f"{command[0]}: {exc}")
            except redis.exceptions.ResponseError as exc:  # a script says it in its own words
                if "can't access" in str(exc):
                    refused.append(f"{command[0]}: {exc}")
        entry = await store.get("door-sessions", key)
        default = redis.asyncio.Redis(host=LOOPBACK, port=locked_redis.port)
        with pytest.raises(redis.exceptions.AuthenticationError):
            await default.ping()
        await default.aclose()
    finally:
        await app.aclose()
        await store.close()

    assert len(refused) == len(attempts), refused
    assert entry is not None and entry.value == b"alice's session"
