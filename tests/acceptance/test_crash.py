"""SIGKILL a writer at random moments: every acknowledged event survives, no partial
transaction is ever visible, positions stay gap-free and versions count from 1.

The child appends through the async store (group commit) from several tasks at
once: single events, several events on one stream, and `append_many` across two
streams. Every event of one append carries the append's id and size, so a
partial transaction would show as a group with fewer events than its size. The
child prints the id and positions of each append after it returned, i.e. after
its commit was durable; the test kills it, reopens the file and checks.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest
from cli_helpers import REPO, cli_env

from gormes.events.sqlite_log import SQLiteLog

KILLS = 24
WRITER_TASKS = 4
STREAMS = ("a", "b", "c", "d", "e")

CHILD = r"""
import random, sys
import trio
from gormes.events.notes import NoteAdded
from gormes.events.sqlite import SQLiteEventStore
from gormes.events.store import AppendRequest

path, run = sys.argv[1], int(sys.argv[2])
STREAMS = sys.argv[3].split(",")

def ack(group, results):
    positions = [p for r in results for p in range(r.first_position, r.last_position + 1)]
    sys.stdout.write(f"{group} {','.join(map(str, positions))}\n")
    sys.stdout.flush()

async def writer(store, task):
    rng = random.Random(run * 1000 + task)
    n = 0
    while True:
        n += 1
        group = f"{run}.{task}.{n}"
        kind = rng.choice(["single", "several", "two-streams"])
        if kind == "single":
            plan = [(rng.choice(STREAMS), 1)]
        elif kind == "several":
            plan = [(rng.choice(STREAMS), rng.randint(2, 5))]
        else:
            plan = [(s, rng.randint(1, 3)) for s in rng.sample(STREAMS, 2)]
        size = sum(k for _, k in plan)
        note = NoteAdded(text=group, tags=(str(size),))
        if kind == "two-streams":
            results = await store.append_many(
                [AppendRequest(s, [note] * k) for s, k in plan]
            )
        else:
            stream, k = plan[0]
            results = [await store.append(stream, [note] * k)]
        ack(group, results)

async def main():
    async with SQLiteEventStore.open(path) as store:
        async with trio.open_nursery() as nursery:
            for task in range(int(sys.argv[4])):
                nursery.start_soon(writer, store, task)

trio.run(main)
"""


class Child:
    """A writer process and a thread collecting the acknowledgements it prints."""

    def __init__(self, db: Path, run: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(db), str(run), ",".join(STREAMS), str(WRITER_TASKS)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env(), cwd=REPO,
        )
        self.acks: list[tuple[str, list[int]]] = []
        self.first_ack = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for raw in self.process.stdout:
            line = raw.decode()
            if not line.endswith("\n"):
                break  # cut off by the kill: not an acknowledgement
            group, positions = line.split()
            self.acks.append((group, [int(p) for p in positions.split(",")]))
            self.first_ack.set()
        self.first_ack.set()

    def kill(self) -> tuple[int, bytes]:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self._reader.join()
        stderr = self.process.stderr.read()
        self.process.stdout.close()
        self.process.stderr.close()
        return self.process.returncode, stderr


def check_log(db: Path, acknowledged: dict[int, str]) -> int:
    """Everything the crash test promises; returns the head position."""
    log = SQLiteLog(db)  # opened for writing, as the next writer will: recovers the WAL
    try:
        assert log.conn.execute("PRAGMA quick_check").fetchone()[0] == "ok"
        records = log.read_all()
        head = log.head()
        assert [r.position for r in records] == list(range(1, head + 1)), "gap in positions"

        by_stream: dict[str, list[int]] = {}
        for r in records:
            by_stream.setdefault(r.stream, []).append(r.version)
        for stream, versions in by_stream.items():
            assert versions == list(range(1, len(versions) + 1)), f"versions of {stream}"

        sizes = Counter(r.event.text for r in records)
        declared = {r.event.text: int(r.event.tags[0]) for r in records}
        partial = {g: (sizes[g], declared[g]) for g in sizes if sizes[g] != declared[g]}
        assert not partial, f"partial transactions visible: {partial}"

        texts = {r.position: r.event.text for r in records}
        lost = {p: g for p, g in acknowledged.items() if texts.get(p) != g}
        assert not lost, f"acknowledged events lost or changed: {lost}"
        return head
    finally:
        log.close()


@pytest.mark.slow
def test_acknowledged_appends_survive_sigkill(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    rng = random.Random()
    acknowledged: dict[int, str] = {}
    for run in range(1, KILLS + 1):
        child = Child(db, run)
        assert child.first_ack.wait(timeout=60), "the writer never acknowledged an append"
        threading.Event().wait(rng.uniform(0.0, 0.2))
        returncode, stderr = child.kill()
        assert returncode == -signal.SIGKILL, stderr.decode()
        for group, positions in child.acks:
            for position in positions:
                assert position not in acknowledged, "a position was acknowledged twice"
                acknowledged[position] = group
        head = check_log(db, acknowledged)
        assert head >= len(acknowledged)
    assert len(acknowledged) >= KILLS
