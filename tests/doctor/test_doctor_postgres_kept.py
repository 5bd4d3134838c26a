"""The doctor's log summary kept in the PostgreSQL schema (decision 0084), on the real server.

A second run folds only what was appended since the first (a row changed below
the kept position is not read again; `--full` reads it), and says what a full
fold says. A role that may not create, read or write the `doctor_scan` table gets
the same report: it folds from position 0 and keeps nothing, quietly.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from pathlib import Path

import psycopg
import pytest
from doctor_helpers import T0, check, doctor
from pg_helpers import PG_URL, admin, backend_store, fresh_schema, url_for_schema
from test_doctor_postgres import Clock, _started

from gormes.events.base import UnknownEvent
from gormes.events.memory import Origin, Provenance, evidence_hash, fact_id
from gormes.events.memory import MemoryFactRecorded as Fact
from gormes.events.notes import NoteAdded
from gormes.events.postgres_sql import PortableConnection
from gormes.events.runs import RunClockRead, RunCompleted
from gormes.health import module_exists, scan

SCOPE = "project:default"
VARY = {"store.server", "disk.database_size"}  # connections in use, bytes: not the log's


def _fact(run_id: str, text: str) -> Fact:
    provenance = Provenance(origin=Origin(run_id=run_id), kind="extracted", scope=SCOPE, first_seen=T0,
                            last_seen=T0, evidence_hash=evidence_hash(text))
    return Fact(fact_id=fact_id(SCOPE, text), text=text, provenance=provenance, review_state="trusted")


def _kept(url: str) -> scan.LogSummary | None:
    with psycopg.connect(url, autocommit=True) as conn:
        return scan.load(PortableConnection(conn))


def _doctor(url: str, **kwargs):
    return doctor(url, modules=module_exists, **kwargs)


def _said(report) -> dict[str, tuple[str, str]]:
    return {c.name: (c.status, c.message) for c in report.checks if c.name not in VARY}


async def test_a_second_run_reads_only_what_was_appended_and_says_what_a_full_one_does(db_path: Path):
    clock = Clock(T0 - 600)
    async with backend_store("postgres", db_path, clock=clock) as store:
        url, schema = url_for_schema(store.schema), store.schema
        await store.append("run-a", [_started("a"), RunClockRead(seq=1, value=1.0)])  # ends after the first run
        await store.append("run-b", [_started("b"), RunClockRead(seq=1, value=1.0), RunCompleted()])
        await store.append("notes-1", [NoteAdded(text=f"note {i}") for i in range(5)])
        _doctor(url, offline=True)
        first = _kept(url)
        assert first is not None and first.position == await store.head()
        assert "run-a"[4:] in first.open_runs

        # a row below the kept position changed outside gormes, then more appended
        admin(f'UPDATE "{schema}".events SET type = %s WHERE stream = %s AND version = 3', ("plugin.old", "notes-1"))
        await store.append("run-a", [RunClockRead(seq=3, value=2.0), RunCompleted()])  # seq 2 missing
        await store.append("run-c", [_started("c", handler="who.knows")])
        await store.append("memory-" + SCOPE, [_fact("b", "Ada works at the lab")])
        await store.append("plugin-1", [UnknownEvent(type="plugin.new", data={"a": 1}, schema_version=1)])
        second = _doctor(url, offline=True)
        kept = _kept(url)
        assert kept is not None and kept.position == await store.head()
        types = check(second, "store.event_types").message
        assert "plugin.new (1)" in types and "plugin.old" not in types  # the changed row was not read
        assert "plugin.old (1)" in check(_doctor(url, offline=True, full=True), "store.event_types").message

        # with the row as it was, a full fold of the whole log gives the same summary and report
        admin(f'UPDATE "{schema}".events SET type = %s WHERE stream = %s AND version = 3', ("note.added", "notes-1"))
        full = _doctor(url, offline=True, full=True)
        assert _kept(url) == kept
        assert _said(second) == _said(full)
        # the runs that span both runs of the doctor are judged as one pass judges them
        replay = check(second, "replay.runs").message
        assert replay.startswith("2 run(s) cannot be replayed exactly") and "a: observation seq has gaps" in replay
        assert "who.knows" in replay
        # run b (completed in the first part) was extracted in the second; run a was not
        assert "1 completed run(s) not extracted into memory, the oldest (a)" in \
            check(second, "memory.extraction").message


def _gormes(url: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    from cli_helpers import cli_env, gormes_command

    return subprocess.run(gormes_command(url, *args), capture_output=True, text=True, env=cli_env(),
                          cwd=tmp_path, timeout=60)


def _report(url: str, tmp_path: Path, *args: str) -> tuple[int, dict[str, tuple[str, str]], str]:
    done = _gormes(url, tmp_path, "doctor", "--json", "--offline", *args)
    assert "Traceback" not in done.stderr, done.stderr
    checks = json.loads(done.stdout)["checks"]
    # store.schema's message names the URL, and so the role
    said = {c["name"]: (c["status"], c["message"]) for c in checks if c["name"] not in VARY | {"store.schema"}}
    assert next(c for c in checks if c["name"] == "store.schema")["status"] == "ok"
    return done.returncode, said, \
        done.stderr


def test_a_role_that_may_not_write_the_table_gets_a_correct_report_and_keeps_nothing(tmp_path: Path):
    with fresh_schema() as schema:
        owner = url_for_schema(schema)
        role = f"gormes_doc_{secrets.token_hex(4)}"
        reader = url_for_schema(schema).replace("://postgres@", f"://{role}@", 1)
        if reader == owner:
            pytest.skip(f"cannot name another role in {PG_URL}")
        admin(f'CREATE ROLE "{role}" LOGIN')
        try:
            for n in range(3):
                done = _gormes(owner, tmp_path, "append", f"notes-{n}", "note.added", "--data",
                               json.dumps({"text": f"note {n}"}))
                assert done.returncode == 0, done.stderr
            admin(f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')
            admin(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO "{role}"')

            # no table yet, and the role may not create one in the schema
            code, said, err = _report(reader, tmp_path)
            assert err == ""
            assert admin("SELECT to_regclass(%s)", (f'"{schema}".doctor_scan',)) == [(None,)]
            assert (code, said) == _report(owner, tmp_path, "--full")[:2]

            # the owner keeps a summary; the role may not read the table, then may read but not write it
            assert _report(owner, tmp_path)[0] == 0
            [(kept,)] = admin(f'SELECT position FROM "{schema}".doctor_scan')
            for grant in (None, f'GRANT SELECT ON "{schema}".doctor_scan TO "{role}"'):
                if grant:
                    admin(grant)
                done = _gormes(owner, tmp_path, "append", "notes-9", "note.added", "--data", '{"text": "more"}')
                assert done.returncode == 0, done.stderr
                code, said, err = _report(reader, tmp_path)
                assert err == ""  # what it could not keep, it skipped quietly
                assert admin(f'SELECT position FROM "{schema}".doctor_scan') == [(kept,)]
                assert admin(f'SELECT max(position) FROM "{schema}".events')[0][0] > kept
                assert (code, said) == _report(owner, tmp_path, "--full")[:2]
                [(kept,)] = admin(f'SELECT position FROM "{schema}".doctor_scan')
        finally:
            admin(f'DROP OWNED BY "{role}"')
            admin(f'DROP ROLE "{role}"')


@pytest.fixture(autouse=True)
def _acceptance_helpers_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "acceptance"))


def test_after_a_retention_the_kept_summary_is_folded_again(tmp_path: Path):
    """A retention deletes rows the kept summary counted; on PostgreSQL its role may
    not be the doctor's (it may not delete the doctor's row), so the fold itself
    sees the `log.retained` after the kept position and folds the log again."""
    from cli_helpers import REPO

    fixtures = REPO / "replay_fixtures"
    manifest = json.loads((fixtures / "manifest.json").read_text())
    with fresh_schema() as schema:
        url = url_for_schema(schema)
        for name in ("subagents", "tool_error"):
            done = _gormes(url, tmp_path, "import", str(fixtures / manifest[name]["file"]))
            assert done.returncode == 0, done.stderr
        before = _report(url, tmp_path)[1]
        done = _gormes(url, tmp_path, "retain", "--older-than", "0s", "--archive", str(tmp_path / "archive"))
        assert done.returncode == 0, done.stderr
        code, said, _ = _report(url, tmp_path)
        assert said != before  # the retention is seen (so the comparison means something)
        code_full, full, _ = _report(url, tmp_path, "--full")
        del said["store.retention"], full["store.retention"]  # the horizon's age, in seconds
        assert (code, said) == (code_full, full)
