"""`gormes tail --follow --json` sees, in order and exactly once, the events two
other processes append while it runs, and exits 0 on SIGINT and on SIGTERM."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cli_helpers import REPO, cli_env, gormes_command, write_notes

from gormes.events.sqlite_log import SQLiteLog

EVENTS_PER_WRITER = 500
TASKS_PER_WRITER = 5
SAFETY_TIMEOUT = 60  # only so that a broken tail fails the test instead of hanging it

WRITER = r"""
import sys
import trio
from gormes.events.notes import NoteAdded
from gormes.events.sqlite import SQLiteEventStore

path, name, tasks, per_task = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

async def task(store, t):
    for i in range(per_task):
        await store.append(f"{name}-t{t}", [NoteAdded(text=f"{name}:{t}:{i}")])

async def main():
    async with SQLiteEventStore.open(path) as store:
        async with trio.open_nursery() as nursery:
            for t in range(tasks):
                nursery.start_soon(task, store, t)

trio.run(main)
"""


class LineReader:
    """Collects a process's stdout lines in a thread, so the test can wait for them."""

    def __init__(self, stream) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.put(line)
        self.lines.put(None)

    def next(self) -> dict:
        line = self.lines.get(timeout=SAFETY_TIMEOUT)
        assert line is not None, "tail ended early"
        return json.loads(line)

    def rest(self) -> list[str]:
        self._thread.join(timeout=SAFETY_TIMEOUT)
        rest = []
        while (line := self.lines.get_nowait()) is not None:
            rest.append(line)
        return rest


def start_writer(db: Path, name: str) -> subprocess.Popen[bytes]:
    per_task = EVENTS_PER_WRITER // TASKS_PER_WRITER
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(db), name, str(TASKS_PER_WRITER), str(per_task)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=cli_env(), cwd=REPO,
    )


@pytest.mark.slow
@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_follow_sees_every_event_of_two_writers_once_in_order(
    tmp_path: Path, stop_signal: signal.Signals
) -> None:
    db = tmp_path / "follow.db"
    write_notes(db, [("marker", "tail is following")])
    tail = subprocess.Popen(
        gormes_command(db, "tail", "--follow", "--json"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(), cwd=REPO,
    )
    try:
        reader = LineReader(tail.stdout)
        marker = reader.next()
        assert (marker["position"], marker["data"]["text"]) == (1, "tail is following")

        writers = [start_writer(db, name) for name in ("w1", "w2")]
        seen = [reader.next() for _ in range(2 * EVENTS_PER_WRITER)]
        for writer in writers:
            assert writer.wait(timeout=SAFETY_TIMEOUT) == 0, writer.stderr.read().decode()
            writer.stderr.close()

        # in order, exactly once: positions 2..1001 with nothing skipped or repeated
        assert [e["position"] for e in seen] == list(range(2, 2 + 2 * EVENTS_PER_WRITER))
        texts = [e["data"]["text"] for e in seen]
        assert sorted(texts) == sorted(
            f"{w}:{t}:{i}" for w in ("w1", "w2") for t in range(TASKS_PER_WRITER)
            for i in range(EVENTS_PER_WRITER // TASKS_PER_WRITER)
        )
        # each stream's events arrive in the order they were appended
        by_stream: dict[str, list[tuple[int, int]]] = {}
        for e in seen:
            by_stream.setdefault(e["stream"], []).append(
                (e["version"], int(e["data"]["text"].rsplit(":", 1)[1]))
            )
        for stream, got in by_stream.items():
            assert got == [(v, v - 1) for v in range(1, len(got) + 1)], stream
        # and what tail printed is what the log holds
        log = SQLiteLog(db, readonly=True)
        try:
            stored = [(r.position, r.stream, r.version, r.event.text) for r in log.read_all()]
        finally:
            log.close()
        assert stored[1:] == [(e["position"], e["stream"], e["version"], e["data"]["text"])
                              for e in seen]

        tail.send_signal(stop_signal)
        assert tail.wait(timeout=SAFETY_TIMEOUT) == 0
        assert reader.rest() == []
        assert tail.stderr.read() == ""
    finally:
        if tail.poll() is None:
            tail.kill()
            tail.wait()
        tail.stdout.close()
        tail.stderr.close()


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_follow_with_filters_prints_only_matching_events(
    tmp_path: Path, stop_signal: signal.Signals
) -> None:
    db = tmp_path / "filtered.db"
    write_notes(db, [("job-1", "a"), ("run-1", "b")])
    tail = subprocess.Popen(
        gormes_command(db, "tail", "--follow", "--stream", "job-*", "--type", "note.*"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(), cwd=REPO,
    )
    try:
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(x) for x in tail.stdout], daemon=True).start()
        first = lines.get(timeout=SAFETY_TIMEOUT)
        assert "job-1 v1" in first and '"text":"a"' in first
        write_notes(db, [("run-2", "c"), ("job-2", "d")])
        second = lines.get(timeout=SAFETY_TIMEOUT)
        assert second.split()[0] == "4" and "job-2 v1" in second
        tail.send_signal(stop_signal)
        assert tail.wait(timeout=SAFETY_TIMEOUT) == 0
        assert tail.stderr.read() == ""
    finally:
        if tail.poll() is None:
            tail.kill()
            tail.wait()
        tail.stdout.close()
        tail.stderr.close()
