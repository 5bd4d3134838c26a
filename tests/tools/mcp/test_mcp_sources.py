"""open_mcp_sources against the real reference servers over stdio: their tools
registered as operations with the servers' own schemas, the catalog recorded,
calls through the executor, and the failures: a server that is not there, one
that exits mid-session, a tool's own error. Nothing here may hang: every start and
call is under a timeout."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import mcp_types
import pytest
from mcp_source_helpers import GIT_SERVER, TIME_SERVER
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from gormes.events.audit import OperationAudited
from gormes.events.mcp import McpCatalogListed, mcp_stream
from gormes.ops.executor import Executor
from gormes.ops.registry import Registry
from gormes.ops.spec import Caller, InvalidOperationInput, OperationDenied
from gormes.tools.mcp import McpCallError, McpStartError, McpToolResult, open_mcp_sources

OPERATOR = Caller(trust="operator", id="cli")


async def listed_directly(command: str) -> dict[str, mcp_types.Tool]:
    """What the server lists, asked with the SDK alone (no gormes)."""
    with open(os.devnull, "w") as errlog:
        async with stdio_client(StdioServerParameters(command=command), errlog=errlog) as (r, w):
            async with ClientSession(r, w) as session:
                await session.initialize()
                return {t.name: t for t in (await session.list_tools()).tools}


async def audits(store) -> list[OperationAudited]:
    return [r.event for r in await store.read_all() if isinstance(r.event, OperationAudited)]


async def test_tools_are_registered_with_the_servers_schemas_and_hints(store, mcp_config) -> None:
    config = mcp_config(time={"command": TIME_SERVER}, git={"command": GIT_SERVER, "trust": ["operator", "system"]})
    registry = Registry()
    async with open_mcp_sources(config, registry, store=store) as sources:
        assert sources.warnings == []
        assert [s.state for s in sources.statuses.values()] == ["ready", "ready"]
    time_tools = await listed_directly(TIME_SERVER)
    git_tools = await listed_directly(GIT_SERVER)
    names = [s.name for s in registry.list()]
    assert {f"mcp.time.{t}" for t in time_tools} | {f"mcp.git.{t}" for t in git_tools} == set(names)
    for tool in (time_tools["get_current_time"], git_tools["git_status"], git_tools["git_commit"]):
        server = "time" if tool.name in time_tools else "git"
        spec = registry.get(f"mcp.{server}.{tool.name}")
        assert registry.input_schema(spec.name) == tool.input_schema
        assert spec.description == tool.description and spec.source == f"mcp:{server}"
        assert spec.audit_kind == "mcp"
    current = registry.get("mcp.time.get_current_time")
    assert current.trust == {"operator"} and not current.prompt_visible  # operator-only: never offered
    assert (current.mutating, current.idempotent, current.timeout) == (False, True, 30.0)
    commit = registry.get("mcp.git.git_commit")  # readOnlyHint false, idempotentHint false
    assert (commit.mutating, commit.idempotent, commit.prompt_visible) == (True, False, True)
    assert registry.get("mcp.git.git_add").idempotent  # idempotentHint true
    # one catalog per server, recorded once: opening again with the same tools appends nothing
    head = await store.head()
    async with open_mcp_sources(config, Registry(), store=store):
        pass
    assert await store.head() == head
    catalog = (await store.read_stream(mcp_stream("time")))[-1].event
    assert isinstance(catalog, McpCatalogListed)
    assert {t.name: t.input_schema for t in catalog.tools} == {n: t.input_schema for n, t in time_tools.items()}


async def test_calls_go_through_the_executor_and_a_tools_error_is_an_error(store, mcp_config, git_repo) -> None:
    config = mcp_config(
        time={"command": TIME_SERVER, "tools": ["get_current_time"]},
        git={"command": GIT_SERVER, "tools": ["git_status"]},
    )
    registry = Registry()
    async with open_mcp_sources(config, registry, store=store):
        assert [s.name for s in registry.list()] == ["mcp.git.git_status", "mcp.time.get_current_time"]
        executor = Executor(registry, store)
        out = await executor.call("mcp.time.get_current_time", '{"timezone": "Etc/UTC"}', OPERATOR)
        assert isinstance(out, McpToolResult) and out.structured["timezone"] == "Etc/UTC"
        status = await executor.call("mcp.git.git_status", {"repo_path": str(git_repo)}, OPERATOR)
        assert "untracked.txt" in status.content[0]["text"]
        with pytest.raises(McpCallError, match=r"^mcp server 'time': get_current_time returned an error: .*Nowhere/Else"):
            await executor.call("mcp.time.get_current_time", {"timezone": "Nowhere/Else"}, OPERATOR)
        with pytest.raises(InvalidOperationInput, match="expected a JSON object|Expected `object`"):
            await executor.call("mcp.time.get_current_time", "[1, 2]", OPERATOR)
        with pytest.raises(OperationDenied, match="may not be run by a 'gateway' caller"):
            await executor.call("mcp.time.get_current_time", {"timezone": "UTC"}, Caller(trust="gateway", id="gw"))
    outcomes = [(a.operation, a.outcome, a.audit_kind) for a in await audits(store)]
    assert outcomes == [
        ("mcp.time.get_current_time", "ok", "mcp"), ("mcp.git.git_status", "ok", "mcp"),
        ("mcp.time.get_current_time", "error", "mcp"), ("mcp.time.get_current_time", "invalid", "mcp"),
        ("mcp.time.get_current_time", "denied", "mcp"),
    ]


async def test_a_server_that_is_not_there_is_a_warning_and_the_others_work(store, mcp_config) -> None:
    config = mcp_config(gone={"command": "/nonexistent/mcp-server-gone"}, time={"command": TIME_SERVER})
    registry = Registry()
    async with open_mcp_sources(config, registry, store=store) as sources:
        gone = sources.statuses["gone"]
        assert gone.state == "failed" and gone.operations == [] and not gone.from_catalog
        assert "mcp server 'gone' failed to start (command '/nonexistent/mcp-server-gone')" in gone.error
        assert "No such file" in gone.error
        assert sources.warnings == [gone.error + "; it has no tools"]
        assert sources.statuses["time"].state == "ready"


async def test_a_failed_server_offers_its_last_catalog_whose_tools_fail_with_the_start_error(
    store, mcp_config, tmp_path: Path,
) -> None:
    async with open_mcp_sources(mcp_config(time={"command": TIME_SERVER}), Registry(), store=store):
        pass  # records the catalog
    broken = tmp_path / "broken-server"
    broken.write_text("#!/bin/sh\necho 'cannot open the timezone database' >&2\nexit 3\n")
    broken.chmod(0o755)
    registry = Registry()
    async with open_mcp_sources(mcp_config(time={"command": str(broken)}), registry, store=store) as sources:
        status = sources.statuses["time"]
        assert status.state == "failed" and status.from_catalog
        assert status.operations == ["mcp.time.get_current_time", "mcp.time.convert_time"]
        assert "its stderr: cannot open the timezone database" in status.error
        assert sources.warnings == [f"{status.error}; its 2 tools from the last recorded catalog fail with that error"]
        with pytest.raises(McpStartError, match="mcp server 'time' failed to start"):
            await Executor(registry, store).call("mcp.time.get_current_time", {"timezone": "UTC"}, OPERATOR)


async def test_a_server_that_never_answers_times_out_at_start(store, mcp_config, tmp_path: Path) -> None:
    silent = tmp_path / "silent-server"
    silent.write_text("#!/bin/sh\nexec sleep 600\n")
    silent.chmod(0o755)
    registry = Registry()
    async with open_mcp_sources(
        mcp_config(silent={"command": str(silent), "startup_timeout": 0.5}), registry, store=store,
    ) as sources:
        assert sources.statuses["silent"].error == (
            f"mcp server 'silent' did not start within 0.5s (command {str(silent)!r})"
        )


async def test_a_server_that_exits_mid_session_fails_one_call_then_is_started_again(
    store, mcp_config, tmp_path: Path,
) -> None:
    pid_file = tmp_path / "pid"
    wrapper = tmp_path / "time-server"
    wrapper.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec {TIME_SERVER}\n")
    wrapper.chmod(0o755)
    registry = Registry()
    async with open_mcp_sources(mcp_config(time={"command": str(wrapper)}), registry, store=store) as sources:
        executor = Executor(registry, store)
        await executor.call("mcp.time.get_current_time", {"timezone": "UTC"}, OPERATOR)
        first = int(pid_file.read_text())
        os.kill(first, signal.SIGKILL)
        with pytest.raises(McpCallError, match=r"^mcp server 'time' dropped .* during get_current_time; it is started again"):
            await executor.call("mcp.time.get_current_time", {"timezone": "UTC"}, OPERATOR)
        again = await executor.call("mcp.time.get_current_time", {"timezone": "UTC"}, OPERATOR)
        assert again.structured["timezone"] == "UTC"
        assert int(pid_file.read_text()) != first
        assert sources.connections["time"].starts == 2


async def test_a_tool_name_taken_in_the_registry_is_skipped_with_a_warning(store, mcp_config) -> None:
    registry = Registry()
    async with open_mcp_sources(mcp_config(time={"command": TIME_SERVER}), registry, store=store):
        async with open_mcp_sources(mcp_config(time={"command": TIME_SERVER}), registry, store=store) as again:
            assert again.statuses["time"].operations == []
            assert again.warnings == [  # in the server's listing order
                "mcp server 'time': tool 'get_current_time' skipped: its operation name mcp.time.get_current_time is taken",
                "mcp server 'time': tool 'convert_time' skipped: its operation name mcp.time.convert_time is taken",
            ]
