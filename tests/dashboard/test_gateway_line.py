"""`gormes top`'s gateway line (decision 0075): read from the real call rate's
leases and refusals on both backends, and drawn: what is known is shown, what is
not (the limit, before a refusal states it; the refusals, with no index of them)
is said to be unknown, never guessed."""

from __future__ import annotations

import os
import time

import msgspec
from fixtures import fixed_snapshot
from rich.console import Console

from gormes.control import call_refusals
from gormes.control.call_rate import GatewayCallRate, parse_call_rate
from gormes.dashboard.gateway import GatewayCalls, gateway_line
from gormes.dashboard.read import read_snapshot
from gormes.dashboard.render import render_dashboard
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller, CallRateLimited
from gormes.providers.pricing import load_table
from gormes.tools.builtin import default_registry

GATEWAY = Caller(trust="gateway", id="mcp:\x1b[31mred")  # a client names itself: shown inert


def text_of(renderable, width: int = 200) -> str:
    with open(os.devnull, "w") as sink:
        console = Console(record=True, width=width, color_system=None, file=sink)
        console.print(renderable)
        return console.export_text()


async def test_top_reads_the_calls_counted_the_refusals_and_the_limit_they_state(store):
    assert (await read_snapshot(store, pricing=load_table())).gateway is None  # never limited here
    rule = parse_call_rate("3req/30s")
    assert rule is not None
    executor = Executor(default_registry(), store, call_limit=GatewayCallRate(store, rule))
    for n in range(5):
        try:
            await executor.call("time.now", {}, GATEWAY)
        except CallRateLimited:
            assert n >= 3
    snapshot = await read_snapshot(store, pricing=load_table())
    row = snapshot.gateway
    assert row is not None
    assert (row.refused, row.refused_more, row.last_refused_caller) == (2, False, GATEWAY.id)
    assert (row.limit, row.limit_calls, row.limit_window_s, row.counted) == ("3req/30s", 3, 30.0, 3)
    # its process deletes the leases past 30s: the last minute's calls are not known
    assert row.calls_last_minute is None
    assert 0 <= row.last_refused_s_ago <= row.first_refused_s_ago < 30
    text = text_of(render_dashboard(snapshot))
    assert "gateway calls: last minute: not known (its window keeps no older lease) (the latest " in text
    assert "limit 3req/30s, as the latest refusal stated it: 3 of 3 counted in its window" in text
    assert "refused in the last hour: 2 (since " in text and "\x1b" not in text

    # an hour on (no call since): the leases are past every window, the refusals past top's
    later = await read_snapshot(store, pricing=load_table(), now=time.time() + 3601)
    assert later.gateway is not None
    assert (later.gateway.calls_last_minute, later.gateway.refused, later.gateway.limit) == (0, 0, None)
    assert later.gateway.last_call_s_ago is not None and later.gateway.last_call_s_ago > 3600


async def test_with_no_index_of_the_refusals_top_says_they_are_not_counted(store):
    rule = parse_call_rate("1req/60s")
    assert rule is not None
    executor = Executor(default_registry(), store, call_limit=GatewayCallRate(store, rule))
    await executor.call("time.now", {}, GATEWAY)
    await store.transact(lambda tx: tx.execute(f"DROP INDEX {call_refusals.INDEX}"))
    row = (await read_snapshot(store, pricing=load_table())).gateway
    assert row is not None and (row.calls_last_minute, row.refused, row.limit) == (1, None, None)
    assert "refused: not counted (no index of them yet" in text_of(gateway_line(row))


ROW = GatewayCalls(calls_last_minute=37, last_call_s_ago=2.0, refused=120, first_refused_s_ago=840.0,
                   last_refused_s_ago=3.0, last_refused_caller="mcp:bot", limit="600rpm", limit_calls=600,
                   limit_window_s=60.0, counted=37)


def test_the_line_says_what_is_known_and_that_the_rest_is_not():
    assert text_of(gateway_line(ROW)).splitlines() == [
        "gateway calls: 37 in the last minute (the latest 2s ago)  limit 600rpm, as the latest refusal stated it:"
        " 37 of 600 counted in its window",
        "  refused in the last hour: 120 (since 14 min ago; the latest 3s ago, to \"mcp:bot\")",
    ]
    quiet = GatewayCalls(calls_last_minute=4, last_call_s_ago=1.0, refused=0)
    assert text_of(gateway_line(quiet)).splitlines() == [
        "gateway calls: 4 in the last minute (the latest 1s ago)  limit: each gormes mcp's GORMES_GATEWAY_RATE,"
        " not recorded (a refusal states it)",
        "  none refused in the last hour",
    ]
    flood = msgspec.structs.replace(ROW, refused=10_000, refused_more=True)
    assert "refused in the last hour: more than 10,000 (since" in text_of(gateway_line(flood))
    assert gateway_line(None) is None


def test_the_line_takes_its_two_lines_from_the_job_rows():
    """The live view fits the terminal: with the line, two job rows fewer."""
    base = fixed_snapshot()
    many = tuple(msgspec.structs.replace(base.jobs[1], id=f"01JOB{i:021d}") for i in range(60))
    without = msgspec.structs.replace(base, jobs=many, selected=many[0].id)
    with_line = msgspec.structs.replace(without, gateway=ROW)
    lines = [text_of(render_dashboard(s, height=50)).splitlines() for s in (without, with_line)]
    assert len(lines[1]) == len(lines[0])
    assert sum("01JOB" in line for line in lines[1]) == sum("01JOB" in line for line in lines[0]) - 2
    narrow = text_of(render_dashboard(with_line, height=50), width=80).splitlines()
    assert len(narrow) == len(text_of(render_dashboard(without, height=50), width=80).splitlines())


async def test_top_says_when_a_clients_share_refused_the_latest(store):
    """A client past its share (decision 0082) while the class has room: top's line
    gives the class's limit, as before, and that a client's share refused it."""
    rule, share = parse_call_rate("30req/30s"), parse_call_rate("2req/30s")
    assert rule is not None and share is not None
    executor = Executor(default_registry(), store, call_limit=GatewayCallRate(store, rule, share=share))
    for n in range(3):
        try:
            await executor.call("time.now", {}, GATEWAY)
        except CallRateLimited:
            assert n == 2
    snapshot = await read_snapshot(store, pricing=load_table())
    row = snapshot.gateway
    assert row is not None and (row.limit, row.share, row.refused) == ("30req/30s", "2req/30s", 1)
    text = text_of(render_dashboard(snapshot), width=300)
    assert "limit 30req/30s, as the latest refusal stated it: 2 of 30 counted in its window;" \
           " it was a client's share that refused it (2req/30s each)" in text
