"""An OpenAPI toolset as one tool service: each tool names its operation in its config.

The service id is the toolset's name; every tool it announces carries the
config value ``operation`` (the operationId), which the service declares as a
required ``config-param``, so a request says which operation to call the
TrustGraph way. Only the operations of the toolset's catalog (after
``include``/``exclude``) can be called: a request naming any other is refused.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from toolbus import ToolService
from toolbus.domain.errors import BadRequest
from toolbus_openapi.executor import HTTPExecutor
from toolbus_openapi.operations import OPERATION_PARAM, Catalog

#: Toolset names become service ids and queue names: letters, digits, '_' and '-'.
TOOLSET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


class OpenAPIService(ToolService):
    """Calls the operations of one HTTP API, by the ``operation`` each tool names."""

    config_params = ({"name": OPERATION_PARAM, "required": True},)

    def __init__(
        self,
        toolset: str,
        catalog: Catalog,
        executor: HTTPExecutor,
        *,
        request_queue: str = "",
        response_queue: str = "",
        env_params: Collection[str] = (),
        description: str = "",
    ) -> None:
        if not TOOLSET_NAME.fullmatch(toolset):
            raise ValueError(
                f"toolset name {toolset!r} must be letters, digits, '_' and '-' "
                "(it names the tool service and its queues)"
            )
        self.id = toolset
        self.request_queue = request_queue
        self.response_queue = response_queue
        self.env_params = frozenset(env_params)
        super().__init__()
        self.catalog = catalog
        self.executor = executor
        self.__doc__ = description or f"The operations of the {toolset} HTTP API"
        self._operations = catalog.by_id()

    def tools(self) -> dict[str, dict[str, Any]]:
        """The tools to announce, by key (each operation's tool name)."""
        return {operation.tool: operation.descriptor() for operation in self.catalog.operations}

    async def invoke(self, user: str, config: dict[str, Any], arguments: dict[str, Any]) -> str:
        name = config.get(OPERATION_PARAM)
        operation = self._operations.get(name) if isinstance(name, str) else None
        if operation is None:
            raise BadRequest(
                f"{self.id!r} has no operation {name!r}; a tool of this service must set "
                f"'{OPERATION_PARAM}' to one of: {', '.join(sorted(self._operations))}"
            )
        return await self.executor.call(operation, arguments)
