"""The MCP server: gormes operations as Model Context Protocol tools.

A thin adapter over the operation registry and the audited executor. The tools
are exactly the prompt-visible operations the configured trust class (default
`gateway`) may call, listed under their wire names (`job.submit` -> `job__submit`,
since many clients allow only [A-Za-z0-9_-] in tool names), and, for the
`operator` class only (`OPERATOR_MCP`), the operations marked `operator_mcp`:
the approval and budget operations an operator's own client may use (list,
approve, deny; show, list, raise), which no model's tool list ever holds
(decision 0037). The executor behind the server knows only the operations it
serves, so what is not listed cannot be called: any other operator-only
operation (`shell.run`) is refused whatever the trust class, and `approval.approve`
is refused to a gateway or child-agent server just the same; each refusal is
audited (`outcome: denied`) like every call.

A call of an operation that needs a person's approval (its spec's
`requires_approval`, GORMES_REQUIRE_APPROVAL) passes the same gate as a run's
call (decision 0033, docs/control.md): the request is recorded and the call waits
for `gormes approve|deny` or the timeout; a refusal is an error result
(`ApprovalDenied`), audited as denied. An MCP client is a program, so this holds
whatever the server's trust class.

A gateway's calls, every gateway's in every process on the store together, fit
the class's call rate (`GORMES_GATEWAY_RATE`, 600 a minute by default;
gormes/control/call_rate.py, decision 0072): past it a call is an error result
(`CallRateLimited`, saying when to retry), audited as denied, and its operation
never runs. Each client (by the name it gives) may take only its share of that
rate (`GORMES_GATEWAY_CLIENT_RATE`, a quarter by default; decision 0082), so one
greedy client leaves the others room. A client that keeps calling while refused has its connection ended,
and while that is within the window and the window is full, a new connection is
refused at its first call and ended too (`ClientFlooded`, decisions 0072 and
0081). The operator's, the system's and a child agent's calls are not limited.

Each call runs as `Caller(trust=<class>, id="mcp:<client name>")`. Its output is
the operation's JSON (text content, and the same value as structured content);
any error of the call (denied, invalid input, not found, timeout...) is a tool
result with `isError: true` and one line naming the error.

    async with SQLiteEventStore.open(db) as store:
        await serve_stdio(store, trust="gateway", workspace=None)
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import mcp_types as types
import msgspec
import trio
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from gormes.actors.jobs.queue import JobQueue
from gormes.actors.jobs.session import new_id
from gormes.actors.runs.approvals import ApprovalGate, ApprovalPolicy
from gormes.control.call_rate import (
    GATEWAY_RATE_ENV, GatewayCallRate, call_rate_from_env, client_share_from_env, written,
)
from gormes.control.call_shares import CLIENT_RATE_ENV
from gormes.control.rate_rules import RateRule
from gormes.errors import GormesError
from gormes.mcp_frames import AnsweringBadFrames, claimed_stdin
from gormes.ops.executor import Executor
from gormes.ops.registry import Registry, wire_name
from gormes.ops.spec import TRUST_CLASSES, Caller, OperationSpec

if TYPE_CHECKING:
    from gormes.events.store import EventStore

SERVER_NAME = "gormes"
DEFAULT_TRUST = "gateway"
UNNAMED_CLIENT = "unnamed"
# A client's self-declared name is cut to this many characters (see `client_name`).
MAX_CLIENT_NAME = 200
# The one trust class whose MCP callers are also served the `operator_mcp` operations.
OPERATOR_MCP = "operator"


def served_registry(registry: Registry, trust: str) -> Registry:
    """The operations a `trust` caller is served: prompt-visible and allowed; for
    an `OPERATOR_MCP` caller also those marked `operator_mcp`."""
    if trust not in TRUST_CLASSES:
        raise ValueError(f"unknown trust class {trust!r} (known: {', '.join(TRUST_CLASSES)})")
    served = registry.list(trust=trust, prompt_visible=True)
    if trust == OPERATOR_MCP:
        served += [spec for spec in registry.list(trust=trust, prompt_visible=False) if spec.operator_mcp]
    return Registry(served)


def tool_for(spec: OperationSpec, schema: dict[str, Any]) -> types.Tool:
    return types.Tool(
        name=wire_name(spec.name),
        title=spec.name,
        description=spec.description,
        input_schema=schema,
        annotations=types.ToolAnnotations(
            read_only_hint=not spec.mutating,
            idempotent_hint=spec.idempotent,
            destructive_hint=spec.mutating,
            open_world_hint=False,
        ),
    )


def client_name(ctx: Any) -> str:
    """The name the client gave in its handshake (clientInfo.name), if any, cut to
    `MAX_CLIENT_NAME` characters: it is the caller id every call records (in its
    audit record, a job's submitter, a fact's origin), and a client sends it once.
    A U+0000 in it reads as U+FFFD: the name is a memory scope's, a text column of
    memory's tables, which PostgreSQL cannot hold it in (decision 0074)."""
    params = getattr(ctx.session, "client_params", None)
    info = getattr(params, "client_info", None)
    name = getattr(info, "name", None) or UNNAMED_CLIENT
    return name[:MAX_CLIENT_NAME].replace("\x00", "\ufffd") if isinstance(name, str) else UNNAMED_CLIENT


def ok_result(output: bytes) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=output.decode())],
        structured_content=msgspec.json.decode(output),
    )


def error_result(exc: Exception) -> types.CallToolResult:
    text = str(exc).strip().splitlines()
    line = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    return types.CallToolResult(content=[types.TextContent(text=line)], is_error=True)


def build_server(executor: Executor, trust: str) -> Server[Any]:
    """An MCP server whose tools are `executor.registry`'s operations, each call
    made through `executor` as a `trust` caller."""
    registry = executor.registry
    tools = [tool_for(spec, registry.input_schema(spec.name)) for spec in registry.list()]

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        caller = Caller(trust=trust, id=f"mcp:{client_name(ctx)}")
        try:
            output = await executor.call_json(params.name, params.arguments or {}, caller)
        except Exception as exc:  # noqa: BLE001 - audited by the executor; the client sees it
            return error_result(exc)
        return ok_result(output)

    return Server(SERVER_NAME, version=_version(), on_list_tools=list_tools, on_call_tool=call_tool)


class ClientFlooded(GormesError):
    """A gateway connection ended because its client did not wait for its retry, or
    at its first call because one that did not was ended (decision 0081)."""

    exit_code = 1


def warn_stderr(line: str) -> None:
    print(f"gormes: warning: {line}", file=sys.stderr, flush=True)


async def serve_stdio(
    store: EventStore, *, registry: Registry, trust: str = DEFAULT_TRUST, workspace: Path | None = None,
    warn: Callable[[str], None] = warn_stderr, call_rate: RateRule | None | Literal["env"] = "env",
    client_rate: RateRule | None | Literal["env"] = "env",
) -> None:
    """Serve over stdin/stdout until the client closes the connection. A frame the
    SDK cannot read, or reads as a notification though it has an id, gets a
    JSON-RPC error and a `warn` line (`AnsweringBadFrames`, over `claimed_stdin`).
    `call_rate`: the gateways' call rate (None: off; "env": `GORMES_GATEWAY_RATE`,
    read here); `client_rate`: each client's share of it (None: none; "env":
    `GORMES_GATEWAY_CLIENT_RATE`, read here, of `call_rate`)."""
    served = served_registry(registry, trust)
    rule = call_rate_from_env(os.environ) if call_rate == "env" else call_rate
    share = client_share_from_env(os.environ, rule) if client_rate == "env" else client_rate
    gate = ApprovalGate(store, ApprovalPolicy.from_env(os.environ), clock=time.time, ids=new_id)
    limit = None if rule is None else GatewayCallRate(store, rule, share=share)
    executor = Executor(served, store, workspace=workspace, jobs=await JobQueue.open(store), approvals=gate.gate_call,
                        call_limit=limit)
    server = build_server(executor, trust)
    flooded = (lambda: False) if limit is None else (lambda: limit.ended)
    with trio.CancelScope() as transport:
        with claimed_stdin() as lines:
            async with stdio_server(stdin=lines) as (read_stream, write_stream):  # type: ignore[arg-type]
                frames = AnsweringBadFrames(read_stream, write_stream, warn, ended=flooded, lines=lines)
                await server.run(frames, write_stream, server.create_initialization_options())
                # A flooding client's session was ended by its server, not by the client
                # closing stdin: the transport's reader and writer are stopped here (a
                # reader in the middle of a line stops once the line is read).
                if flooded():
                    transport.cancel()
    if limit is not None and limit.turned_away is not None:
        full = (f"this client's share is still used ({CLIENT_RATE_ENV}={written(limit.share)})"
                if limit.turned_by_share and limit.share is not None else
                f"the gateways' window is still full ({GATEWAY_RATE_ENV}={written(limit.rule)})")
        raise ClientFlooded(
            f"a gateway connection was ended for flooding {max(0, time.time() - limit.turned_away):.0f}s ago and"
            f" {full}: this connection is"
            f" closed at its first call; come back in {max(1, math.ceil(limit.come_back_at - time.time()))}s;"
            " the refusal is audited"
        )
    if flooded():
        assert limit is not None
        past = GATEWAY_RATE_ENV if limit.share is None else f"{CLIENT_RATE_ENV}={written(limit.share)}"
        raise ClientFlooded(
            f"the client kept calling while refused ({len(limit.refusals)} refusals within"
            f" {limit.flood_rule.window_s:g}s, past {past}): connection closed; each refusal is audited"
        )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gormes")
    except PackageNotFoundError:
        return "0"
