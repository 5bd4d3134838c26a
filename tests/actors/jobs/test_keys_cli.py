"""The doors of per-key concurrency and debounce (decision 0032): `gormes jobs submit`
flags and `jobs get` on a real SQLite file (the CLI in subprocesses), and
job.submit through the executor as a gateway would call it over MCP (the options
are fields of the operation's input, JobOptions). Bad input is one line, exit 2,
and no job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gormes.actors.jobs.queue import JobQueue
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller, InvalidOperationInput
from gormes.tools.builtin import default_registry

REPO = Path(__file__).resolve().parents[3]
GATEWAY = Caller(trust="gateway", id="mcp:alice")


def gormes(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("GORMES_DB", None)
    return subprocess.run([sys.executable, "-m", "gormes", "--db", str(db), *args],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=120)


def test_the_cli_submits_keyed_and_debounced_jobs_and_shows_them(tmp_path):
    db = tmp_path / "gormes.db"
    debounce = ("--debounce-key", "user-7", "--debounce", "5m", "--debounce-mode", "merge",
                "--debounce-max", "1h")
    ids = []
    for i in range(3):
        done = gormes(db, "jobs", "submit", "sync", "--data", json.dumps({"i": i}), *debounce,
                      "--concurrency-key", "tenant-1", "--concurrency-limit", "2")
        assert done.returncode == 0, done.stderr
        ids.append(done.stdout.strip())
    assert len(set(ids)) == 1  # one job
    got = gormes(db, "jobs", "get", ids[0], "--json")
    job = json.loads(got.stdout)
    assert job["status"] == "delayed" and job["data"] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert (job["submissions"], job["concurrency_key"], job["concurrency_limit"]) == (3, "tenant-1", 2)
    assert job["options"]["debounce_ms"] == 300_000 and job["options"]["debounce_max_ms"] == 3_600_000
    assert job["delay_until"] <= job["created_at"] + 3_600_000
    shown = gormes(db, "jobs", "get", ids[0]).stdout.splitlines()
    for line in ("concurrency_key   tenant-1", "concurrency_limit 2", "debounce_key      user-7",
                 "submissions       3"):
        assert line in shown, shown
    # --json on submit says whether the submission joined a job
    joined = json.loads(gormes(db, "jobs", "submit", "sync", "--data", "4", *debounce, "--json").stdout)
    assert joined["id"] == ids[0] and joined["coalesced"] is True and joined["submissions"] == 4
    check = gormes(db, "projections", "rebuild", "--check")
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.parametrize("flags, says", [
    (("--concurrency-key", "k", "--concurrency-limit", "0"), "concurrency_limit must be between 1"),
    (("--concurrency-limit", "3"), "concurrency_limit needs a concurrency_key"),
    (("--concurrency-key", ""), "concurrency_key must not be empty"),
    (("--debounce-key", "d", "--debounce", "-5s"), "not a duration"),
    (("--debounce-key", "d", "--debounce", "0"), "debounce_ms must be between 1"),
    (("--debounce-key", "d", "--debounce", "5s", "--debounce-mode", "first"), "'first' is not one of"),
    (("--debounce-key", "d"), "needs debounce_ms"),
    (("--debounce", "5s"), "debounce_ms needs a debounce_key"),
    (("--debounce-key", "d", "--debounce", "5s", "--debounce-max", "1s"), "at least debounce_ms"),
])
def test_bad_keys_windows_and_modes_are_one_line_exit_2_and_no_job(tmp_path, flags, says):
    db = tmp_path / "gormes.db"
    done = gormes(db, "jobs", "submit", "sync", *flags)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gormes: error:") and says in lines[0], lines
    assert "Traceback" not in done.stderr
    if db.exists():  # refused by the queue, after the submit opened (so made) the database
        assert json.loads(gormes(db, "jobs", "list", "--json").stdout) == []


async def test_job_submit_over_the_executor_takes_the_keys_as_options(store):
    queue = await JobQueue.open(store)
    executor = Executor(default_registry(), store, jobs=queue)
    options = {"debounce_key": "doc-9", "debounce_ms": 60_000, "concurrency_key": "tenant-1"}
    first = await executor.call("job.submit", {"name": "index", "data": 1, "options": options}, GATEWAY)
    second = await executor.call("job.submit", {"name": "index", "data": 2, "options": options}, GATEWAY)
    assert second.id == first.id and second.coalesced and not first.coalesced
    job = await queue.get(first.id)
    assert (job.data, job.submissions, job.concurrency_limit) == (2, 2, 1)
    with pytest.raises(InvalidOperationInput, match="concurrency_limit must be between 1"):
        await executor.call("job.submit", {"name": "index", "options": {
            "concurrency_key": "t", "concurrency_limit": 0}}, GATEWAY)
    with pytest.raises(InvalidOperationInput, match="debounce_mode"):
        await executor.call("job.submit", {"name": "index", "options": {
            "debounce_key": "d", "debounce_ms": 5, "debounce_mode": "sum"}}, GATEWAY)
    assert [j.id for j in await queue.list()] == [first.id]
