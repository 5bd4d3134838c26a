"""Helpers for acceptance tests: they run the real `gormes` CLI in subprocesses
against real database files."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from gormes.events.notes import NoteAdded
from gormes.events.sqlite_log import SQLiteLog

REPO = Path(__file__).resolve().parents[2]


def gormes_command(db: Path | str, *args: str) -> list[str]:
    return [sys.executable, "-m", "gormes", "--db", str(db), *args]


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("GORMES_DB", None)
    env["COLUMNS"] = "200"
    return env


def run_gormes(
    db: Path | str, *args: str, input: str | bytes | None = None, timeout: float = 60,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """`cwd` (default the repository) is where a relative --db lands."""
    if isinstance(input, bytes):
        input = input.decode()
    return subprocess.run(
        gormes_command(db, *args), input=input, capture_output=True, text=True,
        env=cli_env(), timeout=timeout, cwd=cwd or REPO,
    )


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def assert_one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    """Non-zero exit, nothing on stdout, exactly one line on stderr, no traceback."""
    assert result.returncode != 0, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gormes: error: "), result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    return lines[0]


def rows(db: Path, sql: str) -> list[tuple]:
    """The rows `sql` reads from the SQLite file `db` (a connection of its own, read-only)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


@contextmanager
def running_worker(db: Path, *args: str) -> Iterator[subprocess.Popen]:
    """`gormes worker` on `db` in the background for the block, then SIGTERM."""
    worker = subprocess.Popen(gormes_command(db, "worker", "--shutdown-grace", "500", *args), env=cli_env(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield worker
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)


def assert_job_completes(db: Path | str, job_id: str, timeout_s: int = 60) -> None:
    """`gormes jobs wait` for the job, which must say it completed."""
    waited = run_gormes(db, "jobs", "wait", job_id, "--timeout", str(timeout_s), timeout=timeout_s + 30)
    assert waited.stdout.strip() == "completed", (waited.stdout, waited.stderr)


def digest(path: Path) -> str:
    """A hash of a file, or of a directory's listing and file contents."""
    h = hashlib.sha256()
    if path.is_dir():
        for child in sorted(path.rglob("*")):
            h.update(str(child.relative_to(path)).encode())
            if child.is_file():
                h.update(child.read_bytes())
    elif path.exists():
        h.update(path.read_bytes())
    else:
        h.update(b"<missing>")
    return h.hexdigest()


def create_database(db: Path) -> None:
    """A new, empty gormes database with its job ledger at `db` (as a worker or the
    first write makes one; the read commands make none), before two processes open
    it: two opening a brand-new file at once can race in the ledger's setup."""
    import trio

    from gormes.actors.jobs.queue import JobQueue
    from gormes.events.sqlite import SQLiteEventStore

    async def create() -> None:
        async with SQLiteEventStore.open(db) as store:
            await JobQueue.open(store)

    trio.run(create)


def write_notes(db: Path, notes: Sequence[tuple[str, str]]) -> None:
    """Append (stream, text) notes, one transaction each, and close cleanly."""
    log = SQLiteLog(db)
    try:
        for stream, text in notes:
            log.append_now(stream, [NoteAdded(text=text)])
    finally:
        log.close()


SAMPLE = [
    ("job-1", "first"),
    ("job-2", "second"),
    ("run-1", "third"),
    ("job-1", "fourth"),
]


def remount_read_only(mount_point: Path) -> None:
    done = subprocess.run(
        ["mount", "-o", "remount,ro", str(mount_point)], capture_output=True, text=True
    )
    if done.returncode != 0:
        import pytest

        pytest.skip(f"cannot remount the tmpfs read-only: {done.stderr.strip()}")


def side_file_handlers(name: str, side_env: str, sleep_s: tuple[float, float]) -> str:
    """Source of a handlers module for crash and drain tests: job `name` sleeps a
    random while in `sleep_s`, then appends "JOB_ID LOCK_TOKEN" to the file named by
    the environment variable `side_env` (O_APPEND: one whole line per run, even
    from several processes), so a test can count every handler run under a claim."""
    low, high = sleep_s
    return f"""
import os
import random
import trio
import gormes

SIDE = os.environ["{side_env}"]

@gormes.job("{name}")
async def {name}(ctx, data):
    await trio.sleep(random.uniform({low}, {high}))
    fd = os.open(SIDE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{{ctx.id}} {{ctx.lock_token}}\\n".encode())
    finally:
        os.close(fd)
    return {{"n": data["n"]}}
"""


def child_reads_notes_script(tmp_path: Path) -> str:
    """A `scripted:` model: the parent spawns a child that reads notes.txt."""
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"agents": [
        {"match": "CHILD", "replies": [
            {"tool_calls": [{"name": "fs.read", "arguments": {"path": "notes.txt"}}]},
            {"text": "the notes say hello"}]},
        {"replies": [
            {"tool_calls": [{"name": "agent.spawn", "arguments": {"prompt": "CHILD read notes.txt"}}]},
            {"text": "my child read the notes"}]},
    ]}))
    return f"scripted:{path}"


def write_sample(url: str) -> None:
    """The SAMPLE notes appended to the store at `url` (PostgreSQL too)."""
    import trio

    from gormes.events.open import open_store

    async def main() -> None:
        async with open_store(url) as store:
            for stream, text in SAMPLE:
                await store.append(stream, [NoteAdded(text=text)])

    trio.run(main)


def mounted_tmpfs(tmp_path: Path, size: str):  # -> Iterator[Path], for a fixture to yield from
    """A tmpfs of `size` mounted under `tmp_path` for one test (we run as root), a
    disk that really fills; the test is skipped where mounting is not allowed."""
    import pytest

    mount_point = tmp_path / "mnt"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


def promotable(tmp_path: Path) -> Path:
    """A skills folder whose candidate `alpha` has the evidence to become proven."""
    root = tmp_path / "skills"
    shutil.copytree(REPO / "tests" / "skills" / "fixtures" / "good", root)
    skill = root / "alpha" / "SKILL.md"
    skill.write_text(skill.read_text().replace("evidence: []", (
        "evidence:\n  - {date: 2026-01-05, type: run, ref: run-1}\n"
        "  - {date: 2026-01-06, type: run, ref: run-2}\n  - {date: 2026-01-07, type: review, ref: bob}"
    )))
    return root
