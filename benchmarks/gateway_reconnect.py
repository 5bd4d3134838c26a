"""What a gateway that reconnects after its flood was ended leaves in the log (decision 0081).

A client floods one `gormes mcp` connection (FLOODERS calls of `time.now` in flight,
the mcp SDK client) until the server ends it (decision 0072's addendum), then starts
`gormes mcp` again RECONNECTIONS times in a loop, under a new name each time, each
connection with `--width` calls in flight until the server ends it or it has
called for `--seconds`. Reported: the audit records the first flood left, then the
records each reconnection left (the median and the range), the seconds each took,
and how each ended, and `ratio`: the median reconnection's records over what one
connection of the first flood left (the comparator: a connection before any was
marked, which is what every reconnection left before the change). All at `GORMES_GATEWAY_RATE` (`--rate`, the default `600rpm`),
on SQLite (a scratch file, its default durability) and on PostgreSQL (`--postgres
URL`, a fresh schema dropped after).

`--at-once K`: the first flood is K connections opened at once (before any of
them is ended, so before the store holds a mark). `--code DIR`: the gormes the
`gormes mcp` processes run (its working tree: the processes import `gormes` from
it), so the same loop measures a tree before a change. Prints one JSON line per
backend.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import secrets
import sqlite3
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import trio

FLOODERS = 32
RECONNECTIONS = 10


def count_records(db: str) -> int:
    sql = "SELECT count(*) FROM events WHERE type = 'audit.operation'"
    if db.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(db) as conn:
            return int(conn.execute(sql).fetchone()[0])
    with sqlite3.connect(db) as conn:
        return int(conn.execute(sql).fetchone()[0])


@contextlib.contextmanager
def database(backend: str, scratch: Path, pg_url: str) -> Iterator[str]:
    if backend == "sqlite":
        yield str(scratch / f"reconnect-{secrets.token_hex(4)}.db")
        return
    import psycopg

    schema = f"gormes_bench_{secrets.token_hex(5)}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        sep = "&" if "?" in pg_url else "?"
        yield f"{pg_url}{sep}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def connection(db: str, code: str, rate: str, name: str, width: int, seconds: float) -> str:
    """One `gormes mcp` connection, `width` calls in flight: how it ended."""
    import mcp_types as types
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    # The class's limit alone, as before decision 0082 (each client's share off): what 0081 measured.
    env = {"GORMES_GATEWAY_RATE": rate, "GORMES_GATEWAY_CLIENT_RATE": "off", "PYTHONPATH": code}
    server = StdioServerParameters(command=sys.executable, args=["-m", "gormes", "--db", db, "mcp"],
                                   cwd=code, env=env)
    ended = "lasted"
    with contextlib.suppress(Exception):  # the client's own close after the server ended it
        async with Client(server, client_info=types.Implementation(name=name, version="1"),
                          read_timeout_seconds=60) as client:
            async def caller() -> None:
                nonlocal ended
                while True:
                    try:
                        await client.call_tool("time__now", {})
                    except Exception:  # noqa: BLE001 - the server ended the connection
                        ended = "ended by the server"
                        nursery.cancel_scope.cancel()
                        return

            with trio.move_on_after(seconds):
                async with trio.open_nursery() as nursery:
                    for _ in range(width):
                        nursery.start_soon(caller)
    return ended


async def measure(backend: str, db: str, args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    first_ends: list[str] = []

    async def first_flood(n: int) -> None:
        first_ends.append(await connection(db, args.code, args.rate, f"flood-at-once-{n}", FLOODERS, args.seconds))

    async with trio.open_nursery() as nursery:
        for n in range(args.at_once):
            nursery.start_soon(first_flood, n)
    first_end = ", ".join(sorted(set(first_ends)))
    first = count_records(db)
    first_s = time.perf_counter() - started
    each, took, ends = [], [], []
    for n in range(args.reconnections):
        before, t0 = count_records(db), time.perf_counter()
        ends.append(await connection(db, args.code, args.rate, f"flood-{n}", args.width, args.seconds))
        took.append(time.perf_counter() - t0)
        each.append(count_records(db) - before)
    per_connection = first / args.at_once  # what a connection left before any was marked: the comparator
    return {"benchmark": "gateway_reconnect", "backend": backend, "rate": args.rate, "width": args.width,
            "at_once": args.at_once, "total_records": count_records(db),
            "total_s": round(time.perf_counter() - started, 1),
            "code": args.code, "first_flood_records": first, "first_flood_s": round(first_s, 2),
            "first_flood": first_end, "records_per_reconnection_median": statistics.median(each),
            "records_per_reconnection_range": [min(each), max(each)], "records_per_reconnection": each,
            "seconds_per_reconnection_median": round(statistics.median(took), 2), "ends": sorted(set(ends)),
            "ratio": round(statistics.median(each) / per_connection, 4) if per_connection else None}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", default="600rpm")
    parser.add_argument("--width", type=int, default=8, help="calls in flight per reconnection")
    parser.add_argument("--reconnections", type=int, default=RECONNECTIONS)
    parser.add_argument("--seconds", type=float, default=30.0, help="the longest a connection is kept")
    parser.add_argument("--at-once", type=int, default=1, help="connections the first flood opens at once")
    parser.add_argument("--code", default=str(Path(__file__).resolve().parents[1]))
    parser.add_argument("--postgres", metavar="URL")
    parser.add_argument("--scratch", default="/tmp")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke test: 2 reconnections at 20req/60s, 2 calls in flight each")
    args = parser.parse_args()
    if args.quick:
        args.reconnections, args.rate, args.width = 2, "20req/60s", 2
    backends = ["sqlite"] + (["postgres"] if args.postgres else [])
    for backend in backends:
        with database(backend, Path(args.scratch), args.postgres or "") as db:
            print(json.dumps(await measure(backend, db, args)), flush=True)
            if backend == "sqlite":
                for suffix in ("", "-wal", "-shm"):
                    Path(db + suffix).unlink(missing_ok=True)


if __name__ == "__main__":
    trio.run(main)
