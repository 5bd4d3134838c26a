"""`gormes top --once [--json]` and its errors, through the real CLI in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import trio

REPO = Path(__file__).resolve().parents[2]


def gormes(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("GORMES_DB", None)
    env["COLUMNS"] = "160"
    return subprocess.run(
        [sys.executable, "-m", "gormes", "--db", str(db), *args], capture_output=True, text=True,
        env=env, cwd=REPO, timeout=60, stdin=subprocess.DEVNULL, check=False,
    )


def populate(db: Path) -> dict[str, str]:
    from gormes.actors.jobs.queue import JobQueue
    from gormes.events.sqlite import SQLiteEventStore

    async def main() -> dict[str, str]:
        async with SQLiteEventStore.open(db) as store:
            queue = await JobQueue.open(store)
            waiting = await queue.submit("echo", {"n": 1})
            paused = await queue.submit("echo", {"n": 2}, {"queue": "slow"})
            await queue.pause(paused.id)
            return {"waiting": waiting.id, "paused": paused.id}

    return trio.run(main)


def test_once_json_prints_the_snapshot(tmp_path: Path):
    db = tmp_path / "gormes.db"
    ids = populate(db)
    done = gormes(db, "top", "--once", "--json")
    assert done.returncode == 0, done.stderr
    snap = json.loads(done.stdout)
    assert {s: n for s, n in snap["by_status"].items() if n} == {"waiting": 1, "paused": 1}
    assert [q["queue"] for q in snap["by_queue"]] == ["default", "slow"]
    assert [(j["id"], j["status"]) for j in snap["jobs"]] == [
        (ids["waiting"], "waiting"), (ids["paused"], "paused")]
    assert snap["selected"] == ids["waiting"]
    assert snap["runs"] == [] and snap["workers"] == []
    assert snap["head"] == 3


def test_once_prints_the_screen_for_people(tmp_path: Path):
    db = tmp_path / "gormes.db"
    ids = populate(db)
    done = gormes(db, "top", "--once")
    assert done.returncode == 0, done.stderr
    assert "jobs 2: waiting 1  paused 1" in done.stdout
    selected = [line for line in done.stdout.splitlines() if line.startswith(">")]
    assert len(selected) == 1 and ids["waiting"] in selected[0]
    assert ids["paused"] in done.stdout


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode != 0 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr
    return done.stderr


def test_live_view_without_a_terminal_is_one_clear_line(tmp_path: Path):
    db = tmp_path / "gormes.db"
    populate(db)
    assert "needs a terminal" in one_line_error(gormes(db, "top"))
    assert "--json needs --once" in one_line_error(gormes(db, "top", "--json"))


def test_a_missing_database_is_not_created(tmp_path: Path):
    db = tmp_path / "nowhere.db"
    done = gormes(db, "top", "--once")
    assert one_line_error(done) == f"gormes: error: no gormes database at {db}\n" and done.returncode == 1
    assert not db.exists()
