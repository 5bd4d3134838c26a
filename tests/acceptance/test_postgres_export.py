"""`gormes export` (whole log, --type, --stream, --after, --out) and `gormes
audit export` on PostgreSQL: the real CLI in subprocesses. The same events, with
the same clock, are written to an SQLite file and to a fresh Postgres schema;
every export must print the same bytes from both, GLOB patterns included."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from pg_helpers import fresh_schema, url_for_schema

from cli_helpers import assert_one_line_error, cli_env, gormes_command, json_lines
from gormes.events.audit import OperationAudited, audit_stream
from gormes.events.notes import NoteAdded
from gormes.events.open import open_store

T0 = 1_750_000_000.0
DAY = 86400.0
STREAMS = ["job-1", "job-2", "job-10", "JOB-3", "run-1", "a%b", "a_b", "axb", "it's", "notes"]


def _audit(operation: str, kind: str, outcome: str, at_s: float) -> OperationAudited:
    return OperationAudited(operation=operation, audit_kind=kind, caller="operator", trust="operator",
                            allowed=outcome != "denied", outcome=outcome, duration_ms=1.0,
                            at=int(at_s * 1000))


AUDITS = [
    _audit("time.now", "time.read", "ok", T0 - 2 * DAY),
    _audit("fs.read", "fs.read", "invalid", T0 - DAY - 60),
    _audit("shell.run", "shell.exec", "denied", T0 - 3600),
    _audit("fs.read", "fs.read", "ok", T0 - 60),
]


def write_history(target: str | Path) -> None:
    async def main() -> None:
        async with open_store(target, clock=lambda: T0) as store:
            for i, stream in enumerate(STREAMS * 2):
                await store.append(stream, [NoteAdded(text=f"note {i}", tags=[stream])])
            for event in AUDITS:
                await store.append(audit_stream(event.at), [event])

    trio.run(main)


@pytest.fixture
def targets(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """(the Postgres URL, the SQLite file), holding the same history."""
    db = tmp_path / "gormes.db"
    write_history(db)
    with fresh_schema() as schema:
        url = url_for_schema(schema)
        write_history(url)
        yield url, db


def gormes(db: str | Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(gormes_command(db, *args), capture_output=True, text=True,
                          env=cli_env(), cwd=cwd, timeout=60)


def same_on_both(targets: tuple[str, Path], *args: str, cwd: Path) -> str:
    url, db = targets
    pg, lite = gormes(url, *args, cwd=cwd), gormes(db, *args, cwd=cwd)
    assert pg.returncode == 0, pg.stderr
    assert lite.returncode == 0, lite.stderr
    assert pg.stdout == lite.stdout, args
    return pg.stdout


def test_the_whole_log_is_the_same_bytes_as_from_sqlite(targets, tmp_path: Path):
    lines = json_lines(same_on_both(targets, "export", cwd=tmp_path))
    assert [line["position"] for line in lines] == list(range(1, 2 * len(STREAMS) + len(AUDITS) + 1))
    assert lines[0]["data"] == {"type": "note.added", "text": "note 0", "tags": ["job-1"], "author": ""}
    after = json_lines(same_on_both(targets, "export", "--after", "17", cwd=tmp_path))
    assert [line["position"] for line in after] == list(range(18, 25))


@pytest.mark.parametrize(
    ("option", "pattern", "streams"),
    [
        ("--stream", "job-*", {"job-1", "job-2", "job-10"}),
        ("--stream", "job-?", {"job-1", "job-2"}),
        ("--stream", "job-[12]*", {"job-1", "job-2", "job-10"}),
        ("--stream", "[^j]*-*", {"JOB-3", "run-1", *(audit_stream(a.at) for a in AUDITS)}),
        ("--stream", "a?b", {"a%b", "a_b", "axb"}),  # ? is one character, not LIKE's _
        ("--stream", "a%b", {"a%b"}),  # % is itself
        ("--stream", "it's", {"it's"}),
        ("--stream", "JOB-*", {"JOB-3"}),  # case-sensitive, as GLOB
        ("--type", "note.*", set(STREAMS)),
        ("--type", "audit.operation", None),
        ("--type", "*.nothing", set()),
    ],
)
def test_patterns_match_as_sqlite_globs_do(targets, tmp_path: Path, option: str, pattern: str,
                                           streams: set[str] | None):
    lines = json_lines(same_on_both(targets, "export", option, pattern, cwd=tmp_path))
    if streams is None:
        assert {line["type"] for line in lines} == {"audit.operation"} and len(lines) == len(AUDITS)
    else:
        assert {line["stream"] for line in lines} == streams


def test_several_patterns_and_out_file(targets, tmp_path: Path):
    url, db = targets
    args = ("export", "--stream", "job-?", "--stream", "notes", "--type", "note.added")
    pg_file, lite_file = tmp_path / "pg.jsonl", tmp_path / "lite.jsonl"
    assert gormes(url, *args, "--out", str(pg_file), cwd=tmp_path).returncode == 0
    assert gormes(db, *args, "--out", str(lite_file), cwd=tmp_path).returncode == 0
    assert pg_file.read_bytes() == lite_file.read_bytes()
    assert {line["stream"] for line in json_lines(pg_file.read_text())} == {"job-1", "job-2", "notes"}


def test_audit_export_filters_as_on_sqlite(targets, tmp_path: Path):
    every = json_lines(same_on_both(targets, "audit", "export", cwd=tmp_path))
    assert [r["operation"] for r in every] == ["time.now", "fs.read", "shell.run", "fs.read"]
    since = "2025-06-14T00:00:00Z"  # T0 is 2025-06-15T15:06:40Z
    window = json_lines(same_on_both(targets, "audit", "export", "--since", since,
                                     "--until", "2025-06-15T15:00:00Z", cwd=tmp_path))
    assert [(r["operation"], r["outcome"]) for r in window] == [("fs.read", "invalid"),
                                                                 ("shell.run", "denied")]
    kinds = json_lines(same_on_both(targets, "audit", "export", "--kind", "fs.read", cwd=tmp_path))
    assert [r["outcome"] for r in kinds] == ["invalid", "ok"]
    assert [r["stream"] for r in kinds] == [audit_stream(a.at) for a in AUDITS if a.audit_kind == "fs.read"]


def test_bad_input_and_a_schema_without_gormes_are_one_line(targets, tmp_path: Path):
    url, _ = targets
    bad = gormes(url, "audit", "export", "--since", "yesterday-ish", cwd=tmp_path)
    assert "invalid time 'yesterday-ish'" in assert_one_line_error(bad) and bad.returncode == 2
    with fresh_schema() as empty:
        for args in (("export",), ("export", "--type", "job.*"), ("audit", "export")):
            done = gormes(url_for_schema(empty), *args, cwd=tmp_path)
            assert "no gormes database at" in assert_one_line_error(done), args
            assert done.returncode == 1
