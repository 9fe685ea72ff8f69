"""What a model, an API or a document must not be able to do to an OpenAPI toolset.

Everything runs against the real API (tests/openapi/api.py under uvicorn on
127.0.0.1), which records what reached it: a model's arguments must not add
query parameters beside a fixed one, set a credential, or hold a worker past
its deadline; a redirect must not carry the credential outside the base path;
an API's error text reaches the model bounded and redacted; a document never
decides where a secret goes, and is not read over plain http unless allowed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.openapi.api import document
from tests.openapi.conftest import Api
from tests.openapi.test_calls import registry_of, tools_for
from toolbus import AgentSession
from toolbus.domain.errors import BadRequest, ConfigError, ToolCallError, Unavailable
from toolbus.testing.kit import ToolTestKit
from toolbus_openapi import Credential, Limits, ToolsetSettings, open_toolset

pytestmark = pytest.mark.anyio

KEY_HEADER = Credential("header", "SHOP_SECRET", "X-API-Key")
KEY_QUERY = Credential("query", "SHOP_SECRET", "api_key")


# ---------------------------------------------------------------- arguments


@pytest.mark.parametrize(
    "q",
    [{"tenant": "bob", "admin": "true"}, ["bob"], 7],
    ids=["object", "array", "number"],
)
async def test_a_value_of_another_type_cannot_add_query_parameters_beside_a_fixed_one(
    toolbus: ToolTestKit, shop: Api, make_toolset: Any, q: Any
) -> None:
    service = make_toolset()
    await toolbus.serve(service)
    fixed = {"shop_searchItems": {"options": {"args": {"fixed": {"tenant": "{user}"}}}}}
    tools = toolbus.tools(registry_of(service, **fixed))

    async with AgentSession(tools, user="alice") as session:
        refused = await session.call("shop_searchItems", {"q": q})
        allowed = await session.call("shop_searchItems", {"q": "kettle"})

    assert refused.error_type == "bad-request"
    assert "argument q" in refused.observation and "is not of type 'string'" in refused.observation
    assert json.loads(allowed.observation) == {"query": "q=kettle&tenant=alice"}
    assert [hit.query for hit in shop.hits.hits] == ["q=kettle&tenant=alice"]


async def test_an_object_parameter_expands_but_never_onto_another_parameter_or_a_credential(
    toolbus: ToolTestKit, shop: Api, make_toolset: Any
) -> None:
    service = make_toolset(credentials=(KEY_QUERY,), environ={"SHOP_SECRET": shop.secret})
    tools = await tools_for(toolbus, service)

    expanded = await tools.call("shop_searchItems", {"filter": {"colour": "red"}})
    refused = []
    for taken in ("tenant", "q", "api_key"):
        with pytest.raises(BadRequest, match=f"query parameter filter may not set {taken}"):
            await tools.call("shop_searchItems", {"tenant": "alice", "filter": {taken: "x"}})
        refused.append(taken)

    assert json.loads(expanded)["query"] == "colour=red&api_key=***"
    assert [hit.query for hit in shop.hits.hits] == [f"colour=red&api_key={shop.secret}"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"limit": "ten"}, "argument limit: 'ten' is not of type 'integer'"),
        ({"filter": {"colour": 3}}, "argument filter.colour: 3 is not of type 'string'"),
        ({"limit": 1, "admin": True}, "unknown argument(s) admin"),
    ],
)
async def test_arguments_are_validated_against_the_operations_schema(
    toolbus: ToolTestKit, shop: Api, make_toolset: Any, arguments: dict[str, Any], message: str
) -> None:
    tools = await tools_for(toolbus, make_toolset())

    with pytest.raises(BadRequest) as refused:
        await tools.call("shop_searchItems", arguments)

    assert message in str(refused.value)
    assert shop.hits.hits == []


async def test_a_credential_header_is_sent_once_whatever_the_document_offers(
    toolbus: ToolTestKit, shop: Api, make_toolset: Any
) -> None:
    """The document offers a header parameter ``x-api-key``: the credential owns it."""
    service = make_toolset(credentials=(KEY_HEADER,), environ={"SHOP_SECRET": shop.secret})
    tools = await tools_for(toolbus, service)

    with pytest.raises(BadRequest, match="unknown argument"):
        await tools.call("shop_keyedHeaders", {"x-api-key": "chosen-by-the-model"})
    answer = await tools.call("shop_keyedHeaders")

    assert "x-api-key" not in {a["name"] for a in service.tools()["shop_keyedHeaders"]["arguments"]}
    assert json.loads(answer) == {"x-api-key": ["***"]}
    (hit,) = shop.hits.hits
    assert [v for k, v in hit.header_list if k == "x-api-key"] == [shop.secret]


# ---------------------------------------------------------------- redirects


async def test_a_redirect_outside_the_base_path_does_not_carry_the_credential(
    toolbus: ToolTestKit, shop: Api, make_toolset: Any
) -> None:
    service = make_toolset(credentials=(KEY_HEADER,), environ={"SHOP_SECRET": shop.secret})
    tools = await tools_for(toolbus, service)

    assert await tools.call("shop_redirectOutside") == "outside the API"

    first, second = shop.hits.hits
    assert (first.path, second.path) == ("/api/redirect/outside", "/outside/collect")
    assert first.headers["x-api-key"] == shop.secret
    assert "x-api-key" not in second.headers


# ---------------------------------------------------------------- deadlines


async def test_an_answer_that_trickles_ends_by_the_toolsets_timeout_and_frees_its_connection(
    toolbus: ToolTestKit, shop: Api, make_toolset: Any
) -> None:
    # One connection: a call that kept it would block the next one.
    limits = Limits(timeout=1.0, max_connections=1)
    tools = await tools_for(toolbus, make_toolset(limits=limits))

    # Ended by the toolset's 1 s limit ("no complete answer"), not by the caller's 30 s
    # one; the drip would run for 300 s.
    with anyio.fail_after(25), pytest.raises(Unavailable, match="no complete answer"):
        await tools.call("shop_drip", timeout=30)
    hung_up = await anyio.to_thread.run_sync(shop.hits.hung_up.wait, 10)
    with anyio.fail_after(10):
        answer = await tools.call("shop_getItem", {"item_id": "1"})

    assert hung_up, "the API kept sending: the connection was not closed"
    assert json.loads(answer)["id"] == "1"


async def test_a_call_ends_by_the_callers_deadline_when_that_comes_first(
    toolbus: ToolTestKit, shop: Api, make_toolset: Any
) -> None:
    tools = await tools_for(toolbus, make_toolset(limits=Limits(timeout=300.0)))

    with anyio.fail_after(20), pytest.raises(ToolCallError):
        await tools.call("shop_drip", timeout=1.0)  # the client gives up after 1 s ...
    # ... and the service stops too: it hangs up on the API.
    assert await anyio.to_thread.run_sync(shop.hits.hung_up.wait, 10)


# ---------------------------------------------------------------- what reaches the model


@pytest.mark.parametrize("status", [200, 500])
async def test_a_secret_at_the_cut_of_an_answer_is_not_shown_in_part(
    toolbus: ToolTestKit, shop: Api, make_toolset: Any, status: int
) -> None:
    limits = Limits(timeout=5.0, max_response_bytes=1024, max_error_bytes=1024)
    service = make_toolset(
        credentials=(KEY_HEADER,), environ={"SHOP_SECRET": shop.secret}, limits=limits
    )
    tools = await tools_for(toolbus, service)
    # The credential starts 10 bytes before the cut.
    arguments = {"at": 1024 - len("token=") - 10, "status": status}

    try:
        shown = await tools.call("shop_leaky", arguments)
    except ToolCallError as exc:
        shown = exc.message

    assert shop.secret[:10] not in shown
    assert len(shown) < 1200


async def test_a_transport_errors_text_reaches_the_model_bounded(
    toolbus: ToolTestKit, make_toolset: Any, tmp_path: Path
) -> None:
    """An upstream that answers garbage: httpx quotes it all; the model gets a bounded part."""
    garbage = b"HTTP/1.1 2x0 " + b"A" * 5000 + b"\r\n\r\n"

    async def answer_garbage(stream: Any) -> None:
        async with stream:
            await stream.receive()
            await stream.send(garbage)

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    service = make_toolset(base_url=f"http://127.0.0.1:{port}/api")
    tools = await tools_for(toolbus, service)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(listener.serve, answer_garbage)
        with pytest.raises(Unavailable) as refused:
            await tools.call("shop_getItem", {"item_id": "1"})
        tasks.cancel_scope.cancel()

    assert "illegal status line" in refused.value.message
    assert len(refused.value.message) < 500


# ---------------------------------------------------------------- documents


def test_with_a_credential_the_document_does_not_choose_the_destination(
    shop: Api, tmp_path: Path
) -> None:
    spec = tmp_path / "elsewhere.json"
    paths = {"/collect": {"get": {"operationId": "collect"}}}
    spec.write_text(
        json.dumps({**document(), "servers": [{"url": shop.elsewhere_url}], "paths": paths})
    )
    settings = ToolsetSettings("shop", str(spec), credentials=(KEY_HEADER,))

    with pytest.raises(ConfigError, match="give --base-url URL: the document's servers must not"):
        open_toolset(settings, environ={"SHOP_SECRET": shop.secret})
    with pytest.raises(ConfigError, match="with env-params configured, give --base-url"):
        open_toolset(ToolsetSettings("shop", str(spec), env_params=("SHOP_SECRET",)))
    assert shop.elsewhere_hits.hits == []


def test_a_document_over_plain_http_is_refused_unless_allowed(shop: Api) -> None:
    with pytest.raises(ConfigError, match=r"plain http .*--allow-insecure-spec"):
        open_toolset(ToolsetSettings("shop", shop.spec_url))

    allowed = open_toolset(ToolsetSettings("shop", shop.spec_url, allow_insecure_spec=True))

    assert "shop_getItem" in allowed.tools()
