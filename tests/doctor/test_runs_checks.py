"""runs.cut_off: runs with no end whose job no attempt is running (cut off with a
lost worker) are a warning; runs of an active job, and ended runs, are not.
Foreground runs with no end whose process is gone (on this host) are a warning;
those whose process is alive, or cannot be checked from here, are counted."""

from __future__ import annotations

from pathlib import Path

from doctor_helpers import T0, append, check, doctor, fresh

import msgspec

from gormes.actors.jobs.queue import JobQueue
from gormes.actors.runs.process import this_process
from gormes.events.runs import RunCancelled, RunProcess, RunStarted, run_stream
from gormes.events.sqlite import SQLiteEventStore


def started(run_id: str, job_id: str | None = None, parent: str | None = None,
            process: RunProcess | None = None) -> RunStarted:
    return RunStarted(run_id=run_id, handler="agent", handler_version="v", job_id=job_id,
                      parent_run_id=parent, depth=0 if parent is None else 1, process=process)


async def _jobs(path: Path) -> tuple[str, str]:
    """An active job (claimed) and a cancelled one."""
    async with SQLiteEventStore.open(path) as store:
        queue = await JobQueue.open(store)
        active = await queue.submit("agent", {"prompt": "a"})
        await queue.claim({"agent"}, worker_id="w1")
        cancelled = await queue.submit("agent", {"prompt": "b"})
        await queue.cancel(cancelled.id)
        return active.id, cancelled.id


def test_no_runs_is_ok(db_path: Path) -> None:
    result = check(doctor(fresh(db_path)), "runs.cut_off")
    assert result.status == "ok" and result.message.startswith("0 run(s)")


async def test_runs_of_a_job_no_attempt_runs_are_cut_off(db_path: Path) -> None:
    active, cancelled = await _jobs(fresh(db_path))
    append(db_path, run_stream("live"), [started("live", active)])
    append(db_path, run_stream("lost"), [started("lost", cancelled)])
    append(db_path, run_stream("lost-child"), [started("lost-child", cancelled, parent="lost")])
    append(db_path, run_stream("ended"), [started("ended", cancelled), RunCancelled(reason="job cancelled")])
    append(db_path, run_stream("foreground"), [started("foreground")])
    result = check(doctor(db_path, now=T0), "runs.cut_off")
    assert result.status == "warn", result
    assert result.message.startswith("2 run(s) of jobs no attempt is running")
    assert f"lost (job {cancelled}, cancelled)" in result.message
    assert f"lost-child (job {cancelled}, cancelled)" in result.message
    assert "live" not in result.message.split(":")[1] and "ended (" not in result.message
    assert "1 run(s) outside a job have no end and a process that cannot be checked" in result.message
    assert "start a worker" in result.remediation


async def test_runs_of_active_jobs_and_ended_runs_are_ok(db_path: Path) -> None:
    active, cancelled = await _jobs(fresh(db_path))
    append(db_path, run_stream("live"), [started("live", active)])
    append(db_path, run_stream("ended"), [started("ended", cancelled), RunCancelled(reason="job cancelled")])
    result = check(doctor(db_path, now=T0), "runs.cut_off")
    assert (result.status, result.message) == ("ok", "1 run(s) of active jobs running")


async def test_foreground_runs_whose_process_is_gone_are_cut_off(db_path: Path) -> None:
    fresh(db_path)
    here = this_process()
    # the pid of this process, started at another time: the pid was reused
    reused = msgspec.structs.replace(here, started_at=here.started_at - 3600)
    append(db_path, run_stream("killed"), [started("killed", process=reused)])
    append(db_path, run_stream("killed-child"), [started("killed-child", parent="killed", process=reused)])
    append(db_path, run_stream("alive"), [started("alive", process=here)])
    append(db_path, run_stream("far"), [started("far", process=msgspec.structs.replace(
        reused, host="far", machine="another"))])
    append(db_path, run_stream("ended"), [started("ended", process=reused), RunCancelled(reason="interrupted")])
    result = check(doctor(db_path, now=T0), "runs.cut_off")
    assert result.status == "warn", result
    assert result.message.startswith(
        f"2 run(s) outside a job have no end and their process is gone, cut off (killed): "
        f"killed (process {here.pid} on {here.host}), killed-child (process {here.pid} on {here.host})")
    assert "; 1 run(s) outside a job running here; 1 run(s) outside a job have no end and a process " \
        "that cannot be checked from here" in result.message
    assert "gormes runs resume RUN" in result.remediation
