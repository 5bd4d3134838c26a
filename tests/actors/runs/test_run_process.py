"""Whether a run's process is alive, seen from this process: certain on its own
machine and PID namespace ("alive" or "gone"), "elsewhere" otherwise; and the
daemon's sweep of runs outside a job whose process is gone (on both backends)."""

from __future__ import annotations

import subprocess
import sys
import time

import msgspec
from pg_helpers import backend, backend_store  # noqa: F401 (fixture)
from run_helpers import run_events

from gormes.actors.runs.cut_off import GoneProcessRuns
from gormes.actors.runs.process import gone_reason, process_state, this_process
from gormes.events.codec import default_codec
from gormes.events.runs import RunCancelled, RunChildSpawned, RunCompleted, RunStarted, run_stream
from gormes.projections.runner import ProjectionRunner
from gormes.projections.runs import runs as runs_projection

replace = msgspec.structs.replace


def test_this_process_is_alive_and_names_itself() -> None:
    here = this_process()
    assert process_state(here) == "alive"
    assert here.pid > 0 and here.host and here.started_at > 0


def test_a_process_that_exited_is_gone_even_before_it_is_reaped() -> None:
    import psutil

    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    recorded = replace(this_process(), pid=child.pid, started_at=psutil.Process(child.pid).create_time())
    assert process_state(recorded) == "alive"
    child.stdin.close()  # it exits; until it is waited for, it is a zombie
    deadline = time.monotonic() + 30
    while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the child never exited"
        time.sleep(0.01)
    assert process_state(recorded) == "gone"
    child.wait()
    assert process_state(recorded) == "gone"


def test_a_reused_pid_another_boot_another_machine_or_container() -> None:
    here = this_process()
    assert process_state(replace(here, started_at=here.started_at - 60)) == "gone"  # the pid was reused
    assert process_state(replace(here, boot="another-boot")) == "gone"  # the machine restarted
    assert process_state(replace(here, machine="another-machine")) == "elsewhere"
    # containers on two machines, made from one image: one machine-id, two hostnames
    assert process_state(replace(here, host="another-host", boot="another-boot")) == "elsewhere"
    assert process_state(replace(here, pid_namespace="pid:[1]")) == "elsewhere"
    assert process_state(None) is None
    # without a machine id (not Linux) the hostname stands for the machine
    bare = replace(here, machine="", boot="", pid_namespace="")
    assert process_state(replace(bare, host="elsewhere-host"), bare) == "elsewhere"
    assert process_state(bare, bare) == "alive"


def test_a_run_recorded_before_processes_were_kept_decodes_with_none() -> None:
    old = b'{"type":"run.started","run_id":"r","handler":"agent","handler_version":"v"}'
    assert default_codec.decode("run.started", 1, old).process is None


def started(run_id: str, process, parent: str | None = None, job_id: str | None = None) -> RunStarted:
    return RunStarted(run_id=run_id, handler="agent", handler_version="v", process=process,
                      parent_run_id=parent, depth=0 if parent is None else 1, job_id=job_id)


async def test_the_sweep_ends_runs_outside_a_job_whose_process_is_gone(backend, db_path) -> None:  # noqa: F811
    here = this_process()
    gone = replace(here, started_at=here.started_at - 60)
    async with backend_store(backend, db_path) as store:
        sweep = GoneProcessRuns(store)

        async def record(run_id: str, *events) -> None:
            await store.append(run_stream(run_id), list(events), expected_version=0)

        await record("killed", started("killed", gone), RunChildSpawned(seq=1, child_run_id="sub", handler="agent"))
        await record("sub", started("sub", gone, parent="killed"))
        await record("alive", started("alive", here))
        await record("far", started("far", replace(gone, machine="another")))
        await record("old", started("old", None))
        await record("of-a-job", started("of-a-job", gone, job_id="J1"))  # the job's attempts end it
        await record("ended", started("ended", gone), RunCompleted(result="ok"))
        assert await sweep.sweep() == []  # no runs projection yet: nothing known
        await ProjectionRunner(store, runs_projection).catch_up()
        assert await sweep.sweep() == ["killed", "sub"]
        assert (await run_events(store, "killed"))[-1] == RunCancelled(reason=gone_reason(gone))
        assert (await run_events(store, "sub"))[-1].reason == gone_reason(gone)
        for untouched in ("alive", "far", "old", "of-a-job"):
            assert len(await run_events(store, untouched)) == 1
        await ProjectionRunner(store, runs_projection).catch_up()
        head = await store.head()
        assert await sweep.sweep() == []
        assert await store.head() == head
