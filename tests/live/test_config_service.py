"""The config service over the bus: put/get/list/delete, refusals, versions, pushes, restarts."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.live.support import WEATHER_SERVICE, weather_snapshot, weather_tool
from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.live.config_client import ConfigClient
from toolbus.application.live.config_service import (
    CONFIG_CHANGES_QUEUE,
    CONFIG_REQUEST_QUEUE,
    CONFIG_RESPONSE_QUEUE,
    ConfigPublisher,
    ConfigService,
    serving_config,
)
from toolbus.domain.errors import BadRequest, ConfigError, NotFound
from toolbus.domain.live.items import ConfigRejected, Delete, ItemName, Put, decode_version
from toolbus.memory.bus import MemoryBus

pytestmark = pytest.mark.anyio


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "config-store.json"


@pytest.fixture
async def config(memory_bus: MemoryBus, store: Path) -> AsyncIterator[ConfigClient]:
    async with serving_config(memory_bus, store), ToolServiceClient(memory_bus) as client:
        yield ConfigClient(client, user="tester", timeout=5)


async def fill(config: ConfigClient) -> None:
    await config.put("tool-service/weather", WEATHER_SERVICE)
    await config.put("tool/weather", weather_tool())


async def test_put_get_list_delete(config: ConfigClient) -> None:
    first = await config.put("tool-service/weather", WEATHER_SERVICE)
    second = await config.put("tool/weather", json.dumps(weather_tool()))  # TrustGraph's form

    assert (first.version, first.changed, second.version) == (1, True, 2)
    assert await config.get("tool-service/weather") == WEATHER_SERVICE
    assert json.loads(await config.get("tool/weather")) == weather_tool()
    assert [str(n) for n in await config.list()] == ["tool-service/weather", "tool/weather"]
    assert await config.list("tool") == [ItemName("tool", "weather")]
    assert await config.list("nothing") == []

    deleted = await config.delete("tool/weather")
    assert (deleted.version, deleted.changed) == (3, True)
    with pytest.raises(NotFound, match="tool/weather is not in the configuration"):
        await config.get("tool/weather")
    with pytest.raises(NotFound):
        await config.delete("tool/weather")


async def test_putting_the_same_value_is_no_new_version(config: ConfigClient) -> None:
    await fill(config)
    again = await config.put("tool/weather", json.dumps(weather_tool()))
    assert (again.version, again.changed) == (2, False)


async def test_an_invalid_change_is_refused_with_every_problem_and_nothing_is_stored(
    config: ConfigClient, store: Path
) -> None:
    await fill(config)
    before = await anyio.Path(store).read_bytes()

    with pytest.raises(ConfigRejected) as caught:
        await config.put("tool/broken", {"type": "tool-service", "name": "weather"})

    assert str(caught.value).splitlines() == [
        "change refused, nothing stored: invalid configuration (3 problems):",
        "  - tool 'broken' (name 'weather') field 'description': is required",
        "  - tool 'broken' (name 'weather') field 'service': is required for a 'tool-service' "
        "tool; name a tool-service id",
        "  - tool 'broken' (name 'weather') field 'name': 'weather' is also the name of tool "
        "'weather'; tool names must be unique",
    ]
    assert await anyio.Path(store).read_bytes() == before
    assert [str(n) for n in await config.list()] == ["tool-service/weather", "tool/weather"]
    assert (await config.put("tool/weather", weather_tool())).version == 2


async def test_deleting_a_service_a_tool_still_uses_is_refused(config: ConfigClient) -> None:
    await fill(config)
    with pytest.raises(ConfigRejected, match="names tool-service 'weather', which is not"):
        await config.delete("tool-service/weather")


async def test_several_changes_apply_as_one_version_or_not_at_all(config: ConfigClient) -> None:
    await fill(config)
    forecast = weather_tool("forecast")

    with pytest.raises(ConfigRejected):
        await config.apply(
            [
                Put(ItemName("tool", "forecast"), forecast),
                Delete(ItemName("tool-service", "weather")),
            ]
        )
    assert await config.list("tool") == [ItemName("tool", "weather")]

    result = await config.apply(
        [Put(ItemName("tool", "forecast"), forecast), Delete(ItemName("tool", "weather"))]
    )
    assert result.version == 3
    assert await config.list("tool") == [ItemName("tool", "forecast")]

    replaced = await config.apply(
        [Put(ItemName("tool-service", "weather"), WEATHER_SERVICE)], replace=True
    )
    assert replaced.version == 4
    assert [str(n) for n in await config.list()] == ["tool-service/weather"]


async def test_the_snapshot_operation_gives_store_version_and_snapshot(
    config: ConfigClient,
) -> None:
    await fill(config)
    version = await config.snapshot()
    assert version.version == 2
    assert dict(version.snapshot) == weather_snapshot()


@pytest.mark.parametrize(
    ("arguments", "complaint"),
    [
        ({"operation": "shout"}, "unknown config operation 'shout'"),
        ({}, "unknown config operation None"),
        ({"operation": "put", "type": "tool", "key": "x"}, "'value' is missing"),
        ({"operation": "get", "type": "tool"}, "give the item as 'type' and 'key'"),
        ({"operation": "get", "type": "tool", "key": ""}, "empty KEY"),
        ({"operation": "list", "type": 3}, "'type' must be a string"),
        ({"operation": "apply", "changes": "x"}, "'changes' must be a list"),
        ({"operation": "apply", "changes": [{"operation": "get"}]}, "must be 'put' or 'delete'"),
        ({"operation": "apply", "changes": [], "replace": "yes"}, "'replace' must be true"),
    ],
)
async def test_malformed_requests_are_bad_requests(
    memory_bus: MemoryBus, store: Path, arguments: dict[str, Any], complaint: str
) -> None:
    async with serving_config(memory_bus, store), ToolServiceClient(memory_bus) as client:
        with pytest.raises(BadRequest, match=complaint):
            await client.call(
                request_queue=CONFIG_REQUEST_QUEUE,
                response_queue=CONFIG_RESPONSE_QUEUE,
                arguments=arguments,
                timeout=5,
            )


async def test_the_store_survives_a_restart_with_every_value_and_version(
    memory_bus: MemoryBus, store: Path
) -> None:
    async with serving_config(memory_bus, store), ToolServiceClient(memory_bus) as client:
        config = ConfigClient(client)
        await fill(config)
        await config.put("permissions/users", {"alice": ["default"]})
        before = await config.snapshot()

    async with serving_config(memory_bus, store), ToolServiceClient(memory_bus) as client:
        config = ConfigClient(client)
        after = await config.snapshot()
        assert after == before
        assert after.version == 3
        assert await config.get("permissions/users") == {"alice": ["default"]}
        assert (await config.put("tool/weather", weather_tool(groups=["x"]))).version == 4


async def test_concurrent_changes_get_one_version_each(config: ConfigClient) -> None:
    await config.put("tool-service/weather", WEATHER_SERVICE)
    results = []

    async def add(n: int) -> None:
        results.append(await config.put(f"tool/w{n}", weather_tool(f"w{n}")))

    async with anyio.create_task_group() as tasks:
        for n in range(20):
            tasks.start_soon(add, n)

    assert sorted(r.version for r in results) == list(range(2, 22))
    assert len(await config.list("tool")) == 20


async def test_every_version_is_pushed_and_the_current_one_repeated(
    memory_bus: MemoryBus, store: Path
) -> None:
    pushes = await memory_bus.subscribe(CONFIG_CHANGES_QUEUE)
    service = ConfigService.at(store)
    try:
        publisher = ConfigPublisher(memory_bus, service, interval=0.05)
        received = aiter(pushes)
        async with anyio.create_task_group() as tasks:
            await tasks.start(publisher.run)
            with anyio.fail_after(5):
                assert decode_version((await anext(received)).body).version == 0
                await service.apply([Put(ItemName("tool-service", "weather"), WEATHER_SERVICE)])
                pushed = await anext(received)
                while pushed.properties["version"] == "0":  # a repeat sent just before
                    pushed = await anext(received)
                assert pushed.properties["version"] == "1"
                assert dict(decode_version(pushed.body).snapshot) == {
                    "tool-service": {"weather": WEATHER_SERVICE}
                }
                # Nothing changes, and the interval repeats version 1 for late joiners.
                assert decode_version((await anext(received)).body).version == 1
            publisher.stop()
    finally:
        service.close()


async def test_a_store_found_invalid_is_refused_and_left_as_it_is(
    memory_bus: MemoryBus, store: Path
) -> None:
    # Written by a config service that knew an "mcp" tool type; this one does not.
    async with serving_config(memory_bus, store, tool_types={"tool-service", "mcp"}) as service:
        await service.apply(
            [Put(ItemName("tool", "m"), {"type": "mcp", "name": "m", "description": "d"})]
        )
    written = await anyio.Path(store).read_bytes()

    with pytest.raises(ConfigError) as refused:
        ConfigService.at(store)

    text = str(refused.value)
    assert "is not a known tool type" in text
    assert f"config store '{store}' (version 1)" in text
    assert "is not served" in text and "toolbus config load" in text
    assert await anyio.Path(store).read_bytes() == written
    # The store's lock was released: a service with the plugin can open it again.
    ConfigService.at(store, tool_types={"tool-service", "mcp"}).close()


@pytest.mark.parametrize("item", ["tools/weather", "weird/x", "permision/users"])
async def test_a_change_to_an_unknown_section_is_refused_and_the_version_stays(
    config: ConfigClient, item: str
) -> None:
    before = await config.put("tool-service/weather", WEATHER_SERVICE)

    with pytest.raises(ConfigRejected) as refused:
        await config.put(item, weather_tool())

    assert f"snapshot section {item.split('/')[0]!r}" in str(refused.value)
    assert "the sections are tool-service, tool, permissions, hooks" in str(refused.value)
    assert (await config.snapshot()).version == before.version
