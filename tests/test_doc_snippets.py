"""Every python block in docs/ runs, unless it is a fragment of a larger example.

Examples marked ``<!-- file: NAME -->`` run with their printed output checked
(tests/test_doc_examples.py and the adapters' doc tests). The other blocks run
here as they are, each in a fresh namespace from the repository root; the ones
that only make sense inside a program (an ``await`` on its own, a name the
surrounding text defines) are listed as fragments, by the words they start with.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs"
BLOCK = re.compile(r"(<!-- file: \S+ -->\n)?```python\n(.*?)```", re.S)

#: (page, the block's first line): pieces of an example, not programs.
FRAGMENTS = {
    ("access-control.md", "from toolbus.application.agent.session import AgentSession"),
    ("adapters/kafka.md", "from toolbus_kafka import connect"),
    ("adapters/nats.md", "from toolbus_nats import connect"),
    ("adapters/pulsar.md", "from toolbus_pulsar import connect"),
    ("adapters/rabbitmq.md", "from toolbus_rabbitmq import connect"),
    ("agent-sessions.md", "from toolbus.application.agent.session import AgentSession"),
    ("agent-sessions.md", "AgentSession("),
    ("agent-sessions.md", "outcome = await session.call(name, arguments, tool_call_id=None)"),
    ("agent.md", "AgentLoop("),
    ("agent.md", "from toolbus import AgentClient, AgentRequest"),
    ("audit-and-metrics.md", "  import logging"),
    ("hooks.md", "from toolbus.hooks import parse_hooks"),
    ("hooks.md", "from toolbus.hooks import ttl_is_fresh, parse_ttl_expiry"),
    ("hooks.md", "from toolbus.hooks import inject, parse_hooks, ttl_is_fresh"),
    ("hooks.md", 'async with AgentSession(tools, user="alice", groups=["default"]) as session:'),
    ("hooks.md", "from toolbus.hooks import load_hooks"),
    ("hooks.md", "from toolbus.hooks import CodeHooks"),
    ("gateway.md", "from toolbus.application.identity.bearer import Authenticator"),
}


def blocks() -> list[tuple[str, int, str]]:
    found = []
    for page in sorted(DOCS.rglob("*.md")):
        name = page.relative_to(DOCS).as_posix()
        for index, match in enumerate(BLOCK.finditer(page.read_text(encoding="utf-8"))):
            code = match.group(2)
            if match.group(1) or (name, code.splitlines()[0]) in FRAGMENTS:
                continue
            found.append((name, index, code))
    return found


def test_every_fragment_listed_is_still_in_the_docs() -> None:
    present = {
        (page.relative_to(DOCS).as_posix(), m.group(2).splitlines()[0])
        for page in DOCS.rglob("*.md")
        for m in BLOCK.finditer(page.read_text(encoding="utf-8"))
    }
    assert FRAGMENTS - present == set()


@pytest.mark.parametrize(("page", "index", "code"), blocks(), ids=lambda v: str(v)[:40])
def test_the_block_runs(
    page: str, index: int, code: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(ROOT)  # examples use paths relative to the repository root
    exec(compile(code, f"docs/{page}#{index}", "exec"), {"__name__": f"doc_{index}"})
