"""gormes on a real PostgreSQL streaming standby (a read replica), not a session
made read-only by a setting: a throwaway primary and its standby
(tests/pg_standby.py), the CLI run as processes. What is written on the primary
reads the same on the standby once it has replayed it; every write there is one
line naming the standby and writes nothing; a follower there polls (a standby
runs no LISTEN) and sees what the primary appends after it started."""

from __future__ import annotations

import json
import re
import secrets
import selectors
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import psycopg
import pytest
from cli_helpers import assert_one_line_error, cli_env, gormes_command, run_gormes
from pg_standby import Standby, standby  # noqa: F401 (the fixture)

STANDBY_SAYS = "is read-only here (the server is a read-only standby)"


def ok(url: str, *args: str) -> str:
    done = run_gormes(url, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def at_once(fn, calls: list[tuple]) -> list:
    """`fn(*call)` for each call, a few processes at a time (the CLI's start-up is
    most of each one's time)."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda call: fn(*call), calls))


def standby_errors(standby: Standby, since: int) -> list[str]:
    """The ERROR lines the standby's server logged after byte `since` of its log."""
    said = standby.standby_log.read_bytes()[since:].decode(errors="replace")
    return [line for line in said.splitlines() if re.search(r"\b(ERROR|FATAL):", line)]


def event_count(url: str) -> int:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT count(*) FROM events").fetchone()[0]


@contextmanager
def new_schema(standby: Standby) -> Iterator[str]:
    """A fresh schema made on the primary (the standby replays it), dropped after."""
    name = f"gormes_standby_{secrets.token_hex(4)}"
    with psycopg.connect(standby.primary, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    try:
        yield name
    finally:
        with psycopg.connect(standby.primary, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{name}" CASCADE')


@pytest.fixture(scope="module")
def written(standby: Standby) -> Iterator[tuple[str, str, str]]:
    """The primary's and the standby's URLs for a schema the CLI wrote on the
    primary (two jobs, a cron schedule, a note), and the first job's id. Made
    once for the module: a write on the standby changes nothing (each test
    checks it), and the follower's test appends on a stream of its own."""
    with new_schema(standby) as schema:
        primary = standby.url(standby.primary, schema)
        job = ok(primary, "jobs", "submit", "echo", "--data", '{"n": 1}').strip()
        ok(primary, "jobs", "submit", "echo", "--queue", "other")
        ok(primary, "cron", "add", "nightly", "--schedule", "0 3 * * *", "--job", "echo")
        ok(primary, "append", "notes-1", "note.added", "--data", '{"text": "on the primary"}')
        yield primary, standby.url(standby.standby, schema), job


READS = [
    ("jobs", "list", "--json"),
    ("jobs", "stats", "--json"),
    ("runs", "list", "--json"),
    ("cron", "list", "--json"),
    ("events", "--json"),
    ("audit", "verify", "--json"),
    ("projections", "status", "--json"),
]


def test_the_reads_on_the_standby_answer_what_the_primary_does(standby: Standby, written):
    primary, replica, job = written
    reads = [*READS, ("jobs", "get", job, "--json")]
    # first on the primary: a read there builds the projections it reads (runs,
    # schedules), which a read-only store reads as they are
    answers = at_once(ok, [(primary, *args) for args in reads])
    standby.caught_up()
    log_from = standby.standby_log.stat().st_size
    on_standby = at_once(ok, [(replica, *args) for args in reads])
    assert standby_errors(standby, log_from) == []  # no LISTEN tried there, no write
    for args, there, here in zip(reads, on_standby, answers, strict=True):
        assert there == here, args
    events = [json.loads(line) for line in on_standby[reads.index(("events", "--json"))].splitlines()]
    assert [e["data"]["text"] for e in events if e["stream"] == "notes-1"] == ["on the primary"]
    assert sum(e["type"] == "job.submitted" for e in events) == 2
    assert event_count(replica) == event_count(primary) == len(events)


def test_the_doctor_on_the_standby_says_it_is_one(written):
    _, replica, _ = written
    report = json.loads(run_gormes(replica, "doctor", "--json").stdout)
    server = next(c for c in report["checks"] if c["name"] == "store.server")
    assert server["status"] == "warn", server
    assert ", standby, " in server["message"], server
    assert server["message"].endswith(": a standby is read-only, so writers cannot append here"), server
    assert server["remediation"] == "point writers (workers, the daemon) at the primary"


WRITES = [
    ("jobs", "submit", "echo"),
    ("cron", "add", "weekly", "--schedule", "0 4 * * 0", "--job", "echo"),
    ("cron", "pause", "nightly"),
    ("append", "notes-1", "note.added", "--data", '{"text": "on the standby"}'),
    ("budget", "list"),  # an audited read writes its audit record
    ("projections", "rebuild"),  # an operator's write-ahead call
]


def test_each_write_on_the_standby_is_one_line_and_writes_nothing(standby: Standby, written):
    primary, replica, _ = written
    standby.caught_up()
    before = event_count(primary)
    log_from = standby.standby_log.stat().st_size
    for args, done in zip(WRITES, at_once(run_gormes, [(replica, *args) for args in WRITES]), strict=True):
        assert done.returncode == 1, (args, done.stderr)
        line = assert_one_line_error(done)
        assert STANDBY_SAYS in line, (args, line)
    standby.caught_up()
    assert event_count(primary) == event_count(replica) == before
    assert standby_errors(standby, log_from) == []  # refused before any SQL tried to write


def test_an_empty_schema_on_the_standby_stays_empty(standby: Standby):
    with new_schema(standby) as schema:
        standby.caught_up()
        line = assert_one_line_error(run_gormes(standby.url(standby.standby, schema), "jobs", "submit", "echo"))
        assert "no gormes database at" in line, line
        assert "none can be made there (the server is a read-only standby)" in line, line
        with psycopg.connect(standby.primary) as conn:
            tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = %s", (schema,))
            assert tables.fetchone() == (0,)


def read_line(proc: subprocess.Popen, timeout: float) -> str:
    """The follower's next line, or fail after `timeout` seconds."""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            raise AssertionError(f"the follower printed nothing in {timeout} s")
    return proc.stdout.readline()


def test_a_follower_on_the_standby_sees_what_the_primary_appends(standby: Standby, written):
    """The standby runs no LISTEN: the follower polls. It must not try LISTEN
    there either, which the standby refuses with an error in its log each time
    (and the store retried every 2 s for as long as it followed)."""
    primary, replica, _ = written
    last = json.loads(ok(replica, "events", "--json").splitlines()[-1])["position"]
    log_from = standby.standby_log.stat().st_size
    follower = subprocess.Popen(
        gormes_command(replica, "tail", "--follow", "--json", "--after", str(last - 1)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(),
    )
    try:
        assert json.loads(read_line(follower, 20))["position"] == last  # it is following
        ok(primary, "append", "notes-2", "note.added", "--data", '{"text": "after the follower started"}')
        seen = json.loads(read_line(follower, 10))  # a poll every 0.5 s finds it
        assert (seen["position"], seen["stream"], seen["data"]["text"]) == (
            last + 1, "notes-2", "after the follower started")
    finally:
        follower.terminate()
        _, err = follower.communicate(timeout=20)
    assert follower.returncode == 0, err
    assert err == ""
    assert standby_errors(standby, log_from) == []  # no LISTEN tried (and retried) there
