"""A schema's LISTEN/NOTIFY channel fits PostgreSQL's 63-byte identifier limit
whatever its letters (an attacker's finding: a schema of non-ASCII letters, its
channel cut at 63 characters, made pg_notify refuse every write), and a follower
still hears the writes there."""

from __future__ import annotations

import trio
from pg_helpers import PG_URL, admin, require_postgres

from gormes.events.notes import NoteAdded
from gormes.events.postgres import PostgresEventStore
from gormes.events.postgres_schema import channel_name

LONG = "atk_" + "é" * 29  # 62 bytes: a schema PostgreSQL takes


def test_the_channel_is_cut_at_63_bytes_on_a_whole_character():
    channel = channel_name(LONG)
    assert len(channel.encode()) <= 63 and channel.startswith("gormes_atk_é")
    assert channel_name("jobs") == "gormes_jobs"  # an ASCII name as before
    assert channel_name("x" * 80) == ("gormes_" + "x" * 80)[:63]


async def test_a_schema_of_non_ascii_letters_takes_writes_and_wakes_followers():
    require_postgres()
    admin(f'CREATE SCHEMA "{LONG}"')
    try:
        async with PostgresEventStore.open(PG_URL, schema=LONG, poll_interval=30.0) as follower, \
                PostgresEventStore.open(PG_URL, schema=LONG, poll_interval=30.0) as writer:
            await trio.sleep(0.5)  # the follower's LISTEN is up (its start wakes it once)
            generation = follower.generation
            woke = trio.Event()

            async def follow() -> None:
                await follower.wait_for_change(generation)
                woke.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(follow)
                await writer.append("notes-1", [NoteAdded(text="a")])
                with trio.fail_after(20):  # a hang guard: NOTIFY wakes it well before the 30 s poll
                    await woke.wait()
            assert [r.event.text for r in await follower.read_stream("notes-1")] == ["a"]
    finally:
        admin(f'DROP SCHEMA IF EXISTS "{LONG}" CASCADE')
