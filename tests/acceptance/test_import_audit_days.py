"""The restore path with audit records (decision 0091), as processes: an export
imported into a fresh database, with or without --live-work, retried after a
refusal, leaves every audit chain intact; a day the file and this log both hold
goes onto a copy of the day (`audit-<day>~<k>`), never after this log's own
records of it.

A user audit's finding: a refused import sealed its record onto today's audit
stream, so the retry the refusal advised (`--live-work`) collided with the file's
own records of today ("already imported?"), and the collision's hint
(`--ignore-versions`) appended them after the refusal's record: `audit verify`
reported the day BROKEN."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from cli_helpers import assert_one_line_error, json_lines, run_gormes
from pg_helpers import pg_rows, schema_url  # noqa: F401 (the `url` fixture)


def ok(result):
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def events(db: Path) -> list[tuple]:
    conn = sqlite3.connect(db)
    try:
        # the imports' own records of themselves (`log.imported`, decision 0087) left out
        return conn.execute("SELECT stream, version, type, data FROM events WHERE stream != 'log-imports'"
                            " ORDER BY position").fetchall()
    finally:
        conn.close()


def verified(db: Path | str) -> list[dict]:
    days = json_lines(ok(run_gormes(db, "audit", "verify", "--json")).stdout)
    assert days and all(d["intact"] for d in days), days
    return days


def exported(tmp_path: Path, name: str = "l3") -> tuple[Path, list[tuple]]:
    """A live host's log holding a waiting job and today's audit record of it."""
    live = tmp_path / f"{name}.db"
    ok(run_gormes(live, "jobs", "submit", "resize"))
    out = tmp_path / f"{name}.jsonl"
    ok(run_gormes(live, "export", "--out", str(out)))
    return out, events(live)


def test_a_restore_retried_after_a_refusal_imports_and_the_audit_verifies(tmp_path: Path) -> None:
    out, source = exported(tmp_path)
    db = tmp_path / "new.db"
    refused = run_gormes(db, "import", str(out))
    assert refused.returncode == 2 and "Nothing was imported" in assert_one_line_error(refused)
    [(refusal_stream, version, kind, _)] = events(db)  # the refusal is audited, on today's day
    assert (version, kind) == (1, "audit.operation")

    ok(run_gormes(db, "import", str(out), "--live-work"))  # as the refusal advised
    days = verified(db)
    assert [d["stream"] for d in days] == [refusal_stream, refusal_stream + "~1"]
    restored = events(db)
    file_audit = [r for r in source if r[0].startswith("audit-")]
    assert [(s.removesuffix("~1"), v, t, d) for s, v, t, d in restored if s == refusal_stream + "~1"] == file_audit
    assert [r for r in restored if not r[0].startswith("audit-")] == [r for r in source if not r[0].startswith("audit-")]
    # the import's own record names the day where its records went: the copy (0087 with 0091)
    with sqlite3.connect(db) as conn:
        [(marker,)] = conn.execute("SELECT data FROM events WHERE type = 'log.imported'").fetchall()
    [day] = json.loads(marker)["audit_days"]
    assert (day["stream"], day["first_version"], day["last_version"]) == (refusal_stream + "~1", 1, len(file_audit))
    assert [d["origin"] for d in days] == ["here", "imported"], days  # verify names the copy imported

    again = run_gormes(db, "import", str(out), "--live-work")
    assert again.returncode == 2 and "already imported?" in assert_one_line_error(again)
    ok(run_gormes(db, "import", str(out), "--live-work", "--ignore-versions"))  # as that error advises
    days = verified(db)
    assert [d["stream"] for d in days] == [refusal_stream, refusal_stream + "~1", refusal_stream + "~2"]


def test_the_ignore_versions_retry_after_a_refusal_keeps_the_chain(tmp_path: Path) -> None:
    out, _ = exported(tmp_path)
    db = tmp_path / "new.db"
    assert run_gormes(db, "import", str(out)).returncode == 2
    ok(run_gormes(db, "import", str(out), "--live-work", "--ignore-versions"))
    verified(db)


def test_a_restore_into_a_fresh_database_keeps_streams_and_versions(tmp_path: Path) -> None:
    out, source = exported(tmp_path)
    db = tmp_path / "new.db"
    ok(run_gormes(db, "import", str(out), "--live-work"))
    restored = events(db)
    assert restored[: len(source)] == source  # the file's days on their own streams
    [(stream, version, _, _)] = restored[len(source):]  # the import's record, chained after the file's
    assert (stream, version) == (source[-1][0], source[-1][1] + 1)
    verified(db)

    # an export of a restored log holding a copy restores the same again
    out2 = tmp_path / "again.jsonl"
    refused = tmp_path / "refused.db"
    assert run_gormes(refused, "import", str(out)).returncode == 2
    ok(run_gormes(refused, "import", str(out), "--live-work"))
    ok(run_gormes(refused, "export", "--out", str(out2)))
    third = tmp_path / "third.db"
    ok(run_gormes(third, "import", str(out2), "--live-work"))
    assert events(third)[: len(events(refused))] == events(refused)
    verified(third)


def test_a_day_this_log_already_holds_goes_onto_a_copy_and_twice_is_refused(tmp_path: Path) -> None:
    live = tmp_path / "live.db"
    ok(run_gormes(live, "jobs", "submit", "resize"))
    audit_only = tmp_path / "audit.jsonl"
    ok(run_gormes(live, "export", "--stream", "audit-*", "--out", str(audit_only)))
    db = tmp_path / "new.db"
    ok(run_gormes(db, "jobs", "submit", "other"))  # an operation of this log's own, today
    ok(run_gormes(db, "import", str(audit_only)))
    [today, copy] = [d["stream"] for d in verified(db)]
    assert copy == today + "~1"
    twice = run_gormes(db, "import", str(audit_only))
    assert twice.returncode == 2 and "already imported?" in assert_one_line_error(twice)
    verified(db)


def test_the_restore_retried_after_a_refusal_on_postgres(tmp_path: Path, url: str) -> None:
    out, source = exported(tmp_path)
    refused = run_gormes(url, "import", str(out))
    assert refused.returncode == 2 and "Nothing was imported" in assert_one_line_error(refused)
    ok(run_gormes(url, "import", str(out), "--live-work"))
    days = verified(url)
    today = days[0]["stream"]
    assert [d["stream"] for d in days] == [today, today + "~1"]
    copied = pg_rows(url, f"SELECT version, data FROM events WHERE stream = '{today}~1' ORDER BY version")
    assert [(v, json.loads(d) if isinstance(d, str) else d) for v, d in copied] == [
        (v, json.loads(d)) for s, v, _, d in source if s == today]
