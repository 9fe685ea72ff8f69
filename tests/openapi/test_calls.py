"""Calling a real HTTP API's operations as tools: parameters, answers, limits, safety.

The API (tests/openapi/api.py) runs under uvicorn on 127.0.0.1 and records
every request it receives, so each safety test can check that the request it
refused never reached any server.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.openapi.api import document
from tests.openapi.conftest import Api
from toolbus import AgentSession, Tools, ToolServiceClient, running
from toolbus.application.live.registry import LiveRegistry
from toolbus.domain.config.loading import load_registry
from toolbus.domain.config.registry import Registry
from toolbus.domain.config.schemas import export_tools
from toolbus.domain.errors import (
    AccessDenied,
    BadRequest,
    NotFound,
    ToolServiceError,
    Unavailable,
)
from toolbus.domain.live.announcements import announced_tools
from toolbus.memory.bus import connect
from toolbus.testing.kit import ToolTestKit
from toolbus_openapi import Limits, OpenAPIService, serving

pytestmark = pytest.mark.anyio


def registry_of(service: OpenAPIService, **changes: dict[str, Any]) -> Registry:
    """The configuration an agent gets from the service's announcement (tools changed)."""
    tools = announced_tools(service.id, service.tools())
    for key, extra in changes.items():
        tools[key] = {**tools[key], **extra}
    return load_registry({"tool-service": {service.id: service.descriptor()}, "tool": tools})


async def tools_for(kit: ToolTestKit, service: OpenAPIService, **changes: Any) -> Tools:
    await kit.serve(service)
    return kit.tools(registry_of(service, **changes))


async def test_path_query_header_and_body_parameters_reach_the_api(
    toolbus: ToolTestKit, shop: Api, make_toolset: Any
) -> None:
    tools = await tools_for(toolbus, make_toolset())

    item = await tools.call("shop_getItem", {"item_id": "42"})
    listed = await tools.call("shop_listItems", {"limit": 5, "tag": ["red", "new"]})
    shown = await tools.call("shop_showHeaders", {"X-Trace-Tag": "t-1"})
    created = await tools.call("shop_createItem", {"name": "mug", "price": 3.5})

    # 2xx JSON answers come back as compact JSON text, non-ASCII as is.
    assert item == '{"id":"42","name":"kettle","note":"café"}'
    assert json.loads(listed)["tags"] == ["red", "new"]
    assert json.loads(shown) == {"x-trace-tag": "t-1"}
    assert json.loads(created) == {"id": 7, "name": "mug", "price": 3.5}
    paths = [(hit.method, hit.path, hit.query) for hit in shop.hits.hits]
    assert paths == [
        ("GET", "/api/items/42", ""),
        ("GET", "/api/items", "limit=5&tag=red&tag=new"),
        ("GET", "/api/headers", ""),
        ("POST", "/api/items", ""),
    ]
    assert shop.hits.hits[3].headers["content-type"] == "application/json"


async def test_a_base_url_at_the_root_or_with_a_trailing_slash_works(
    toolbus: ToolTestKit, shop: Api, make_toolset: Any, tmp_path: Any
) -> None:
    from toolbus_openapi import ToolsetSettings, open_toolset

    spec = tmp_path / "root.json"
    path = {
        "get": {"operationId": "getItem"},
        "parameters": [document()["components"]["parameters"]["ItemId"]],
    }
    spec.write_text(json.dumps({**document(), "paths": {"/api/items/{item_id}": path}}))
    at_root = open_toolset(ToolsetSettings("root", str(spec), base_url=shop.url))
    slashed = make_toolset(base_url=f"{shop.url}/api/")
    try:
        await toolbus.serve(at_root, slashed)
        await toolbus.call(at_root, {"item_id": "1"}, config={"operation": "getItem"})
        await toolbus.call(slashed, {"item_id": "2"}, config={"operation": "getItem"})
    finally:
        await at_root.executor.aclose()

    assert [hit.path for hit in shop.hits.hits] == ["/api/items/1", "/api/items/2"]


async def test_form_and_text_bodies_are_sent_as_their_media_types(
    toolbus: ToolTestKit, make_toolset: Any
) -> None:
    tools = await tools_for(toolbus, make_toolset())

    form = await tools.call("shop_logIn", {"user": "ada lovelace", "remember": True})
    text = await tools.call("shop_addNote", {"body": "buy milk"})

    assert form == "application/x-www-form-urlencoded: user=ada+lovelace&remember=true"
    assert text == "text/plain: buy milk"


async def test_required_and_unknown_arguments_are_refused_before_any_request(
    toolbus: ToolTestKit, shop: Api, make_toolset: Any
) -> None:
    tools = await tools_for(toolbus, make_toolset())

    with pytest.raises(BadRequest, match=r"missing required argument.*name"):
        await tools.call("shop_createItem", {"price": 1})
    with pytest.raises(BadRequest, match=r"unknown argument.*colour.*it takes"):
        await tools.call("shop_getItem", {"item_id": "1", "colour": "red"})
    assert shop.hits.hits == []


async def test_non_2xx_answers_are_typed_errors_with_a_bounded_excerpt(
    toolbus: ToolTestKit, shop: Api, make_toolset: Any
) -> None:
    tools = await tools_for(toolbus, make_toolset())

    with pytest.raises(NotFound) as missing:
        await tools.call("shop_getItem", {"item_id": "404"})
    with pytest.raises(ToolServiceError) as broken:
        await tools.call("shop_broken")

    assert str(missing.value) == (
        "getItem (GET /items/{item_id}) answered HTTP 404 Not Found: "
        '{"error":"no such item","id":"404"}'
    )
    message = str(broken.value)
    assert message.startswith("broken (GET /broken) answered HTTP 500 Internal Server Error: ")
    assert message.endswith(" …") and len(message) < 1200  # 6,800 bytes of body, cut


async def test_a_long_answer_is_cut_with_a_marker(toolbus: ToolTestKit, make_toolset: Any) -> None:
    tools = await tools_for(toolbus, make_toolset(limits=Limits(max_response_bytes=1000)))

    answer = await tools.call("shop_big")

    assert answer == "x" * 1000 + "\n[response truncated at 1000 bytes]"


async def test_slow_answers_arrive_and_timeouts_are_unavailable(
    toolbus: ToolTestKit, make_toolset: Any
) -> None:
    # Generous margins both ways: a loaded machine must not turn either into the other.
    tools = await tools_for(toolbus, make_toolset(limits=Limits(timeout=2.0)))

    assert await tools.call("shop_slow", {"seconds": 0.1}) == "finally"
    with pytest.raises(
        Unavailable, match=r"slow \(GET /slow\): no complete answer from .* within 2 s"
    ):
        await tools.call("shop_slow", {"seconds": 30})


async def test_a_redirect_on_the_same_host_is_followed(
    toolbus: ToolTestKit, shop: Api, make_toolset: Any
) -> None:
    tools = await tools_for(toolbus, make_toolset())

    assert json.loads(await tools.call("shop_redirectHome"))["id"] == "1"


async def test_a_redirect_to_another_host_is_refused_before_it_is_sent(
    toolbus: ToolTestKit, shop: Api, make_toolset: Any
) -> None:
    tools = await tools_for(toolbus, make_toolset())

    with pytest.raises(AccessDenied, match=r"refused to follow a redirect to 127\.0\.0\.1:"):
        await tools.call("shop_redirectAway")

    assert [hit.path for hit in shop.hits.hits] == ["/api/redirect/away"]
    assert shop.elsewhere_hits.hits == []


async def test_an_allowed_host_is_reached_without_the_credentials(
    toolbus: ToolTestKit, shop: Api, make_toolset: Any
) -> None:
    from toolbus_openapi import Credential

    elsewhere = shop.elsewhere_url.removeprefix("http://")
    service = make_toolset(
        allow_hosts=(elsewhere,),
        credentials=(Credential("header", "SHOP_KEY", "X-API-Key"),),
        environ={"SHOP_KEY": shop.secret},
    )
    tools = await tools_for(toolbus, service)

    assert await tools.call("shop_redirectAway") == "you reached another host"
    (first,) = shop.hits.hits
    (second,) = shop.elsewhere_hits.hits
    assert first.headers["x-api-key"] == shop.secret
    assert "x-api-key" not in second.headers


@pytest.mark.parametrize(
    "item_id",
    [
        "../whoami",
        "..",
        ".",
        "a/b",
        "..\\whoami",
        "http://127.0.0.1:1/collect",
        "//127.0.0.1:1/collect",
        "",
    ],
)
async def test_path_parameters_cannot_move_the_request(
    toolbus: ToolTestKit, shop: Api, make_toolset: Any, item_id: str
) -> None:
    tools = await tools_for(toolbus, make_toolset())

    with pytest.raises(BadRequest, match="path parameter item_id may not"):
        await tools.call("shop_getItem", {"item_id": item_id})

    assert shop.hits.hits == []
    assert shop.elsewhere_hits.hits == []


async def test_other_characters_in_a_path_parameter_are_percent_encoded(
    toolbus: ToolTestKit, shop: Api, make_toolset: Any
) -> None:
    tools = await tools_for(toolbus, make_toolset())

    await tools.call("shop_getItem", {"item_id": "a b?c#d%2e%2e"})

    assert shop.hits.hits[0].path == "/api/items/a%20b%3Fc%23d%252e%252e"


async def test_a_request_for_an_operation_outside_the_filter_is_refused(
    toolbus: ToolTestKit, shop: Api, make_toolset: Any
) -> None:
    service = make_toolset(include=("items",), exclude=("createItem",))
    await toolbus.serve(service)

    assert sorted(service.tools()) == ["shop_getItem", "shop_listItems"]
    # Someone who can publish requests names an excluded operation anyway.
    with pytest.raises(BadRequest, match="has no operation 'whoAmI'"):
        await toolbus.call(service, {}, config={"operation": "whoAmI"})
    assert shop.hits.hits == []


async def test_argument_options_apply_to_openapi_tools_unchanged(
    toolbus: ToolTestKit, shop: Api, make_toolset: Any
) -> None:
    # defaults, fixed values with templates, and a secret from the service's environment.
    service = make_toolset(env_params=("SHOP_TAG",), environ={})
    service_environ = {"SHOP_TAG": "from-env"}
    await toolbus.serve(service, environ=service_environ)
    options = {
        "shop_listItems": {"options": {"args": {"defaults": {"limit": 3}}}},
        "shop_showHeaders": {
            "options": {"args": {"fixed": {"X-Trace-Tag": "{user}/{tool_call_id}"}}}
        },
        "shop_createItem": {"options": {"envs": {"name": "SHOP_TAG"}}},
    }
    tools = toolbus.tools(registry_of(service, **options))

    async with AgentSession(tools, user="alice") as session:
        schemas = {t["name"]: t["inputSchema"] for t in session.tools("mcp")}
        listed = await session.call("shop_listItems", {}, "call-1")
        shown = await session.call("shop_showHeaders", {"X-Trace-Tag": "forged"}, "call-2")
        created = await session.call("shop_createItem", {"price": 2}, "call-3")

    assert schemas["shop_listItems"]["properties"]["limit"]["default"] == 3
    assert "X-Trace-Tag" not in schemas["shop_showHeaders"]["properties"]
    assert "name" not in schemas["shop_createItem"]["properties"]
    assert json.loads(listed.observation)["limit"] == "3"
    assert json.loads(shown.observation) == {"x-trace-tag": "alice/call-2"}
    # The injected value is the service's secret: redacted in the answer.
    assert json.loads(created.observation) == {"id": 7, "name": "***", "price": 2}
    assert json.loads(shop.hits.hits[2].body) == {"price": 2, "name": "from-env"}


async def test_agents_see_and_call_the_tools_from_the_announcement_alone(
    shop: Api, make_toolset: Any
) -> None:
    service = make_toolset()
    bus = await connect("memory://openapi-announce")
    try:
        async with (
            ToolServiceClient(bus) as client,
            LiveRegistry(bus, follow_config=False) as live,
            serving(bus, service, interval=3600),
        ):
            registry = await live.wait_until(lambda r: "shop_getItem" in r.tools, timeout=10)
            openai = export_tools(registry.tools.values(), "openai")
            answer = await live.tools(client).call("shop_getItem", {"item_id": "9"})
    finally:
        await bus.close()

    assert json.loads(answer)["id"] == "9"
    get_item = next(t for t in openai if t["function"]["name"] == "shop_getItem")
    assert get_item["function"]["description"] == "Get one item"
    assert get_item["function"]["parameters"] == {
        "type": "object",
        "properties": {"item_id": {"type": "string", "description": "The item's id"}},
        "required": ["item_id"],
    }


async def test_the_toolset_is_an_ordinary_service_for_running(shop: Api, make_toolset: Any) -> None:
    service = make_toolset()
    bus = await connect("memory://openapi-running")
    try:
        async with running(bus, service), ToolServiceClient(bus) as client:
            answer = await client.call(
                request_queue=service.request_queue,
                response_queue=service.response_queue,
                config={"operation": "listItems"},
                arguments={"limit": 1},
            )
    finally:
        await bus.close()
    assert json.loads(answer)["limit"] == "1"
