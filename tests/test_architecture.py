"""The domain stays pure: standard library (minus I/O and concurrency), pydantic, orjson, itself.

docs/architecture.md: the domain never touches a socket, a clock it was not handed or an
event loop, and depends on nothing outside it but pydantic and orjson. This test reads the
source with ``ast`` rather than importing it, so a forbidden import is caught
even in a branch that never runs (``if TYPE_CHECKING:`` included: a type-only
import still couples the layers).
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Collection, Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).parent.parent / "core" / "src"
DOMAIN = SRC / "toolbus" / "domain"

# Standard-library modules that do I/O, keep time or run things concurrently.
FORBIDDEN_STDLIB = frozenset(
    {
        "asyncio",
        "socket",
        "threading",
        "time",
        "_thread",
        "selectors",
        "subprocess",
        "multiprocessing",
        "concurrent",
        "ssl",
        "socketserver",
    }
)
# Other toolbus layers the domain must not know about.
FORBIDDEN_TOOLBUS = ("toolbus.application", "toolbus.memory", "toolbus.cli")
# orjson computes only: the wire uses it to escape long strings faster.
ALLOWED_THIRD_PARTY = frozenset({"pydantic", "pydantic_core", "orjson"})


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def is_allowed(module: str) -> bool:
    """Whether the domain may import ``module`` (a dotted name)."""
    top = module.split(".")[0]
    if top == "toolbus":
        if any(_within(module, layer) for layer in FORBIDDEN_TOOLBUS):
            return False
        return _within(module, "toolbus.domain")
    if top in FORBIDDEN_STDLIB or top == "anyio" or top.startswith("toolbus_"):
        return False
    return top in sys.stdlib_module_names or top in ALLOWED_THIRD_PARTY


def _imported(
    tree: ast.AST, module: str, is_package: bool
) -> Iterator[tuple[int, str, tuple[str, ...]]]:
    """(line, what the source says, the dotted names it may mean) for every import."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, f"import {alias.name}", (alias.name,)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                source = base + (f".{node.module}" if node.module else "")
            else:
                source = node.module or ""
            dots = "." * node.level
            for alias in node.names:
                said = f"from {dots}{node.module or ''} import {alias.name}"
                # "from toolbus import domain" imports toolbus.domain; "from os import
                # path" imports from os. Either reading being allowed is enough.
                yield node.lineno, said, (source, f"{source}.{alias.name}")


def forbidden_imports(source: str, module: str, *, is_package: bool = False) -> list[str]:
    """Every import in ``source`` (module ``module``) the domain may not make, as text."""
    tree = ast.parse(source)
    found = []
    for line, said, candidates in _imported(tree, module, is_package):
        if not any(is_allowed(c) for c in candidates):
            found.append(f"{module}:{line}: {said}")
    return found


def domain_modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(DOMAIN.rglob("*.py")):
        relative = path.relative_to(SRC).with_suffix("")
        parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
        yield ".".join(parts), path


def test_the_domain_imports_only_what_it_may() -> None:
    modules = list(domain_modules())
    assert len(modules) > 5, "the domain package was not found"

    found = [
        problem
        for module, path in modules
        for problem in forbidden_imports(
            path.read_text(encoding="utf-8"), module, is_package=path.name == "__init__.py"
        )
    ]

    assert found == []


@pytest.mark.parametrize(
    "line",
    [
        "import asyncio",
        "import anyio",
        "import socket",
        "import threading",
        "import time",
        "from time import monotonic",
        "import concurrent.futures",
        "from toolbus.application.calls import client",
        "import toolbus.application.calls.client",
        "from toolbus import cli",
        "from toolbus.memory.bus import MemoryBus",
        "from .. import cli",
        "from ..application.calls.client import ToolServiceClient",
        "import toolbus_nats",
        "from toolbus_kafka.adapter import KafkaBroker",
        "import requests",
        "import toolbus",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import anyio",
        "def f():\n    import asyncio",
    ],
)
def test_the_check_catches_a_planted_bad_import(line: str) -> None:
    assert forbidden_imports(line, "toolbus.domain.planted") != []


@pytest.mark.parametrize(
    "line",
    [
        "import json",
        "from collections.abc import Mapping",
        "import os.path",
        "from datetime import datetime",
        "import pydantic",
        "from pydantic import BaseModel",
        "from toolbus.domain.errors import ConfigError",
        "from toolbus.domain import naming",
        "from toolbus import domain",
        "from . import naming",
        "from .errors import ConfigError",
        "from __future__ import annotations",
    ],
)
def test_the_check_allows_what_the_domain_may_use(line: str) -> None:
    assert forbidden_imports(line, "toolbus.domain.planted") == []


def test_relative_imports_resolve_from_a_package_init() -> None:
    assert forbidden_imports("from . import naming", "toolbus.domain", is_package=True) == []
    assert forbidden_imports("from .. import cli", "toolbus.domain", is_package=True) != []


# -- the other arrows: domain <- ports <- application <- adapters / composition ---------

REPO = SRC.parent.parent
# Every first-party distribution's import package, found from the workspace layout.
ROOTS = {
    "toolbus": SRC / "toolbus",
    **{
        package.name: package
        for kind in ("adapters", "bridges", "plugins")
        for package in sorted(REPO.glob(f"{kind}/*/src/toolbus_*"))
        if package.is_dir()
    },
}
COMPOSITION = ("toolbus.plugins", "toolbus.runtime", "toolbus.cli", "toolbus.testing")
ADAPTERS = (
    "toolbus.memory",
    "toolbus_nats",
    "toolbus_pulsar",
    "toolbus_kafka",
    "toolbus_rabbitmq",
    "toolbus_redis",
    "toolbus_cedar",
)
LLM_ADAPTERS = ("toolbus.scripted", "toolbus_openai", "toolbus_anthropic")
# The LLM port lives in the application layer (with the loop that uses it); LLM
# adapters may import it, its URL helpers and what SDK adapters share, and nothing
# else of the application.
LLM_PORT = (
    "toolbus.application.agent.llm",
    "toolbus.application.agent.llm_sdk",
    "toolbus.application.agent.llm_urls",
)

# layer -> packages its modules must not import
LAYER_RULES: dict[str, tuple[str, ...]] = {
    "toolbus.ports": ("toolbus.application", *ADAPTERS, *COMPOSITION),
    # What adapters share sits beside the ports, and sees only the domain and the ports.
    "toolbus._internal": ("toolbus.application", *ADAPTERS, *COMPOSITION),
    "toolbus.application": (*ADAPTERS, *COMPOSITION),
    # Adapters implement ports; they register through toolbus.plugins but never
    # reach into the application or the command line.
    **{adapter: ("toolbus.application", "toolbus.cli", "toolbus.runtime") for adapter in ADAPTERS},
    **{adapter: ("toolbus.cli", "toolbus.runtime") for adapter in LLM_ADAPTERS},
}


def _application_beyond_the_llm_port() -> tuple[str, ...]:
    return tuple(
        module
        for module, _ in modules_of("toolbus.application")
        if module not in LLM_PORT
        and module not in ("toolbus.application", "toolbus.application.agent")
    )


def modules_of(package: str) -> Iterator[tuple[str, Path]]:
    top, _, rest = package.partition(".")
    root = ROOTS[top].joinpath(*rest.split(".")) if rest else ROOTS[top]
    paths = sorted(root.rglob("*.py")) if root.is_dir() else [root.with_suffix(".py")]
    for path in paths:
        relative = path.relative_to(ROOTS[top].parent).with_suffix("")
        parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
        yield ".".join(parts), path


def layer_violations(
    source: str, module: str, banned: tuple[str, ...], is_package: bool
) -> list[str]:
    found = []
    for line, said, candidates in _imported(ast.parse(source), module, is_package):
        if any(_within(c, b) for c in candidates[:1] for b in banned):
            found.append(f"{module}:{line}: {said}")
    return found


@pytest.mark.parametrize("layer", sorted(LAYER_RULES))
def test_each_layer_imports_only_inward(layer: str) -> None:
    found = [
        problem
        for module, path in modules_of(layer)
        for problem in layer_violations(
            path.read_text(encoding="utf-8"),
            module,
            LAYER_RULES[layer]
            + (_application_beyond_the_llm_port() if layer in LLM_ADAPTERS else ()),
            is_package=path.name == "__init__.py",
        )
    ]
    assert found == []


#: Bridges drive the core (and serve tools to it); the core never imports one.
BRIDGES = ("toolbus_mcp", "toolbus_a2a")


def test_the_core_never_imports_a_bridge() -> None:
    found = [
        problem
        for module, path in modules_of("toolbus")
        for problem in layer_violations(
            path.read_text(encoding="utf-8"), module, BRIDGES, is_package=path.name == "__init__.py"
        )
    ]
    assert found == []


def test_the_layer_check_catches_a_planted_bad_import() -> None:
    banned = LAYER_RULES["toolbus.application"]
    assert layer_violations(
        "from toolbus.memory import connect", "toolbus.application.x", banned, False
    )
    assert layer_violations("import toolbus_nats", "toolbus.application.x", banned, False)
    assert not layer_violations(
        "from toolbus.ports import Bus", "toolbus.application.x", banned, False
    )


# -- no import circles, and the arrows between concerns --------------------------------


def import_graph() -> dict[str, set[str]]:
    """Each module of the core and the adapters -> the modules it imports (type-only too)."""
    paths = {module: path for top in ROOTS for module, path in modules_of(top)}
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        graph[module] = set()
        for _, _, candidates in _imported(tree, module, path.name == "__init__.py"):
            # "from toolbus.domain.calls import wire" imports the module wire;
            # "from toolbus.domain.errors import Problem" imports errors.
            found = [c for c in reversed(candidates) if c in paths]
            if found:
                graph[module].add(found[0])
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph``: its strongly connected parts of two or more modules,
    and modules importing themselves (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                part = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    part.append(member)
                    if member == node:
                        break
                if len(part) > 1 or node in graph.get(node, ()):
                    found.append(sorted(part))
    return found


def test_no_module_imports_its_way_back_to_itself() -> None:
    assert circles(import_graph()) == []


def test_the_circle_check_catches_a_planted_circle() -> None:
    graph = import_graph()
    graph["toolbus.domain.errors"] = {"toolbus.domain.calls.wire"}  # wire imports errors

    pair = {"toolbus.domain.calls.wire", "toolbus.domain.errors"}
    assert any(pair <= set(circle) for circle in circles(graph))
    assert circles({"a": {"a"}}) == [["a"]]


# The concerns inside a layer, and which others each may import. Anything not
# listed is off limits, so a new arrow is a decision made here, in review.
CONCERN_ARROWS: dict[str, set[str]] = {
    # domain: errors <- calls <- config <- access <- live; hooks beside access; identity on errors
    "toolbus.domain.calls": {"toolbus.domain.errors"},
    "toolbus.domain.config": {"toolbus.domain.calls", "toolbus.domain.errors"},
    "toolbus.domain.access": {"toolbus.domain.config", "toolbus.domain.errors"},
    "toolbus.domain.hooks": {
        "toolbus.domain.calls",
        "toolbus.domain.config",
        "toolbus.domain.errors",
    },
    "toolbus.domain.identity": {"toolbus.domain.errors"},
    "toolbus.domain.tasks": {"toolbus.domain.errors"},
    # how much callers may do: limits, budgets, prices, read from toolbus.toml
    "toolbus.domain.limits": {"toolbus.domain.config", "toolbus.domain.errors"},
    "toolbus.domain.live": {
        "toolbus.domain.access",
        "toolbus.domain.calls",
        "toolbus.domain.config",
        "toolbus.domain.errors",
    },
    # the agent loop's turns, decisions and wire stand alone
    "toolbus.domain.agent": set(),
    # AsyncAPI documents describe what the configuration and the wire say
    "toolbus.domain.asyncapi": {
        "toolbus.domain.calls",
        "toolbus.domain.config",
        "toolbus.domain.errors",
        "toolbus.domain.identity",
    },
    # application (each may use the whole domain and the ports):
    # tracing, identity, sealing <- calls <- agent, live <- doors
    "toolbus.application.tracing": set(),
    "toolbus.application.identity": set(),
    # a tool service seals the state it hands a caller it asks for input
    "toolbus.application.calls": {
        "toolbus.application.tracing",
        "toolbus.application.identity",
        "toolbus.application.sealing",
    },
    "toolbus.application.agent": {
        "toolbus.application.calls",
        "toolbus.application.identity",
        "toolbus.application.tracing",
    },
    "toolbus.application.live": {"toolbus.application.calls"},
    # sealing what doors keep in a shared store, and tasks, stand alone
    "toolbus.application.sealing": set(),
    "toolbus.application.tasks": set(),
    # front doors compose a caller's session from all of the above
    "toolbus.application.doors": {
        "toolbus.application.agent",
        "toolbus.application.calls",
        "toolbus.application.identity",
        "toolbus.application.live",
        "toolbus.application.sealing",
        "toolbus.application.tasks",
    },
}


def concern_of(module: str) -> str | None:
    """The concern package holding ``module`` (``toolbus.domain.calls.wire`` -> ``...calls``)."""
    for concern in CONCERN_ARROWS:
        if _within(module, concern):
            return concern
    if _within(module, "toolbus.domain"):
        return ".".join(module.split(".")[:3])  # errors
    return None


def concern_violations(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for module, imported in sorted(graph.items()):
        source = concern_of(module)
        if source not in CONCERN_ARROWS:
            continue
        layer = source.rpartition(".")[0]
        for target in sorted(imported):
            destination = concern_of(target)
            if destination in (None, source):
                continue  # within the concern
            if not _within(destination, layer) and layer == "toolbus.application":
                continue  # the application may use the whole domain; layers are checked above
            if destination not in CONCERN_ARROWS[source]:
                found.append(f"{module} -> {target}")
    return found


def test_each_concern_imports_only_the_concerns_below_it() -> None:
    graph = import_graph()
    assert set(CONCERN_ARROWS) <= {concern_of(module) for module in graph}

    assert concern_violations(graph) == []


def test_the_concern_check_catches_a_planted_arrow() -> None:
    graph = import_graph()
    graph["toolbus.application.calls.host"].add("toolbus.application.agent.session")
    graph["toolbus.domain.config.registry"].add("toolbus.domain.live.items")

    assert concern_violations(graph) == [
        "toolbus.application.calls.host -> toolbus.application.agent.session",
        "toolbus.domain.config.registry -> toolbus.domain.live.items",
    ]


# -- the public/private line ------------------------------------------------------------
#
# A module whose dotted name has a part starting with "_" (not a dunder) is private to
# the package holding that part: only modules inside that package import it. The one
# shared exception is toolbus._internal, the plumbing toolbus's own distributions share.

SHARED_PRIVATE = "toolbus._internal"


def _private_home(module: str) -> str | None:
    """The package a private module belongs to, or None for a public module."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def private_import_violations(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for module, imported in sorted(graph.items()):
        for target in sorted(imported):
            home = _private_home(target)
            if home is None or _within(module, home):
                continue
            if _within(target, SHARED_PRIVATE) and module.split(".")[0] in ROOTS:
                continue
            found.append(f"{module} -> {target}")
    return found


def test_nothing_imports_another_packages_private_modules() -> None:
    assert private_import_violations(import_graph()) == []


def test_the_private_check_catches_a_planted_import() -> None:
    graph = import_graph()
    assert "toolbus_pulsar" in ROOTS and "toolbus_mcp" in ROOTS
    graph["toolbus.application.calls.host"] = {"toolbus_pulsar._hidden"}
    graph["toolbus_mcp.commands"] = {"toolbus._internal.event_loops", "toolbus.cli._private"}
    graph["toolbus.cli._private"] = {"toolbus.cli._other"}

    assert private_import_violations(graph) == [
        "toolbus.application.calls.host -> toolbus_pulsar._hidden",
        "toolbus_mcp.commands -> toolbus.cli._private",
    ]


_DOC_PAGES = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md")])


def test_the_docs_import_only_public_modules() -> None:
    """What the pages show a user to import is the public API; nothing private."""
    found = []
    for page in _DOC_PAGES:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            words = line.strip().split()
            imports = len(words) >= 2 and words[0] in ("import", "from")
            if imports and "toolbus" in words[1] and _private_home(words[1]) is not None:
                found.append(f"{page.relative_to(REPO)}:{number}: {line.strip()}")
    assert found == []


# -- the public surface -----------------------------------------------------------------
#
# A first-party distribution's public API is its package (its __init__, and __all__) and
# the modules the user docs name; its other modules are its own business, imported from
# outside only by its entry points (named in pyproject.toml, not imported) and the tests.
# The parts the core distribution carries (the in-memory bus, the scripted model, the
# command line, the test kit) are held to the same line. The layered core (the domain
# and application concern packages and the top-level modules) is public package by
# package, as docs/architecture.md maps it: the map must show every one of them.

CORE_PARTS = ("toolbus.memory", "toolbus.scripted", "toolbus.cli", "toolbus.testing")
PARTS = (*CORE_PARTS, *(name for name in ROOTS if name != "toolbus"))
#: The pages a user reads for the API (the changelog lists old paths, gone).
_USER_DOCS = [page for page in _DOC_PAGES if page.name != "changelog.md"]
_DOTTED = re.compile(r"\btoolbus(?:_[a-z]+)?(?:\.\w+)*")


def documented_modules(modules: Collection[str]) -> set[str]:
    """The modules the user docs name: of each dotted name, the longest prefix that is one."""
    found: set[str] = set()
    for page in _USER_DOCS:
        for name in set(_DOTTED.findall(page.read_text(encoding="utf-8"))):
            parts = name.split(".")
            for end in range(len(parts), 0, -1):
                if ".".join(parts[:end]) in modules:
                    found.add(".".join(parts[:end]))
                    break
    return found


def _part_of(module: str) -> str | None:
    return next((part for part in PARTS if _within(module, part)), None)


def inner_module_violations(graph: dict[str, set[str]], public: Collection[str]) -> list[str]:
    """Imports of a part's inner module from outside the part, unless the docs name it."""
    found = []
    for module, imported in sorted(graph.items()):
        for target in sorted(imported):
            part = _part_of(target)
            if part is None or target == part or _within(module, part) or target in public:
                continue
            found.append(f"{module} -> {target}")
    return found


def test_nothing_outside_a_part_imports_its_inner_modules() -> None:
    graph = import_graph()
    assert inner_module_violations(graph, documented_modules(graph)) == []


def test_the_inner_module_check_catches_a_planted_import() -> None:
    graph = import_graph()
    public = documented_modules(graph)
    assert "toolbus.cli.plugin_api" in public and "toolbus_kafka.subscription" not in public
    graph["toolbus_gateway.commands"] = {"toolbus.cli.plugin_api", "toolbus.cli.serve"}
    graph["toolbus.runtime"] = {"toolbus_kafka", "toolbus_kafka.subscription"}
    graph["toolbus_kafka.bus"] = {"toolbus_kafka.subscription"}

    assert inner_module_violations(graph, public) == [
        "toolbus.runtime -> toolbus_kafka.subscription",
        "toolbus_gateway.commands -> toolbus.cli.serve",
    ]


_IMPORT_LINE = re.compile(r"^\s*(?:from\s+(\S+)\s+import|import\s+(\S+))", re.M)


def test_what_the_docs_import_exists() -> None:
    """An import a page shows names a first-party module that is there."""
    modules = {module for top in ROOTS for module, _ in modules_of(top)}
    missing = [
        f"{page.relative_to(REPO)}: {name}"
        for page in _USER_DOCS
        for match in _IMPORT_LINE.finditer(page.read_text(encoding="utf-8"))
        for name in [match[1] or match[2]]
        if name.split(".")[0] in ROOTS and name not in modules
    ]
    assert missing == []


# docs/architecture.md's map of core/src/toolbus/: one entry a line, indented two spaces
# a level, a package written "name/" and a module "name.py", then what it holds.
_MAP_ENTRY = re.compile(r"^(?P<indent> *)(?P<name>\w+/|\w+\.py)(?:\s{2,}.*)?$")


def architecture_map() -> set[str]:
    """The paths (``domain/calls/``, ``ports.py``) docs/architecture.md maps under toolbus/."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = text.split("core/src/toolbus/\n", 1)[1].split("```", 1)[0]
    mapped: set[str] = set()
    stack: list[str] = []
    for line in block.splitlines():
        entry = _MAP_ENTRY.match(line)
        if entry is None or line.startswith(("adapters/", "bridges/", "plugins/")):
            continue  # a description carried onto the next line, or another distribution
        depth = len(entry["indent"]) // 2 - 1
        del stack[depth:]
        mapped.add("".join(stack) + entry["name"])
        if entry["name"].endswith("/"):
            stack.append(entry["name"])
    return mapped


def test_the_architecture_page_maps_every_package_of_the_core() -> None:
    """Every top-level module and package of toolbus, and every concern package of the
    domain and the application, is on the map; and everything on the map is there."""
    core = ROOTS["toolbus"]
    expected = {
        f"{path.name}/" if path.is_dir() else path.name
        for path in core.iterdir()
        if (path.is_dir() and (path / "__init__.py").exists())
        or (path.suffix == ".py" and path.name != "__main__.py")
    }
    for layer in ("domain", "application"):
        expected |= {
            f"{layer}/{path.name}/"
            for path in (core / layer).iterdir()
            if (path / "__init__.py").exists()
        }
    mapped = architecture_map()

    assert sorted(expected - mapped) == [], "missing from the map in docs/architecture.md"
    assert sorted(p for p in mapped if not (core / p).exists()) == [], "on the map, not in the tree"


# -- modules with one job, one class per public name -------------------------------------
#
# A module holds one job; when a job outgrows a module it becomes a package of the
# same name. The yardstick: a module of more than MAX_MODULE_LINES lines starts with a
# comment saying why it is still one job ("# One job: ..."), for a reviewer to weigh.

MAX_MODULE_LINES = 500
ONE_JOB = re.compile(r"#\s*One job:\s*\S", re.IGNORECASE)


def oversized_without_reason(sources: Collection[tuple[str, str]]) -> list[str]:
    """The modules (name, source) over the size whose first lines do not say why."""
    found = []
    for module, source in sources:
        lines = source.splitlines()
        if len(lines) <= MAX_MODULE_LINES:
            continue
        top = [line for line in lines[:5] if line.startswith("#")]
        if not any(ONE_JOB.match(line) for line in top):
            found.append(f"{module}: {len(lines)} lines, no '# One job: ...' at its top")
    return found


def _sources() -> list[tuple[str, str]]:
    return [
        (module, path.read_text(encoding="utf-8"))
        for top in ROOTS
        for module, path in modules_of(top)
    ]


def test_a_module_over_the_size_says_at_its_top_why_it_is_one_job() -> None:
    assert oversized_without_reason(_sources()) == []


def test_the_size_check_catches_a_planted_module() -> None:
    long = "\n".join(f"x{n} = {n}" for n in range(MAX_MODULE_LINES + 1))
    explained = "# One job: a table of numbers, read as one.\n" + long

    assert oversized_without_reason([("planted", long)]) != []
    assert oversized_without_reason([("planted", explained)]) == []
    assert oversized_without_reason([("planted", "# one job:\n" + long)]) != []  # says nothing


def _exported(tree: ast.Module) -> set[str]:
    for node in tree.body:
        names = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(name, ast.Name) and name.id == "__all__" for name in names):
            assert isinstance(node, ast.Assign)
            if isinstance(node.value, ast.List | ast.Tuple):
                return {e.value for e in node.value.elts if isinstance(e, ast.Constant)}
    return set()


def public_classes(
    trees: dict[str, ast.Module], documented: Collection[str]
) -> dict[str, set[str]]:
    """Each public class name -> the modules defining a class of that name.

    Public, as the rest of this file draws the line: every class of a public module
    of the layered core; of a part (an adapter, a bridge, the test kit ...), the
    classes of the modules the docs name and those its package or such a module
    exports (``__all__``).
    """
    found: dict[str, set[str]] = {}
    for module, tree in trees.items():
        if _private_home(module) is not None:
            continue
        defined = {
            node.name
            for node in tree.body
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_")
        }
        part = _part_of(module)
        if part is not None and module not in documented:
            shown: set[str] = set()
            for other in (part, *documented):
                if _within(other, part) and other in trees:
                    shown |= _exported(trees[other])
            defined &= shown
        for name in defined:
            found.setdefault(name, set()).add(module)
    return found


def _trees() -> dict[str, ast.Module]:
    return {
        module: ast.parse(path.read_text(encoding="utf-8"))
        for top in ROOTS
        for module, path in modules_of(top)
    }


def test_each_public_class_name_names_one_class() -> None:
    """One name for one thing: two public classes never share a name (a user importing
    one would have to know which package's it is, and readers mix them up)."""
    classes = public_classes(_trees(), documented_modules(import_graph()))

    assert {name: sorted(where) for name, where in classes.items() if len(where) > 1} == {}


def test_the_name_check_catches_a_planted_class() -> None:
    trees = _trees()
    documented = documented_modules(import_graph())
    trees["toolbus.application.calls.planted"] = ast.parse("class Registry:\n    pass\n")
    trees["toolbus_kafka.planted"] = ast.parse("class Registry:\n    pass\n")  # inner, unexported

    classes = public_classes(trees, documented)

    assert classes["Registry"] == {
        "toolbus.application.calls.planted",
        "toolbus.domain.config.registry",
    }
