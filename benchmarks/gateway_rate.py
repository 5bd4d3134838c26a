"""What the gateways' call rate (`GORMES_GATEWAY_RATE`, decision 0072) costs a call.

Two executors on one store, the same registry: `limited` has the call limit (the
default, 600 calls a minute), `unlimited` has none, as every executor had before.
The samples alternate between them, each first in half the pairs, so both see the
same log and the same machine.

- gateway: a gateway's `time.now` (the cheapest call: the limit's share is the
  largest) and `memory.recall` (a read with work in it: 200 facts in its scope),
  limited against unlimited. The limited gateway calls as fast as the limit lets
  a gateway call for ever: a clock of the benchmark's own moves a tenth of a
  second and a little more at each limited call, so the window always holds 599
  leases and each call deletes one and takes one (the most the look ever reads
  at the default). Its calls are all served.
- operator: an operator's `time.now` through the executor that has the limit,
  against the one that has none: the operator pays only the test of its class.
- refused: a gateway's `time.now` past the limit (the window full): the cost of
  a refusal, the limit's look and its audit record.
- flood: FLOODERS tasks refused through the executor as fast as one process can
  for FLOOD_S seconds: refusals a second, and the bytes each refusal's audit
  record adds to the log (its row's data), so what refusals can write in an hour
  at most (no gateway calls the executor directly).
- flood_mcp (SQLite): what a gateway can do, through a `gormes mcp` process and
  the `mcp` SDK client, FLOODERS calls of `time.now` in flight for FLOOD_S
  seconds: with the limit off (every call served, as before the limit) and at the
  default (past it, refused, until the server ends the connection: 600 refusals
  within the minute): the calls, the audit records they left, when the server
  ended the connection, and the megabytes an hour the records grew by while it
  lasted. Those two with each client's share off (as decision 0072 measured), and
  a third, `600rpm+share`, at the default share (150 a minute, decision 0082: the
  connection is ended after 150 refusals).
- share (decision 0082): what each client's share costs a call. Two stores (two
  databases: the two limits would otherwise count each other's leases), one
  executor each: `class_only` has the class's limit alone (as before 0082),
  `with_share` the class's and the default share. Both are called as fast as they
  allow for ever, by four clients in turn (a stepping clock again): the class's
  window holds 596 leases and each client's 149, so each call deletes and takes one
  of each, and `with_share` also reads its client's key and deletes the twins.
  Pairs alternate as above; `ratio` is with_share over class_only.

Durability `normal` on SQLite by default (the work, not the disk; `--durability
full` measures gormes's default, an fsync a commit, which the limit's lease pays
too). With `--postgres URL`, the same on a fresh schema there (dropped afterwards).
`--quick`: a smoke test (20 pairs, floods of half a second). Prints one JSON
line: medians in ms, and each `ratio`, limited over unlimited.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sqlite3
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).parent))
from _common import median, progress, report, scratch_dir  # noqa: E402

from gormes.control.call_rate import DEFAULT_GATEWAY_RATE, GatewayCallRate, parse_call_rate  # noqa: E402
from gormes.control.call_shares import default_share  # noqa: E402
from gormes.events.scratch_store import scratch_store  # noqa: E402
from gormes.events.sqlite import SQLiteEventStore  # noqa: E402
from gormes.ops.executor import Executor  # noqa: E402
from gormes.ops.spec import Caller, CallRateLimited  # noqa: E402
from gormes.tools.builtin import default_registry  # noqa: E402

SAMPLES = 300
FACTS = 200
FLOODERS = 32
FLOOD_S = 3.0
QUICK_SAMPLES, QUICK_FLOOD_S = 20, 0.5  # --quick
GATEWAY = Caller(trust="gateway", id="mcp:bench")
OPERATOR = Caller(trust="operator", id="cli")


class Stepping:
    """A wall clock that moves `step` seconds at each read by the limit (one a call)."""

    def __init__(self, step: float) -> None:
        self.step = step
        self.now = time.time()

    def __call__(self) -> float:
        self.now += self.step
        return self.now


async def pairs(limited: Executor, unlimited: Executor, name: str, value: dict[str, Any],
                caller: Caller, samples: int) -> dict[str, float]:
    times: dict[str, list[float]] = {"limited": [], "unlimited": []}
    order = [("limited", limited), ("unlimited", unlimited)]
    for n in range(samples):
        for which, executor in order if n % 2 else order[::-1]:  # each goes first in half the pairs
            start = time.perf_counter()
            await executor.call(name, value, caller)
            times[which].append(time.perf_counter() - start)
    ms = {which: median(values) * 1000 for which, values in times.items()}
    return {"limited_ms": round(ms["limited"], 3), "unlimited_ms": round(ms["unlimited"], 3),
            "ratio": round(ms["limited"] / ms["unlimited"], 3)}


async def refused(executor: Executor, samples: int) -> float:
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        try:
            await executor.call("time.now", {}, GATEWAY)
        except CallRateLimited:
            times.append(time.perf_counter() - start)
        else:
            raise AssertionError("a call past the limit was served")
    return round(median(times) * 1000, 3)


async def flood(store: Any, executor: Executor, seconds: float) -> dict[str, float]:
    head = await store.head()
    count = 0

    async def flooder() -> None:
        nonlocal count
        while True:
            try:
                await executor.call("time.now", {}, GATEWAY)
            except CallRateLimited:
                count += 1

    with trio.move_on_after(seconds):
        async with trio.open_nursery() as nursery:
            for _ in range(FLOODERS):
                nursery.start_soon(flooder)
    rows = await store.read_sql(lambda conn: conn.execute(
        "SELECT count(*), sum(length(data)) FROM events WHERE position > ?", (head,)).fetchone())
    per_s = count / seconds
    each = rows[1] / rows[0]
    return {"refusals_per_s": round(per_s), "bytes_per_record": round(each),
            "mb_per_hour": round(per_s * each * 3600 / 1e6)}


async def flood_mcp(path: Path, rate: str, seconds: float, share: str = "off") -> dict[str, float]:
    """FLOODERS calls in flight through one `gormes mcp` process for `seconds` (`share`:
    GORMES_GATEWAY_CLIENT_RATE, "" its default)."""
    # Lazy: the SDK's client is only this part's.
    import mcp_types as types
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    repo = str(Path(__file__).resolve().parents[1])
    env = {"GORMES_GATEWAY_RATE": rate, "GORMES_GATEWAY_CLIENT_RATE": share, "PYTHONPATH": repo,
           "PATH": os.environ.get("PATH", "")}
    server = StdioServerParameters(command=sys.executable, args=["-m", "gormes", "--db", str(path), "mcp"],
                                   cwd=repo, env=env)
    counts = {"served": 0, "refused": 0}
    ended_at: list[float] = []  # when the server ended the connection (decision 0072's addendum)
    start = trio.current_time()

    async def flooder(client: Any, nursery: trio.Nursery) -> None:
        while True:
            try:
                result = await client.call_tool("time__now", {})
            except Exception:  # noqa: BLE001 - the server ended the connection: the flood is over
                ended_at.append(trio.current_time() - start)
                nursery.cancel_scope.cancel()
                return
            counts["refused" if result.is_error else "served"] += 1

    with contextlib.suppress(Exception):  # the client's own close, after the server ended it
        async with AsyncExitStack() as stack:
            client = await stack.enter_async_context(
                Client(server, client_info=types.Implementation(name="bench", version="1"), read_timeout_seconds=60))
            with trio.move_on_after(seconds):
                async with trio.open_nursery() as nursery:
                    for _ in range(FLOODERS):
                        nursery.start_soon(flooder, client, nursery)
    with sqlite3.connect(path) as conn:
        records, size = conn.execute(
            "SELECT count(*), sum(length(data)) FROM events WHERE type = 'audit.operation'").fetchone()
    path.unlink()
    lasted = min(ended_at, default=seconds)
    return {"served": counts["served"], "refused": counts["refused"], "records": records,
            "bytes_per_record": round(size / records), "ended_by_server_after_s": min(ended_at, default=None),
            "mb_per_hour_while_it_lasted": round(size / lasted * 3600 / 1e6)}


async def measure(backend: str, where: Any, durability: str, samples: int, seconds: float) -> dict[str, Any]:
    rule = parse_call_rate(DEFAULT_GATEWAY_RATE)
    assert rule is not None and rule.requests is not None
    step = rule.window_s / (rule.requests - 1) + 1e-6  # 599 leases stay in the window
    result: dict[str, Any] = {}
    opened = SQLiteEventStore.open(where, durability=durability) if backend == "sqlite" else scratch_store(
        where, "gormes_bench")
    async with opened as store:
        registry = default_registry()
        limited = Executor(registry, store, call_limit=GatewayCallRate(store, rule, clock=Stepping(step)))
        unlimited = Executor(registry, store)
        for n in range(FACTS):
            await unlimited.call("memory.remember", {"fact": f"service alpha{n % 37} deploys to host beta{n % 11}"},
                                 GATEWAY)
        progress(f"gateway_rate ({backend}): filling the window ...")
        for _ in range(rule.requests - 1):
            await limited.call("time.now", {}, GATEWAY)
        progress(f"gateway_rate ({backend}): {samples} pairs each ...")
        result["gateway_time_now"] = await pairs(limited, unlimited, "time.now", {}, GATEWAY, samples)
        result["gateway_memory_recall"] = await pairs(
            limited, unlimited, "memory.recall", {"query": "which host does alpha3 deploy to"}, GATEWAY, samples)
        result["operator_time_now"] = await pairs(limited, unlimited, "time.now", {}, OPERATOR, samples)
        full = Executor(registry, store, call_limit=GatewayCallRate(store, rule, clock=lambda: time.time() + 3600))
        for _ in range(rule.requests):
            await full.call("time.now", {}, GATEWAY)
        result["refused_ms"] = await refused(full, samples)
        progress(f"gateway_rate ({backend}): a flood of refusals for {seconds:g}s ...")
        result["flood"] = await flood(store, full, seconds)
    return result


CLIENTS = 4  # the share's benchmark calls as four clients in turn


async def measure_share(backend: str, where: tuple[Any, Any], durability: str, samples: int) -> dict[str, Any]:
    """Each client's share against the class's limit alone, two stores (see the module doc)."""
    rule = parse_call_rate(DEFAULT_GATEWAY_RATE)
    assert rule is not None and rule.requests is not None
    share = default_share(rule)
    assert share.requests is not None and share.requests * CLIENTS <= rule.requests
    step = rule.window_s / (CLIENTS * (share.requests - 1)) + 1e-6  # 149 a client, 596 in all, stay
    callers = [Caller(trust="gateway", id=f"mcp:bench-{n}") for n in range(CLIENTS)]

    def opened(at: Any) -> Any:
        return SQLiteEventStore.open(at, durability=durability) if backend == "sqlite" else scratch_store(
            at, "gormes_bench")

    async with opened(where[0]) as one, opened(where[1]) as two:
        executors = {"class_only": Executor(default_registry(), one,
                                            call_limit=GatewayCallRate(one, rule, clock=Stepping(step))),
                     "with_share": Executor(default_registry(), two,
                                            call_limit=GatewayCallRate(two, rule, share=share, clock=Stepping(step)))}
        for store in (one, two):  # the facts, remembered past the limits (they take no lease)
            for n in range(FACTS):
                await Executor(default_registry(), store).call(
                    "memory.remember", {"fact": f"service alpha{n % 37} deploys to host beta{n % 11}"},
                    callers[n % CLIENTS])
        progress(f"gateway_rate ({backend}): the shares: filling the windows ...")
        calls = 0
        for _ in range(CLIENTS * (share.requests - 1)):
            for executor in executors.values():
                await executor.call("time.now", {}, callers[calls % CLIENTS])
            calls += 1
        result: dict[str, Any] = {}
        progress(f"gateway_rate ({backend}): the shares: {samples} pairs each ...")
        for case, name, value in (("time_now", "time.now", {}),
                                  ("memory_recall", "memory.recall", {"query": "which host does alpha3 deploy to"})):
            times: dict[str, list[float]] = {"class_only": [], "with_share": []}
            order = list(executors.items())
            for n in range(samples):
                for which, executor in order if n % 2 else order[::-1]:
                    start = time.perf_counter()
                    await executor.call(name, value, callers[calls % CLIENTS])
                    times[which].append(time.perf_counter() - start)
                calls += 1
            ms = {which: median(values) * 1000 for which, values in times.items()}
            result[case] = {"class_only_ms": round(ms["class_only"], 3), "with_share_ms": round(ms["with_share"], 3),
                            "ratio": round(ms["with_share"] / ms["class_only"], 3)}
    return result


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--postgres", metavar="URL", help="also measure on this PostgreSQL database")
    parser.add_argument("--durability", choices=["normal", "full"], default="normal",
                        help="SQLite's synchronous setting (full: gormes's default)")
    parser.add_argument("--quick", action="store_true", help="a smoke test: few samples, short floods")
    args = parser.parse_args()
    samples, seconds = (QUICK_SAMPLES, QUICK_FLOOD_S) if args.quick else (SAMPLES, FLOOD_S)
    os.environ.pop("GORMES_GATEWAY_MAX_FACTS", None)
    result: dict[str, Any] = {"benchmark": "gateway_rate", "rate": DEFAULT_GATEWAY_RATE, "samples": samples,
                              "durability": args.durability}
    with scratch_dir() as d:
        backends: list[tuple[str, Any]] = [("sqlite", d / "rate.db")]
        if args.postgres:
            backends.append(("postgres", args.postgres))
        for backend, where in backends:
            result[backend] = await measure(backend, where, args.durability, samples, seconds)
            pair = (d / "class.db", d / "share.db") if backend == "sqlite" else (where, where)
            result[backend]["share"] = await measure_share(backend, pair, args.durability, samples)
        progress(f"gateway_rate: floods through gormes mcp, {seconds:g}s each ...")
        result["flood_mcp"] = {"off": await flood_mcp(d / "off.db", "off", seconds),
                               DEFAULT_GATEWAY_RATE: await flood_mcp(d / "limited.db", DEFAULT_GATEWAY_RATE, seconds),
                               f"{DEFAULT_GATEWAY_RATE}+share": await flood_mcp(d / "shared.db", DEFAULT_GATEWAY_RATE,
                                                                                 seconds, share="")}
    report(result)


if __name__ == "__main__":
    trio.run(main)
