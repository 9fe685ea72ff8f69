"""OpenAPI toolsets: the operations of any HTTP API as tools on the bus.

>>> service = open_toolset(ToolsetSettings("petstore", "petstore.yaml",
...                                        base_url="http://127.0.0.1:8080/api/v3"))
>>> async with serving(bus, service):   # served and announced
...     ...

From the command line: ``toolbus serve openapi --toolset petstore --spec
petstore.yaml --broker nats://127.0.0.1:4222``. See docs/openapi.md.
"""

from toolbus_openapi.credentials import Credential
from toolbus_openapi.document import Document, read_document
from toolbus_openapi.executor import HTTPExecutor, Limits
from toolbus_openapi.operations import Catalog, Operation, Skipped, read_operations
from toolbus_openapi.service import OpenAPIService
from toolbus_openapi.toolset import ToolsetSettings, open_toolset, serving, toolsets_from_file

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
