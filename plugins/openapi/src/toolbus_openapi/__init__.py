"""OpenAPI toolsets: the operations of any HTTP API as tools on the bus.

>>> service = open_toolset(ToolsetSettings("petstore", "petstore.yaml",
...                                        base_url="http://127.0.0.1:8080/api/v3"))
>>> async with serving(bus, service):   # served and announced
...     ...

From the command line: ``toolbus serve openapi --toolset petstore --spec
petstore.yaml --broker nats://127.0.0.1:4222``. See docs/openapi.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolbus._internal.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from toolbus_openapi.credentials import Credential
    from toolbus_openapi.document import Document, read_document
    from toolbus_openapi.executor import HTTPExecutor, Limits
    from toolbus_openapi.operations import Catalog, Operation, Skipped, read_operations
    from toolbus_openapi.service import OpenAPIService
    from toolbus_openapi.toolset import (
        ToolsetSettings,
        open_toolset,
        serving,
        toolsets_from_file,
    )

# httpx and the OpenAPI parser take a while to import: the package stays light
# until a name is used, so that loading its command (any toolbus command) does not
# pay for them.
__getattr__ = lazy_exports(
    __name__,
    {
        "Credential": "credentials",
        "Document": "document",
        "read_document": "document",
        "HTTPExecutor": "executor",
        "Limits": "executor",
        "Catalog": "operations",
        "Operation": "operations",
        "Skipped": "operations",
        "read_operations": "operations",
        "OpenAPIService": "service",
        "ToolsetSettings": "toolset",
        "open_toolset": "toolset",
        "serving": "toolset",
        "toolsets_from_file": "toolset",
    },
)

__all__ = [
    "Catalog",
    "Credential",
    "Document",
    "HTTPExecutor",
    "Limits",
    "OpenAPIService",
    "Operation",
    "Skipped",
    "ToolsetSettings",
    "open_toolset",
    "read_document",
    "read_operations",
    "serving",
    "toolsets_from_file",
]
