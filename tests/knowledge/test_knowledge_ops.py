"""knowledge.search and knowledge.write through the executor: trust, input, audit."""

from __future__ import annotations

import pytest
from knowledge_fakes import install

from gormes.events.audit import OperationAudited
from gormes.knowledge import EmptyQuery
from gormes.tools.builtin import default_registry
from gormes.ops.executor import Executor
from gormes.tools.knowledge import knowledge_operations
from gormes.ops.registry import Registry
from gormes.ops.spec import Caller, InvalidOperationInput, OperationDenied

OPERATOR = Caller(trust="operator", id="cli")
GATEWAY = Caller(trust="gateway", id="gw-1")
CHILD = Caller(trust="child-agent", id="run-1", run_id="1")


@pytest.fixture
def executor(store, root):
    return Executor(Registry(knowledge_operations(root=root)), store)


async def audits(store) -> list[OperationAudited]:
    return [r.event for r in await store.read_all() if isinstance(r.event, OperationAudited)]


def test_both_operations_are_registered_by_default():
    registry = default_registry()
    search, write = registry.get("knowledge.search"), registry.get("knowledge.write")
    assert search.prompt_visible and search.allows("gateway") and not search.mutating
    assert write.mutating and not write.allows("gateway") and write.allows("child-agent")


async def test_any_caller_may_search_and_each_call_is_audited(tmp_path, monkeypatch, store, executor):
    install(tmp_path, monkeypatch, "missing")
    answer = await executor.call("knowledge.search", '{"query": "cronsim", "limit": 2}', GATEWAY)
    assert answer.hits[0].path == "decisions/scheduler.md" and answer.routed_to == "fallback"
    (audit,) = await audits(store)
    assert (audit.operation, audit.outcome, audit.trust) == ("knowledge.search", "ok", "gateway")


async def test_a_gateway_may_not_write_and_nothing_is_written(tmp_path, monkeypatch, store, executor, root):
    install(tmp_path, monkeypatch, "missing")
    with pytest.raises(OperationDenied):
        await executor.call("knowledge.write", {"path": "x.md", "text": "# x"}, GATEWAY)
    assert not (root / "x.md").exists()
    out = await executor.call("knowledge.write", {"path": "x.md", "text": "# x"}, CHILD)
    assert out.path == "x.md" and (root / "x.md").read_text() == "# x\n"


async def test_empty_queries_are_refused_before_or_by_the_handler(tmp_path, monkeypatch, store, executor):
    install(tmp_path, monkeypatch, "missing")
    with pytest.raises(InvalidOperationInput):
        await executor.call("knowledge.search", {"query": ""}, OPERATOR)
    with pytest.raises(EmptyQuery):
        await executor.call("knowledge.search", {"query": "  "}, OPERATOR)
    # Bad input is audited `invalid` whether msgspec or the handler refuses it (issue 14, hole 15).
    assert [a.outcome for a in await audits(store)] == ["invalid", "invalid"]


async def test_the_root_follows_the_environment(tmp_path, monkeypatch, store, root):
    install(tmp_path, monkeypatch, "missing")
    monkeypatch.setenv("GORMES_KNOWLEDGE_ROOT", str(root))
    executor = Executor(Registry(knowledge_operations()), store, workspace=tmp_path / "elsewhere")
    answer = await executor.call("knowledge.search", {"query": "postgres"}, OPERATOR)
    assert answer.root == str(root) and answer.hits[0].path == "decisions/database.md"
