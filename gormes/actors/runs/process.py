"""Whether the process that drives a run is still alive.

A run records its own end, so a process killed outright (SIGKILL, the OOM killer,
a power cut) leaves its runs with none, and they would read as running for ever.
`run.started` names its process (`RunProcess`), and where that process ran, the
answer is certain:

- "alive": a process with that pid, started at that time, is running;
- "gone": no process has that pid, or the one that has it started at another time
  (the pid was reused), or the machine has restarted since (another boot id).

Anywhere else it cannot be told, and the answer is "elsewhere": another machine
(another hostname or machine-id: both must match, as containers made from one
image share a machine-id), or another PID namespace on the same machine (another
container: its pids are not ours to look up). A run recorded before processes
were kept has no process: None.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any, Literal, get_args

from gormes.events.codec import default_codec
from gormes.events.runs import RUN_TERMINAL, RunProcess, RunStatus
from gormes.events.runs import RunStarted

ProcessState = Literal["alive", "gone", "elsewhere"]

# A run in these has no end yet: its process is what could still record one.
OPEN_STATUSES: tuple[str, ...] = tuple(s for s in get_args(RunStatus) if s not in RUN_TERMINAL)

# psutil's start times come from the boot time plus clock ticks: equal within a boot
# to well under this, while a reused pid starts later by at least the time it took
# the kernel to wrap its pids.
_SAME_START_S = 0.5

_cached: tuple[int, RunProcess] | None = None


def this_process() -> RunProcess:
    """This process, as `run.started` records it (computed once per pid)."""
    global _cached
    pid = os.getpid()
    if _cached is None or _cached[0] != pid:
        import psutil

        _cached = (pid, RunProcess(
            host=socket.gethostname(), machine=_read("/etc/machine-id"),
            boot=_read("/proc/sys/kernel/random/boot_id"), pid_namespace=_pid_namespace(),
            pid=pid, started_at=psutil.Process(pid).create_time(),
        ))
    return _cached[1]


def process_state(recorded: RunProcess | None, here: RunProcess | None = None) -> ProcessState | None:
    """What became of the `recorded` process, seen from `here` (this process by default)."""
    if recorded is None:
        return None
    here = here or this_process()
    if (recorded.host, recorded.machine) != (here.host, here.machine):
        return "elsewhere"
    if recorded.boot and here.boot and recorded.boot != here.boot:
        return "gone"
    if recorded.pid_namespace != here.pid_namespace:
        return "elsewhere"
    return "alive" if _runs(recorded.pid, recorded.started_at) else "gone"


def describe(recorded: RunProcess) -> str:
    return f"process {recorded.pid} on {recorded.host}"


def gone_reason(recorded: RunProcess) -> str:
    return f"cut off: its {describe(recorded)} is gone"


def _runs(pid: int, started_at: float) -> bool:
    import psutil

    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False  # it has exited; only its exit status is left to collect
        return abs(process.create_time() - started_at) < _SAME_START_S
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True  # it exists; whose it is we may not know, so it is not called gone


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def recorded_processes(conn: Any, run_ids: list[str]) -> dict[str, RunProcess | None]:
    """Each run's process as its `run.started` recorded it (`conn`: a connection to
    the log, SQLite or PostgreSQL); a run that is not in the log is left out."""
    found: dict[str, RunProcess | None] = {}
    for start in range(0, len(run_ids), 500):
        chunk = run_ids[start:start + 500]
        rows = conn.execute(
            "SELECT stream, type, type_version, data FROM events WHERE version = 1 "
            f"AND stream IN ({','.join('?' * len(chunk))})",
            [f"run-{run_id}" for run_id in chunk],
        ).fetchall()
        for stream, tag, type_version, data in rows:
            started = default_codec.decode(tag, type_version, data)
            if isinstance(started, RunStarted):
                found[stream.removeprefix("run-")] = started.process
    return found
