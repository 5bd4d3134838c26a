"""`gormes top` on PostgreSQL: `--once --json` shows what the same jobs show on
SQLite, and the live view in a real terminal (a pty) pauses a job in the
Postgres ledger, then quits with 0 and the terminal restored."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from pg_helpers import admin, fresh_schema, url_for_schema
from test_top_tty import Terminal, wait_until

from cli_helpers import assert_one_line_error, cli_env, gormes_command
from gormes.actors.jobs.heartbeat import Heartbeat
from gormes.actors.jobs.queue import JobQueue
from gormes.events.open import open_store
from gormes.events.runs import RunStarted, RunToolCalled, run_stream


@pytest.fixture
def schema() -> Iterator[str]:
    with fresh_schema() as name:
        yield name


def populate(target: str | Path) -> dict[str, str]:
    async def main() -> dict[str, str]:
        async with open_store(target) as store:
            queue = await JobQueue.open(store)
            waiting = await queue.submit("echo", {"n": 1})
            paused = await queue.submit("echo", {"n": 2}, {"queue": "slow"})
            await queue.pause(paused.id)
            agent = await queue.submit("agent", {"prompt": "look"})
            await queue.claim({"agent"}, worker_id="w-1")
            await queue.add_tokens(agent.id, (await queue.get(agent.id)).lock_token,
                                   input=1200, output=300)
            await Heartbeat(store, "w-1", {"pid": 7, "host": "h", "concurrency": 2}).beat()
            await store.append(run_stream("RUNPG1"), [
                RunStarted(run_id="RUNPG1", handler="agent", handler_version="v", job_id=agent.id),
                RunToolCalled(seq=1, operation="fs.list", arguments="{}", args_hash="a",
                              outcome="ok", result=["notes"]),
            ], expected_version=0)
            return {"waiting": waiting.id, "paused": paused.id, "agent": agent.id}

    return trio.run(main)


def top(target: str | Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(gormes_command(target, "top", *args), capture_output=True, text=True,
                          env=cli_env(), cwd=cwd, timeout=60, stdin=subprocess.DEVNULL)


def comparable(snapshot: dict, ids: dict[str, str]) -> dict:
    """The snapshot without what differs between two databases: ids, times."""
    names = {v: k for k, v in ids.items()}
    return {
        "head": snapshot["head"], "by_status": snapshot["by_status"], "by_queue": snapshot["by_queue"],
        "tokens": snapshot["tokens"], "selected": names[snapshot["selected"]],
        "jobs": [(names[j["id"]], j["status"], j["queue"], j["tokens"], j["worker_id"], j["run_id"],
                  j["last_tool"]) for j in snapshot["jobs"]],
        "runs": [(r["run_id"], r["status"], r["last_tool"], r["iterations"]) for r in snapshot["runs"]],
        "workers": [(w["worker_id"], w["alive"], w["active_jobs"]) for w in snapshot["workers"]],
    }


def test_once_json_shows_what_sqlite_shows(schema: str, tmp_path: Path):
    url, db = url_for_schema(schema), tmp_path / "gormes.db"
    pg_ids, lite_ids = populate(url), populate(db)
    pg, lite = top(url, "--once", "--json", cwd=tmp_path), top(db, "--once", "--json", cwd=tmp_path)
    assert pg.returncode == 0, pg.stderr
    assert lite.returncode == 0, lite.stderr
    pg_snap = comparable(json.loads(pg.stdout), pg_ids)
    assert pg_snap == comparable(json.loads(lite.stdout), lite_ids)
    assert pg_snap["jobs"][0] == ("agent", "active", "default", {"input": 1200, "output": 300,
                                  "cache_read": 0, "cache_write": 0, "reasoning": 0}, "w-1", "RUNPG1", "fs.list")
    assert pg_snap["runs"] == [("RUNPG1", "running", "fs.list", 0)]
    assert pg_snap["workers"] == [("w-1", True, 1)]
    assert {s: n for s, n in pg_snap["by_status"].items() if n} == {"waiting": 1, "paused": 1,
                                                                    "active": 1}


def test_once_prints_the_screen_and_bad_input_is_one_line(schema: str, tmp_path: Path):
    url = url_for_schema(schema)
    ids = populate(url)
    screen = top(url, "--once", cwd=tmp_path)
    assert screen.returncode == 0, screen.stderr
    assert ids["waiting"] in screen.stdout and "fs.list" in screen.stdout
    assert "--json needs --once" in assert_one_line_error(top(url, "--json", cwd=tmp_path))
    live = top(url, cwd=tmp_path)  # stdin is not a terminal
    assert "needs a terminal" in assert_one_line_error(live)
    unreachable = top("postgresql://nobody:secret@127.0.0.1:1/x", "--once", cwd=tmp_path)
    assert "cannot connect to PostgreSQL" in assert_one_line_error(unreachable)
    assert list(tmp_path.iterdir()) == []  # no SQLite file was made


def job_status(schema: str, job_id: str) -> str | None:
    rows = admin(f'SELECT status FROM "{schema}".jobs WHERE id = %s', (job_id,))
    return rows[0][0] if rows else None


def test_the_live_view_pauses_a_job_in_postgres_and_restores_the_terminal(schema: str):
    url = url_for_schema(schema)

    async def submit() -> str:
        async with open_store(url) as store:
            queue = await JobQueue.open(store)
            return (await queue.submit("echo", {"hello": "top"}, {"queue": "inbox"})).id

    job_id = trio.run(submit)
    term = Terminal(url)
    try:
        term.output.wait_for(job_id.encode())
        mark = term.press(b"p")
        wait_until(lambda: job_status(schema, job_id) == "paused", "the job paused in PostgreSQL",
                   term.output.bytes)
        term.output.wait_for(b"paused", after=mark)
    finally:
        term.press(b"q")
        returncode, before, after, screen = term.close()
    assert returncode == 0, screen[-2000:]
    assert b"Traceback" not in screen
    assert after == before
