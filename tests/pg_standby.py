"""A real PostgreSQL streaming standby (a read replica) and its primary, for the
tests of what gormes does on a standby.

The system server (127.0.0.1:5432) is not touched: a throwaway primary is made
with initdb in a temporary directory, on a free port, and a standby is copied
from it with `pg_basebackup -R` and started on another; WAL streams from one to
the other as on any replicated server. Both run as the `postgres` OS user (the
tests run as root, whom PostgreSQL refuses). Where that cannot be done (neither
root nor postgres, the binaries absent) the tests are skipped with the reason.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

BIN = Path(os.environ.get("GORMES_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
OS_USER = "postgres"
REPLAY_TIMEOUT_S = 30.0

# fsync stays on (the doctor reports it); a small cluster starts quickly.
_CONF = """
listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = '{sockets}'
wal_level = replica
max_wal_senders = 4
hot_standby = on
shared_buffers = 16MB
max_connections = 40
logging_collector = off
log_min_messages = warning
"""


@dataclass(frozen=True)
class Standby:
    """The primary's and the standby's URLs (database `postgres`, trust auth) and
    the standby's server log."""

    primary: str
    standby: str
    standby_log: Path

    def url(self, server: str, schema: str) -> str:
        return f"{server}?options=-csearch_path%3D{schema}"

    def caught_up(self, timeout: float = REPLAY_TIMEOUT_S) -> None:
        """Return once the standby has replayed everything the primary has written
        up to now (its replay LSN at or past the primary's current WAL LSN)."""
        with psycopg.connect(self.primary, autocommit=True) as conn:
            target = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
        deadline = time.monotonic() + timeout
        with psycopg.connect(self.standby, autocommit=True) as conn:
            while True:
                done = conn.execute(
                    "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,)
                ).fetchone()[0]
                if done:
                    return
                if time.monotonic() > deadline:
                    raise AssertionError(f"the standby did not replay up to {target} in {timeout} s")
                time.sleep(0.01)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _why_not() -> str | None:
    for tool in ("initdb", "pg_ctl", "pg_basebackup", "postgres"):
        if not (BIN / tool).is_file():
            return f"no {BIN / tool} (set GORMES_TEST_PG_BIN to PostgreSQL's bin directory)"
    try:
        pwd.getpwnam(OS_USER)
    except KeyError:
        return f"no OS user {OS_USER} to run a throwaway PostgreSQL cluster as"
    if os.geteuid() != 0 and pwd.getpwuid(os.geteuid()).pw_name != OS_USER:
        return f"a throwaway PostgreSQL cluster runs as {OS_USER}: the tests must run as root or {OS_USER}"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return f"no runuser to run PostgreSQL's tools as {OS_USER}"
    return None


def _as_postgres(*argv: str | Path) -> None:
    prefix = ["runuser", "-u", OS_USER, "--"] if os.geteuid() == 0 else []
    done = subprocess.run([*prefix, *map(str, argv)], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, argv))} failed ({done.returncode}): "
                           f"{(done.stderr or done.stdout).strip()}")


def _configure(data: Path, port: int, sockets: Path) -> None:
    with open(data / "postgresql.conf", "a") as conf:  # the later line wins
        conf.write(_CONF.format(port=port, sockets=sockets))


def _start(data: Path, log: Path) -> None:
    _as_postgres(BIN / "pg_ctl", "start", "-w", "-t", "60", "-D", data, "-l", log)


def _stop(data: Path) -> None:
    if (data / "postmaster.pid").exists():
        subprocess.run(
            [*(["runuser", "-u", OS_USER, "--"] if os.geteuid() == 0 else []),
             str(BIN / "pg_ctl"), "stop", "-m", "immediate", "-w", "-D", str(data)],
            capture_output=True, timeout=60,
        )


@pytest.fixture(scope="session")
def standby() -> Iterator[Standby]:
    """A primary and its streaming standby, made for the session and removed after
    it (stopped with `-m immediate`, the directory deleted) however it ended."""
    reason = _why_not()
    if reason is not None:
        pytest.skip(reason)
    # short: the sockets' paths must fit in a sockaddr_un (107 bytes)
    root = Path(tempfile.mkdtemp(prefix="gst-", dir="/tmp"))
    primary, replica = root / "primary", root / "standby"
    try:
        if os.geteuid() == 0:
            entry = pwd.getpwnam(OS_USER)
            os.chown(root, entry.pw_uid, entry.pw_gid)
        _as_postgres(BIN / "initdb", "-D", primary, "-U", "postgres", "--auth=trust",
                     "--no-sync", "--no-instructions", "-E", "UTF8", "--locale=C")
        # initdb's pg_hba.conf with --auth=trust already trusts local and
        # 127.0.0.1 connections, replication ones included
        primary_port, standby_port = free_port(), free_port()
        _configure(primary, primary_port, root)
        _start(primary, root / "primary.log")
        _as_postgres(BIN / "pg_basebackup", "-h", root, "-p", primary_port, "-U", "postgres",
                     "-D", replica, "-R", "-X", "stream", "-c", "fast", "--no-sync")
        _configure(replica, standby_port, root)
        _start(replica, root / "standby.log")
        made = Standby(
            primary=f"postgresql://postgres@127.0.0.1:{primary_port}/postgres",
            standby=f"postgresql://postgres@127.0.0.1:{standby_port}/postgres",
            standby_log=root / "standby.log",
        )
        with psycopg.connect(made.standby) as conn:
            assert conn.execute("SELECT pg_is_in_recovery()").fetchone()[0], "not a standby"
        made.caught_up()
        yield made
    finally:
        _stop(replica)
        _stop(primary)
        shutil.rmtree(root, ignore_errors=True)
