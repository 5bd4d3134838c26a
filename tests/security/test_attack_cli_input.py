"""Attacks on the CLI's input and output, made as an outsider would: the real
`gormes` in subprocesses, a real SQLite file (and the real PostgreSQL where the
input path differs), a real full disk (a tiny tmpfs).

- `--out` never replaces or writes through a FIFO, a symlink or a device node
  (`export`, `export RUN`, `audit export`, `memory mirror --out DIR`).
- Numbers out of range, JSON nested past the limit, a full disk: one
  `gormes: error:` line, never a traceback, nothing recorded changed.
- Strings a gateway supplies (job names, facts, stream names) never reach the
  operator's terminal as control sequences or rich markup; `--json` keeps them.
- `append` refuses unknown fields and audit records; a full disk is called one.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pg_helpers import fresh_schema, url_for_schema

from cli_helpers import assert_one_line_error, cli_env, gormes_command, mounted_tmpfs, run_gormes, write_notes

from gormes.events.json_nesting import MAX_INPUT_NESTING

OSC_TITLE = "\x1b]0;pwned-title\x07"
OSC_CLIPBOARD = "\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07"
CSI_CLEAR = "\x1b[2J\x1b[H"
C1_CSI = "\x9b31m"
HOSTILE = f"job{OSC_TITLE}{OSC_CLIPBOARD}{CSI_CLEAR}{C1_CSI}\x7fend"
TOO_BIG = str(10**23)


def no_controls(text: str) -> bool:
    """No ESC, BEL, DEL or C1 character: nothing a terminal would act on."""
    return not any(c in text for c in "\x1b\x07\x7f") and not any("\x80" <= c <= "\x9f" for c in text)


def rebuild_check(db: Path | str) -> None:
    checked = run_gormes(db, "projections", "rebuild", "--check")
    assert checked.returncode == 0, (checked.stdout, checked.stderr)


def events_json(db: Path | str) -> list[dict]:
    listed = run_gormes(db, "events", "--json")
    assert listed.returncode == 0, listed.stderr
    return [json.loads(line) for line in listed.stdout.splitlines()]


def logged_events(db: Path | str) -> list[dict]:
    """The events but the audit records (a refused append is now one of those)."""
    return [e for e in events_json(db) if not e["stream"].startswith("audit-")]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "g.db"
    write_notes(path, [("notes-1", "first"), ("notes-1", "second")])
    return path


@pytest.fixture
def pg_url() -> Iterator[str]:
    with fresh_schema() as name:
        yield url_for_schema(name)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A tiny tmpfs (a disk that really fills)."""
    yield from mounted_tmpfs(tmp_path, "256k")


def fill(directory: Path) -> None:
    """Fill the file system holding `directory` to the last byte."""
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)


def refused_out(result: subprocess.CompletedProcess[str]) -> str:
    line = assert_one_line_error(result)
    assert result.returncode == 2, result
    assert "nothing written" in line, line
    return line


# -- hole 10: --out never replaces or writes through a FIFO, symlink or device -------


@pytest.mark.parametrize("command", [("export",), ("audit", "export")])
def test_out_refuses_a_fifo(db: Path, tmp_path: Path, command: tuple[str, ...]):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    refused_out(run_gormes(db, *command, "--out", str(fifo)))
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert not [p for p in tmp_path.iterdir() if "partial" in p.name]  # no temp file left
    rebuild_check(db)


@pytest.mark.parametrize("command", [("export",), ("audit", "export")])
def test_out_refuses_a_symlink_and_leaves_its_target_alone(db: Path, tmp_path: Path,
                                                          command: tuple[str, ...]):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    link = tmp_path / "out.jsonl"
    link.symlink_to(victim)
    refused_out(run_gormes(db, *command, "--out", str(link)))
    assert link.is_symlink() and os.readlink(link) == str(victim)
    assert victim.read_text() == "precious\n"


def test_out_refuses_a_device_node(db: Path, tmp_path: Path):
    if os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    null = tmp_path / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a second /dev/null
    refused_out(run_gormes(db, "export", "--out", str(null)))
    assert stat.S_ISCHR(os.lstat(null).st_mode)


def test_out_of_a_run_export_refuses_a_symlink(tmp_path: Path):
    db = tmp_path / "g.db"
    script = tmp_path / "model.json"
    script.write_text(json.dumps({"agents": [{"replies": [{"text": "done"}]}]}))
    ran = run_gormes(db, "run", "agent", "--prompt", "hi", "--model", f"scripted:{script}", "--json")
    assert ran.returncode == 0, ran.stderr
    run_id = json.loads(ran.stdout)["run_id"]
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    link = tmp_path / "run.jsonl"
    link.symlink_to(victim)
    refused_out(run_gormes(db, "export", run_id, "--out", str(link)))
    assert victim.read_text() == "precious\n" and link.is_symlink()


def test_out_still_writes_a_new_file_and_replaces_a_regular_one(db: Path, tmp_path: Path):
    new = tmp_path / "new.jsonl"
    assert run_gormes(db, "export", "--out", str(new)).returncode == 0
    assert len(new.read_text().splitlines()) == 2
    old = tmp_path / "old.jsonl"
    old.write_text("stale\n")
    assert run_gormes(db, "export", "--out", str(old)).returncode == 0
    assert old.read_text() == new.read_text()


def test_memory_mirror_does_not_write_through_symlinks_in_its_dir(db: Path, tmp_path: Path):
    assert run_gormes(db, "memory", "add-fact", "likes tea").returncode == 0
    out = tmp_path / "mirror"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (out / "USER.md").symlink_to(victim)
    refused_out(run_gormes(db, "memory", "mirror", "--out", str(out)))
    assert victim.read_text() == "precious\n" and (out / "USER.md").is_symlink()


def test_memory_mirror_does_not_write_through_a_planted_temp_symlink(db: Path, tmp_path: Path):
    """Own attack: the mirror wrote `USER.md.tmp` then renamed it; a symlink
    planted under that name made it write the page into the link's target."""
    assert run_gormes(db, "memory", "add-fact", "likes tea").returncode == 0
    out = tmp_path / "mirror"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (out / "USER.md.tmp").symlink_to(victim)
    mirrored = run_gormes(db, "memory", "mirror", "--out", str(out))
    assert victim.read_text() == "precious\n"
    if mirrored.returncode == 0:
        assert "likes tea" in (out / "USER.md").read_text()
    else:
        refused_out(mirrored)


def test_memory_mirror_does_not_follow_a_symlinked_entities_dir(db: Path, tmp_path: Path):
    """Own attack: `DIR/entities` swapped for a symlink sends the entity pages
    (and the removal of stale ones) outside DIR."""
    assert run_gormes(db, "memory", "add-entity", "Ada").returncode == 0
    out = tmp_path / "mirror"
    out.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.md").write_text("mine\n")
    (out / "entities").symlink_to(elsewhere)
    mirrored = run_gormes(db, "memory", "mirror", "--out", str(out))
    assert sorted(p.name for p in elsewhere.iterdir()) == ["keep.md"], mirrored
    assert (elsewhere / "keep.md").read_text() == "mine\n"
    if mirrored.returncode != 0:
        refused_out(mirrored)


def test_out_refuses_a_dangling_symlink(db: Path, tmp_path: Path):
    """Own attack: a link to a file that does not exist yet (say ~/.bashrc of
    someone else) must not be created through."""
    target = tmp_path / "not-yet"
    link = tmp_path / "out.jsonl"
    link.symlink_to(target)
    refused_out(run_gormes(db, "export", "--out", str(link)))
    assert not target.exists() and link.is_symlink()


# -- hole 11: one line, never a traceback --------------------------------------------


@pytest.mark.parametrize("args", [
    ("events", "--after", TOO_BIG), ("events", "--limit", TOO_BIG),
    ("events", "--after", str(2**63)), ("tail", "--after", TOO_BIG),
    ("export", "--after", TOO_BIG),
    ("append", "notes-1", "note.added", "--data", '{"text": "x"}', "--expected-version", TOO_BIG),
])
def test_huge_numbers_are_one_line(db: Path, args: tuple[str, ...]):
    result = run_gormes(db, *args)
    line = assert_one_line_error(result)
    assert result.returncode == 2, result
    assert "9223372036854775807" in line, line
    rebuild_check(db)


NOT_UTF8 = os.fsdecode(b"\xff\xfe")  # as Python holds bytes the locale cannot decode


@pytest.mark.parametrize("args", [
    ("append", NOT_UTF8, "note.added", "--data", '{"text": "a"}'),
    ("events", "--stream", NOT_UTF8), ("jobs", "get", NOT_UTF8), ("runs", "show", NOT_UTF8),
    ("jobs", "submit", NOT_UTF8),
])
def test_an_argument_that_is_not_utf8_is_one_line_and_records_nothing(db: Path, args: tuple[str, ...]):
    before = events_json(db)
    result = run_gormes(db, *args)
    line = assert_one_line_error(result)
    assert result.returncode == 2, result
    assert line == "gormes: error: an argument is not valid UTF-8: '\\udcff\\udcfe'", line
    assert events_json(db) == before  # refused before it became a call: not even an audit record


def test_a_database_url_from_the_environment_that_is_not_utf8_is_one_line():
    """The arguments are checked before the command runs; GORMES_DB reaches the
    PostgreSQL driver as it is, whose encoding error is the same one line."""
    url = os.fsdecode(b"postgresql://127.0.0.1/test?application_name=\xff")
    env = {**cli_env(), "GORMES_DB": url}
    result = subprocess.run([sys.executable, "-m", "gormes", "jobs", "submit", "echo"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result
    assert assert_one_line_error(result) == "gormes: error: text that is not valid UTF-8: '\\udcff'"


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", [65, 100_000])
def test_deeply_nested_data_is_refused_in_one_line(db: Path, depth: int):
    before = logged_events(db)
    data = '{"text": "x", "extra": ' + deep(depth) + "}"
    line = assert_one_line_error(run_gormes(db, "append", "notes-1", "note.added", "--data", "-",
                                            input=data))
    assert "nested" in line and "64" in line, line
    assert logged_events(db) == before
    rebuild_check(db)


def test_deeply_nested_operation_input_is_invalid_from_any_caller(db: Path):
    """Own attack: `ops call` hands raw JSON straight to the executor; 50,000 levels
    made msgspec raise RecursionError there (a traceback, audited `error`)."""
    before = logged_events(db)
    result = run_gormes(db, "ops", "call", "time.now", '{"x": ' + deep(50_000) + "}")
    line = assert_one_line_error(result)
    assert result.returncode == 2 and f"nested deeper than {MAX_INPUT_NESTING}" in line, line
    audits = [e for e in events_json(db) if e["type"] == "audit.operation"]
    assert [(a["data"]["operation"], a["data"]["outcome"]) for a in audits] == [("time.now", "invalid")]
    assert logged_events(db) == before
    rebuild_check(db)


def test_nesting_up_to_the_limit_is_accepted(db: Path):
    # The input object is one level: its data may nest one less (decision 0074).
    data = json.dumps({"name": "n", "data": json.loads(deep(MAX_INPUT_NESTING - 1))})
    result = run_gormes(db, "jobs", "submit", "n", "--data", deep(MAX_INPUT_NESTING - 1))
    assert result.returncode == 0, result.stderr
    assert data  # the same depth through import:
    line = json.dumps({"stream": "s", "type": "note.added", "data": {"text": deep(3)}})
    assert run_gormes(db, "import", "-", input=line + "\n").returncode == 0


def test_deeply_nested_import_is_refused_in_one_line(db: Path, tmp_path: Path):
    source = tmp_path / "deep.jsonl"
    good = json.dumps({"stream": "s", "type": "note.added", "data": {"text": "ok"}})
    source.write_text(good + "\n" + '{"stream": "s", "type": "note.added", "data": {"text": "x", "y": '
                      + deep(100_000) + "}}\n")
    before = logged_events(db)
    line = assert_one_line_error(run_gormes(db, "import", str(source)))
    assert "line 2" in line and "nested" in line, line
    assert logged_events(db) == before  # line 1 was streamed in and undone with the refusal
    refused = [e["data"] for e in events_json(db) if e["type"] == "audit.operation"
               and e["data"]["operation"] == "events.import"]
    assert [(a["outcome"], "line 2" in (a["error"] or "")) for a in refused] == [("invalid", True)]
    rebuild_check(db)


def test_deeply_nested_input_is_refused_on_postgres(pg_url: str, tmp_path: Path):
    def gormes(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(gormes_command(pg_url, *args), input=input, capture_output=True,
                              text=True, env=cli_env(), timeout=60, cwd=tmp_path)

    assert gormes("append", "s", "note.added", "--data", '{"text": "kept"}').returncode == 0
    data = '{"text": "x", "extra": ' + deep(100_000) + "}"
    line = assert_one_line_error(gormes("append", "s", "note.added", "--data", "-", input=data))
    assert "nested" in line
    line = assert_one_line_error(gormes("import", "-", input=json.dumps(
        {"stream": "s", "type": "note.added", "data": {"text": "a"}})[:-1] + ', "x": ' + deep(5000) + "}\n"))
    assert "nested" in line
    listed = gormes("events", "--json")
    logged = [json.loads(x) for x in listed.stdout.splitlines()]
    assert [e["data"]["text"] for e in logged if not e["stream"].startswith("audit-")] == ["kept"]
    assert gormes("projections", "rebuild", "--check").returncode == 0


@pytest.mark.parametrize("command", [("export",), ("audit", "export")])
def test_out_on_a_full_disk_is_one_line_and_leaves_no_partial(tmp_path: Path, tmpfs: Path,
                                                              command: tuple[str, ...]):
    db = tmp_path / "g.db"
    write_notes(db, [("notes-1", "x" * 2000)] * 200)
    assert run_gormes(db, "recall", "x").returncode == 0  # an audit record
    fill(tmpfs)
    out = tmpfs / "out.jsonl"
    result = run_gormes(db, *command, "--out", str(out))
    line = assert_one_line_error(result)
    assert result.returncode == 1 and "No space left on device" in line, line
    assert sorted(p.name for p in tmpfs.iterdir()) == ["filler"]
    rebuild_check(db)


def test_export_to_stdout_on_a_full_disk_is_one_line(db: Path, tmpfs: Path):
    fill(tmpfs)
    with open(tmpfs / "filler", "ab") as full:  # stdout is a file on the full disk
        done = subprocess.run(gormes_command(db, "export"), stdout=full, stderr=subprocess.PIPE,
                              text=True, env=cli_env(), timeout=60)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gormes: error: ") and "No space" in lines[0], done.stderr


# -- hole 13: control characters never reach the terminal raw -------------------------


def test_job_name_escapes_do_not_reach_the_terminal(db: Path):
    submitted = run_gormes(db, "jobs", "submit", HOSTILE)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    for args in (("jobs", "list"), ("jobs", "get", job_id), ("top", "--once")):
        shown = run_gormes(db, *args)
        assert shown.returncode == 0, (args, shown.stderr)
        assert no_controls(shown.stdout), (args, shown.stdout)
        assert "\\x1b]0;pwned-title" in shown.stdout or "\\x1b]0;pwn" in shown.stdout, (args, shown.stdout)
    as_json = json.loads(run_gormes(db, "jobs", "list", "--json").stdout)
    assert [job["name"] for job in as_json] == [HOSTILE]  # --json keeps the string as given
    rebuild_check(db)


def test_fact_escapes_do_not_reach_the_terminal_through_recall(db: Path):
    added = run_gormes(db, "memory", "add-fact", f"tea {OSC_CLIPBOARD} time {OSC_TITLE}")
    assert added.returncode == 0, added.stderr
    recalled = run_gormes(db, "recall", "tea")
    assert recalled.returncode == 0, recalled.stderr
    assert "tea" in recalled.stdout
    assert no_controls(recalled.stdout), recalled.stdout
    assert "\\x1b]52;c;" in recalled.stdout.replace("\n", "").replace(" ", ""), recalled.stdout
    as_json = json.loads(run_gormes(db, "recall", "tea", "--json").stdout)
    assert [hit["text"] for hit in as_json["hits"]] == [f"tea {OSC_CLIPBOARD} time {OSC_TITLE}"]


def test_event_tables_and_tail_lines_escape_stream_names(db: Path):
    """Own attack: a stream name with a newline and a forged row, plus an OSC."""
    stream = f"s{OSC_TITLE}\n     99  2026-01-01 00:00:00.000  forged v1  note.added  {{}}"
    assert run_gormes(db, "append", stream, "note.added", "--data", '{"text": "t"}').returncode == 0
    for args in (("events",), ("tail",), ("events", "--stream", "s*")):
        shown = run_gormes(db, *args)
        assert shown.returncode == 0, shown.stderr
        assert no_controls(shown.stdout), (args, shown.stdout)
        assert not any(line.lstrip().startswith("99 ") for line in shown.stdout.splitlines()), shown.stdout
        assert "\\n" in shown.stdout, shown.stdout


def test_rich_markup_from_a_gateway_cannot_restyle(db: Path):
    name = "[bold red]CRITICAL[/bold red][link=https://evil.example]x[/link]"
    assert run_gormes(db, "jobs", "submit", name).returncode == 0
    assert run_gormes(db, "memory", "add-fact", f"tea {name}").returncode == 0
    for args in (("top", "--once"), ("recall", "tea")):
        shown = run_gormes(db, *args)
        assert shown.returncode == 0, shown.stderr
        assert "[bold red]CRITICAL" in shown.stdout.replace("\n", ""), (args, shown.stdout)


def test_error_lines_escape_what_the_caller_typed(tmp_path: Path):
    result = run_gormes(tmp_path / f"nope{OSC_TITLE}.db", "events")
    line = assert_one_line_error(result)
    assert no_controls(line) and "\\x1b]0;pwned-title" in line, line


def test_bidi_overrides_are_shown_not_obeyed(db: Path):
    """Own attack: U+202E makes `gpj.exe` read as `exe.jpg`; shown escaped instead."""
    name = "invoice\u202egpj.exe"
    assert run_gormes(db, "jobs", "submit", name).returncode == 0
    for args in (("jobs", "list"), ("top", "--once")):
        shown = run_gormes(db, *args)
        assert "\u202e" not in shown.stdout, (args, shown.stdout)
        assert "\\u202e" in shown.stdout, (args, shown.stdout)


# -- hole 17 (part): nothing accepted silently -----------------------------------------


def test_append_refuses_unknown_fields_by_name(db: Path):
    before = logged_events(db)
    line = assert_one_line_error(run_gormes(db, "append", "notes-1", "note.added", "--data",
                                            '{"text": "x", "bogus": 1, "also": 2}'))
    assert "bogus" in line and "also" in line, line
    assert logged_events(db) == before


@pytest.mark.parametrize("stream, type_, data", [
    ("audit-2026-01-01", "note.added", '{"text": "x"}'),
    ("notes-1", "audit.operation", json.dumps({
        "operation": "job.cancel", "audit_kind": None, "caller": "cli", "trust": "operator",
        "allowed": True, "outcome": "ok", "duration_ms": 1.0, "at": 1})),
])
def test_append_refuses_audit_records(db: Path, stream: str, type_: str, data: str):
    before = logged_events(db)
    result = run_gormes(db, "append", stream, type_, "--data", data)
    line = assert_one_line_error(result)
    assert result.returncode == 2 and "audit" in line, line
    assert logged_events(db) == before
    rebuild_check(db)


def test_a_full_disk_is_called_a_full_disk(tmp_path: Path, tmpfs: Path):
    db = tmpfs / "g.db"
    assert run_gormes(db, "append", "s", "note.added", "--data", '{"text": "x"}').returncode == 0
    fill(tmpfs)
    for args in (("append", "s", "note.added", "--data", '{"text": "' + "y" * 50_000 + '"}'),
                 ("jobs", "submit", "n", "--data", '{"text": "' + "y" * 50_000 + '"}')):
        result = run_gormes(db, *args)
        line = assert_one_line_error(result)
        assert "not a gormes database" not in line, line
        assert "disk full" in line or "No space left" in line, line


# -- own attacks: odd inputs --------------------------------------------------------


def test_import_of_invalid_utf8_and_nul_is_one_line(db: Path, tmp_path: Path):
    before = logged_events(db)
    for name, raw in (("bad-utf8.jsonl", b'{"stream": "s", "type": "note.added", "data": {"text": "\xff\xfe"}}\n'),
                      ("nul.jsonl", b'{"stream": "s", "type": "note.added", "data": {"text": "a"}}\0\n')):
        source = tmp_path / name
        source.write_bytes(raw)
        assert_one_line_error(run_gormes(db, "import", str(source)))
    assert logged_events(db) == before  # the refusals are audited, nothing else written


def test_db_that_is_a_fifo_is_refused_without_hanging(tmp_path: Path):
    fifo = tmp_path / "db.fifo"
    os.mkfifo(fifo)
    for args in (("events",), ("append", "s", "note.added", "--data", '{"text": "x"}')):
        line = assert_one_line_error(run_gormes(fifo, *args, timeout=30))
        assert "not a regular file" in line, line
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_db_that_is_a_device_is_refused(tmp_path: Path):
    """Own attack: `--db /dev/zero` reads zeros forever; `/dev/null` as a database."""
    for device in ("/dev/zero", "/dev/null"):
        line = assert_one_line_error(run_gormes(device, "events", timeout=30))
        assert "not a regular file" in line, line
        assert stat.S_ISCHR(os.stat(device).st_mode)


def test_a_float_position_is_one_line(db: Path):
    line = assert_one_line_error(run_gormes(db, "events", "--after", "1e23"))
    assert "--after" in line, line


def test_a_newline_in_a_job_name_forges_no_row(db: Path):
    """Own attack: `jobs list` prints one line per job; a name with a newline
    and a fake id, status and name would add a row for a job that does not exist."""
    name = "a\n01FAKEJOBID0000000000000000  completed        trusted"
    submitted = run_gormes(db, "jobs", "submit", name)
    assert submitted.returncode == 0, submitted.stderr
    listed = run_gormes(db, "jobs", "list")
    assert listed.returncode == 0, listed.stderr
    assert len(listed.stdout.splitlines()) == 1, listed.stdout
    assert "\\n01FAKEJOBID" in listed.stdout
    shown = run_gormes(db, "jobs", "get", submitted.stdout.strip())
    assert not any(line.startswith("01FAKEJOBID") for line in shown.stdout.splitlines()), shown.stdout
    assert [json.loads(run_gormes(db, "jobs", "list", "--json").stdout)[0]["name"]] == [name]


def run_on_a_terminal(db: Path, *args: str) -> str:
    """Run gormes with stdout on a pseudo-terminal (so rich styles its output) and
    return everything it wrote there."""
    import pty

    leader, follower = pty.openpty()
    env = cli_env()
    env["TERM"] = "xterm-256color"
    env.pop("NO_COLOR", None)
    process = subprocess.Popen(gormes_command(db, *args), stdout=follower, stderr=subprocess.PIPE,
                               env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the terminal's other side is closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    with process:
        errors = process.stderr.read() if process.stderr else b""
        assert process.wait(timeout=60) == 0, errors
    return b"".join(chunks).decode("utf-8", "replace")


def test_on_a_terminal_only_rich_styling_gets_through(db: Path):
    """On a terminal rich writes its own CSI styling, which must still work; the
    data's OSC sequences (title, clipboard) and lone escapes must not."""
    import re

    stream = f"s{OSC_TITLE}{OSC_CLIPBOARD}"
    assert run_gormes(db, "append", stream, "note.added", "--data", '{"text": "t"}').returncode == 0
    assert run_gormes(db, "jobs", "submit", HOSTILE).returncode == 0
    for args in (("events",), ("jobs", "list"), ("top", "--once")):
        shown = run_on_a_terminal(db, *args)
        styling = re.findall(r"\x1b\[[0-?]*[ -/]*[@-~]", shown)
        rest = re.sub(r"\x1b\[[0-?]*[ -/]*[@-~]", "", shown)
        assert no_controls(rest.replace("\r", "")), (args, rest)
        assert "\\x1b]0;pwned-title" in rest, (args, rest)
        if args != ("jobs", "list"):  # a rich table: its header is bold on a terminal
            assert styling, (args, shown)


@pytest.mark.parametrize("command", [("export",), ("audit", "export")])
def test_out_keeps_the_permissions_of_the_file_it_replaces(db: Path, tmp_path: Path,
                                                         command: tuple[str, ...]):
    """Own attack: an operator keeps the audit trail at 0600; replacing it with a
    fresh 0644 file would let every local user read it."""
    assert run_gormes(db, "recall", "x").returncode == 0  # an audit record
    kept = tmp_path / "trail.jsonl"
    kept.write_text("old\n")
    kept.chmod(0o600)
    done = run_gormes(db, *command, "--out", str(kept))
    assert done.returncode == 0, done.stderr
    assert kept.read_text() != "old\n"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
