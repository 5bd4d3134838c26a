"""Calls started with no outcome recorded (decision 0062): paired by
`started_position`, listed by `gormes audit unfinished`, warned about by the
doctor's `audit.unfinished` once older than their operation's timeout."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from cli_helpers import assert_one_line_error, run_gormes

from gormes.audit_export import AUDIT_SCHEMA_VERSION, AuditRecord
from gormes.audit_unfinished import NO_OUTCOME, described, maybe_running, unfinished
from gormes.events.codec import default_codec
from gormes.events.sqlite import SQLiteEventStore
from gormes.health import DoctorContext, Thresholds
from gormes.health.audit import check_unfinished
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller
from gormes.tools.builtin import default_registry

T0 = 1_796_000_000.0  # seconds since the epoch
OPERATOR = Caller(trust="operator", id="cli")


def record(position: int, outcome: str, started_position: int | None = None, operation: str = "shell.run",
           at: int = int(T0 * 1000)) -> AuditRecord:
    return AuditRecord(
        schema_version=AUDIT_SCHEMA_VERSION, position=position, stream="audit-2026-12-01",
        time="2026-12-01T00:00:00.000Z", at=at, operation=operation, audit_kind="shell.exec", caller="cli",
        trust="operator", run_id=None, job_id=None, allowed=True, outcome=outcome, error=None,
        duration_ms=0.0, input_sha256=None, mutating=True, started_position=started_position,
    )


def test_a_started_record_no_outcome_names_is_unfinished():
    records = [record(1, "started"), record(2, "ok", started_position=1), record(3, "started"),
               record(4, "started"), record(5, "error", started_position=4), record(6, "ok")]
    assert [r.position for r in unfinished(records)] == [3]
    assert unfinished([record(7, "ok", started_position=1)]) == []  # its start before the window read


def test_a_call_younger_than_its_timeout_may_still_run():
    started = record(1, "started", at=int(T0 * 1000))
    timeouts = {"shell.run": 300.0}
    assert maybe_running(started, timeouts, int(T0 * 1000) + 299_000)
    assert not maybe_running(started, timeouts, int(T0 * 1000) + 301_000)
    assert not maybe_running(started, {}, int(T0 * 1000))  # an operation not known here


def test_the_line_says_started_no_outcome_recorded():
    line = described(record(3, "started"))
    assert line.endswith(f"position 3: {NO_OUTCOME}") and "shell.run  by cli (operator)" in line


async def killed_mid_call(db: Path, now: float) -> None:
    """A shell.run whose `started` committed and whose outcome never did (its
    process died): the outcome append is what fails here."""

    async with SQLiteEventStore.open(db) as store:
        executor = Executor(default_registry(), store, clock=lambda: now, shell_enabled=True)

        async def never(request, output, error):
            raise SystemExit("killed")

        try:
            await executor.call("shell.run", {"argv": ["true"]}, OPERATOR, audit=never)
        except SystemExit:
            pass
        await executor.call("shell.run", {"argv": ["true"]}, OPERATOR)  # one that finished


def doctor_says(db: Path, now: float):
    conn = sqlite3.connect(db)
    try:
        return check_unfinished(DoctorContext(
            path=db, conn=conn, now=now, thresholds=Thresholds(), codec=default_codec,
            operations=default_registry().list(), run_handlers=(),
        ))
    finally:
        conn.close()


async def test_the_doctor_warns_once_the_call_is_older_than_its_timeout(db_path: Path):
    await killed_mid_call(db_path, T0)
    assert doctor_says(db_path, T0 + 10).status == "ok"  # shell.run may run 300 s
    late = doctor_says(db_path, T0 + 400)
    assert late.status == "warn" and late.message.startswith("1 call(s) started with no outcome recorded: shell.run")
    assert doctor_says(db_path, T0 + 8 * 86400).status == "ok"  # the doctor looks a week back


async def test_audit_unfinished_lists_it_in_text_and_json(db_path: Path):
    await killed_mid_call(db_path, T0)
    text = run_gormes(db_path, "audit", "unfinished")
    assert text.returncode == 0, text.stderr
    [line] = text.stdout.splitlines()
    assert "shell.run  by cli (operator)" in line and line.endswith(NO_OUTCOME)
    [listed] = [json.loads(x) for x in run_gormes(db_path, "audit", "unfinished", "--json").stdout.splitlines()]
    assert (listed["operation"], listed["outcome"], listed["started_position"]) == ("shell.run", "started", None)
    assert run_gormes(db_path, "audit", "unfinished", "--since", "2099-01-01").stdout == "no call without its outcome\n"


def test_a_bad_since_is_one_error_line(db_path: Path):
    done = run_gormes(db_path, "audit", "unfinished", "--since", "soon")
    assert done.returncode == 2 and "invalid time 'soon'" in assert_one_line_error(done)
