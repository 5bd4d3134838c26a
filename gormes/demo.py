"""The demo `make demo` runs: several actors append, a follower tails, projections print.

1. Three agent actors (a coordinator and two researchers it waits for) record
   notes concurrently; each command goes through the actor runtime as the job
   and cron actors' do: the actor's stream is folded, the pure `decide` makes
   the events, and they are appended at the version read, in one transaction.
   The coordinator records each researcher's end.
2. A follower subscribed to the log prints every event as it commits, the way
   `gormes tail --follow` does.
3. The `streams` projection is caught up and printed.
4. A few durable jobs are submitted and drained by an in-process worker; the
   job ledger is printed.
5. A coordinator agent (scripted model, real tools) spawns two subagents; an
   operator message steers one mid-run; the run tree prints with tokens.
6. A user's own code (examples/trip.py: an operation and a run handler, loaded
   as `--import` loads it) runs, with a tool of the reference MCP server
   `mcp-server-time` when it is installed (gormes/demo_tools.py).
7. Both runs are replayed from the log, children included: exact, and no MCP
   server is started.

Everything lands in the database given (the SQLite file `make demo` makes, or a
PostgreSQL URL), which must hold no events yet (one that does is refused in one
line, nothing written), to explore afterwards with
`gormes --db PATH events|tail|query|projections|jobs`.
"""

from __future__ import annotations

import random
import shlex
from collections.abc import Sequence
from pathlib import Path

import msgspec
import trio
from rich.console import Console
from rich.table import Table

from gormes.actors.actor import Behavior
from gormes.actors.runtime import ask
from gormes.demo_jobs import drain_demo_jobs
from gormes.demo_runs import replay_agent_demo, run_agent_demo
from gormes.demo_tools import replay_tools_demo, run_tools_demo
from gormes.errors import UserError
from gormes.events.base import Event, UnknownEvent
from gormes.events.catalog import load_all
from gormes.events.notes import NoteAdded
from gormes.events.open import is_postgres_url, open_store
from gormes.events.store import EventStore
from gormes.projections.runner import ProjectionRunner
from gormes.projections.streams import StreamsProjection

OBSERVATIONS = {
    "scout": ["queue depth is 3", "token budget 40% used", "found 2 candidate sources"],
    "analyst": ["source A contradicts B", "confidence 0.72", "draft answer ready"],
}


class Observe(msgspec.Struct, frozen=True):
    text: str


class Finished(msgspec.Struct, frozen=True):
    """One of the coordinator's researchers is done."""

    stream: str


def _count_notes(state: int, event: Event | UnknownEvent) -> int:
    return state + 1 if isinstance(event, NoteAdded) else state


def _note(state: int, command: Observe | Finished) -> Sequence[Event]:
    if isinstance(command, Finished):
        return [NoteAdded(text=f"child {command.stream} finished", author="supervisor")]
    return [NoteAdded(text=f"#{state + 1}: {command.text}", author="agent")]


# An agent that records what it observes; its state is how many notes it wrote.
AGENT: Behavior[int, Observe | Finished] = Behavior(
    kind="agent", initial=0, evolve=_count_notes, decide=_note,
)


async def run_agents(store: EventStore, console: Console) -> None:
    rng = random.Random(7)
    await ask(store, AGENT, "coordinator", Observe("plan: two researchers, one report"))

    async def research(name: str) -> None:
        for text in OBSERVATIONS[name]:
            await trio.sleep(rng.uniform(0.005, 0.03))
            await ask(store, AGENT, name, Observe(text))
        await ask(store, AGENT, "coordinator", Finished(AGENT.stream(name)))

    # One nursery for the researchers: if one fails, the other is cancelled and
    # the failure ends the demo.
    async with trio.open_nursery() as nursery:
        for name in OBSERVATIONS:
            nursery.start_soon(research, name)
    _, state = await ask(store, AGENT, "coordinator", Observe("report written"))
    console.print(f"[bold]coordinator[/] wrote {state.value} notes (stream version {state.version})")


async def follow(store: EventStore, console: Console, after: int, until: trio.Event) -> None:
    """Print each event as it commits, until `until` is set and the log is drained."""
    subscription = store.subscribe(after=after)
    while True:
        with trio.move_on_after(0.2) as scope:
            record = await subscription.__anext__()
        if scope.cancelled_caught:
            if until.is_set():
                return
            continue
        text = getattr(record.event, "text", "")
        console.print(
            f"  [dim]{record.position:>4}[/] {record.stream:<18} v{record.version:<2} "
            f"[cyan]{record.type}[/] {text}",
            soft_wrap=True,
        )


async def print_streams(store: EventStore, console: Console) -> None:
    runner = ProjectionRunner(store, StreamsProjection())
    position = await runner.catch_up()
    rows = await store.transact(
        lambda tx: tx.execute(
            "SELECT stream, first_type, version, first_position, last_position "
            "FROM streams ORDER BY first_position"
        ).fetchall()
    )
    table = Table(title=f"streams projection (at position {position})")
    for column in ("stream", "first type", "version", "first", "last"):
        table.add_column(column)
    for row in rows:
        table.add_row(*(str(v) for v in row))
    console.print(table)


class DemoNeedsFreshDatabase(UserError):
    """The demo's figures (positions, counts) are those of an empty log: it never
    mixes its events into a database that holds others."""


async def main(db: str | Path, console: Console | None = None) -> None:
    """`db`: an SQLite path or a PostgreSQL URL (an empty schema, or one gormes owns)."""
    load_all()
    console = console or Console()
    shown = str(db)
    if is_postgres_url(shown):  # psycopg is imported for a URL only
        from gormes.events.postgres_schema import redact

        shown = redact(shown)
    async with open_store(db) as store:
        start = await store.head()
        if start:
            raise DemoNeedsFreshDatabase(
                f"{shown} already holds {start} events; the demo writes into a fresh database only: "
                "give --db a new file (make demo uses .demo/gormes.db)"
            )
        console.print(f"[bold]gormes demo[/] writing to {shown}\n")
        agents_done = trio.Event()
        async with trio.open_nursery() as nursery:
            console.print("[bold]1-2.[/] actors append; a follower tails the log as they do:")
            nursery.start_soon(follow, store, console, start, agents_done)
            await run_agents(store, console)
            agents_done.set()
        console.print()
        console.print("[bold]3.[/] the streams projection, folded from the log:")
        await print_streams(store, console)
        console.print()
        console.print("[bold]4.[/] durable jobs, drained by a worker:")
        await drain_demo_jobs(store, console)
        console.print()
        console.print("[bold]5.[/] an agent run: a coordinator and two subagents using real tools:")
        run_id = await run_agent_demo(store, console)
        console.print()
        console.print("[bold]6.[/] your own code: a user's operation and run handler, and an MCP server's tool:")
        trip_id = await run_tools_demo(store, console)
        head = await store.head()
    console.print()
    console.print("[bold]7.[/] the runs replayed from the log, children included:")
    await replay_agent_demo(db, run_id, console)
    if trip_id is not None:
        await replay_tools_demo(db, trip_id, console)
    console.print(f"\n{head} events in {shown}. Look around:")
    commands = ["events --type 'job.*'", "jobs list", f"runs show {run_id} --tree", f"replay {run_id}"]
    if trip_id is not None:
        commands.append(f"replay {trip_id} --import examples/trip.py")
    commands.append("projections rebuild --check")
    for command in commands:
        console.print(f"  .venv/bin/gormes --db {shlex.quote(shown)} {command}", soft_wrap=True)
