"""An `agent` job whose data the agent cannot run (an unknown field, no prompt)
is not retried as if the failure were transient (issue 19, item 4): `jobs submit`
refuses it in one line (exit 2) before anything is queued, and so does the
job.submit operation (decision 0090); one queued before that check (by an older
gormes, or straight through the queue's Python API) goes dead on its first attempt."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import assert_one_line_error, run_gormes, running_worker


def ok(db: Path, *args: str) -> str:
    done = run_gormes(db, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_jobs_submit_refuses_agent_data_with_an_unknown_field(tmp_path: Path):
    db = tmp_path / "g.db"
    done = run_gormes(db, "jobs", "submit", "agent", "--data", '{"prompt": "hi", "promt": "typo"}')
    assert "agent job data: Object contains unknown field `promt`" in assert_one_line_error(done)
    assert done.returncode == 2
    missing = run_gormes(db, "jobs", "submit", "agent", "--data", '{"system": "no prompt"}')
    assert "missing required field `prompt`" in assert_one_line_error(missing)
    assert not db.exists()  # refused before anything was opened, let alone queued


def queued(db: Path, name: str, data: dict) -> str:
    """A job queued through the queue itself, as a gormes before 0090 queued it."""
    import trio

    from gormes.actors.jobs.queue import JobQueue
    from gormes.events.sqlite import SQLiteEventStore

    async def submit() -> str:
        async with SQLiteEventStore.open(db) as store:
            return (await (await JobQueue.open(store)).submit(name, data)).id

    return trio.run(submit)


def test_queued_bad_agent_data_is_dead_after_one_attempt(tmp_path: Path):
    db = tmp_path / "g.db"
    job = queued(db, "agent", {"prompt": "hi", "promt": "typo"})
    with running_worker(db):
        assert ok(db, "jobs", "wait", job, "--timeout", "60").strip() == "dead"
    got = json.loads(ok(db, "jobs", "get", job, "--json"))
    assert got["attempts_made"] == 1 and got["max_attempts"] == 3
    assert "unknown field `promt`" in got["error"]
    runs = json.loads(ok(db, "runs", "list", "--json"))
    assert runs == []  # refused before a run was recorded
