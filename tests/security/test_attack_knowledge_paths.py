"""What a gateway's `knowledge.search` told it about the operator's host (decision 0074).

Every answer named the knowledge root by its absolute path (`root`: where the
operator's project lives), and GBrain's health as the operator's doctor reads it
(`brain.detail` and `fallback_reason`: the gbrain executable's path, or the last
line `gbrain doctor` printed when it failed); a root that could not be read was
named by its absolute path in the error. A gateway (or a child agent) is now shown
the hits, relative to the root as they were, and none of that; the operator sees
the answer whole, and the audit records the call as before.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run_gormes
from mcp_helpers import audit_events, call_ok, call_refused, gormes_mcp

from gormes.events.sqlite import SQLiteEventStore
from gormes.knowledge import KnowledgeRootUnreadable
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller
from gormes.tools.builtin import default_registry
from gormes.tools.knowledge_shown import ROOT_SHOWN

pytestmark = pytest.mark.usefixtures("isolated_knowledge")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The operator's workspace, whose path is the secret, with one decision in it."""
    workspace = tmp_path / "acme-secret-project"
    (workspace / ".writ").mkdir(parents=True)
    (workspace / ".writ" / "db.md").write_text("# Database\n\nWe chose sqlite for the database.\n")
    return workspace


async def test_a_gateways_search_names_no_host_path(db_path: Path, project: Path, tmp_path: Path):
    async with gormes_mcp(db_path, "--workspace", str(project)) as client:
        answer = await call_ok(client, "knowledge__search", query="database")
    assert [hit["path"] for hit in answer["hits"]] == ["db.md"], "the hits stay as they were"
    assert answer["root"] == ROOT_SHOWN
    assert answer["brain"] == {"present": False, "status": "missing", "detail": ""}
    assert answer["fallback_reason"] == "no healthy gbrain: missing"
    assert str(tmp_path) not in json.dumps(answer), "no path of the host in what the gateway reads"
    operator = run_gormes(db_path, "ops", "call", "--workspace", str(project), "knowledge.search",
                          '{"query": "database"}')
    assert operator.returncode == 0, operator.stderr
    shown = json.loads(operator.stdout)
    assert shown["root"] == str(project / ".writ") and str(tmp_path) in shown["brain"]["detail"]


async def test_a_gateway_is_not_told_where_an_unreadable_root_is(db_path: Path, tmp_path: Path):
    empty = tmp_path / "acme-secret-project"
    empty.mkdir()
    async with gormes_mcp(db_path, "--workspace", str(empty)) as client:
        refused = await call_refused(client, "knowledge__search", query="database")
    assert refused == f"KnowledgeRootUnreadable: {ROOT_SHOWN}: knowledge root not found"
    async with SQLiteEventStore.open(db_path) as store:
        [audited] = await audit_events(store)
    assert (audited.operation, audited.trust, audited.outcome) == ("knowledge.search", "gateway", "invalid")


async def test_a_child_agent_is_not_told_where_a_root_it_cannot_write_is(store, project: Path):
    """`knowledge.write` (a child agent's, not a gateway's) named the root by its
    absolute path when it could not be written; the operator still sees it."""
    (project / ".writ" / "db.md").unlink()
    (project / ".writ").rmdir()
    (project / ".writ").write_text("a file where the root should be\n")
    executor = Executor(default_registry(), store, workspace=project)
    child = Caller(trust="child-agent", id="run-1", run_id="run-1")
    arguments = '{"path": "decisions/db.md", "text": "We chose sqlite."}'
    with pytest.raises(KnowledgeRootUnreadable) as refused:
        await executor.call("knowledge.write", arguments, child)
    assert str(refused.value) == f"{ROOT_SHOWN}: knowledge root is not a directory"
    with pytest.raises(KnowledgeRootUnreadable) as told:
        await executor.call("knowledge.write", arguments, Caller(trust="operator", id="cli"))
    assert str(told.value) == f"{project / '.writ'}: knowledge root is not a directory"
    audited = await audit_events(store)  # a write-ahead call: started, then its outcome
    assert [(a.trust, a.outcome) for a in audited] == [
        ("child-agent", "started"), ("child-agent", "invalid"), ("operator", "started"), ("operator", "invalid")]
    assert audited[1].error == f"KnowledgeRootUnreadable: {ROOT_SHOWN}: knowledge root is not a directory"
