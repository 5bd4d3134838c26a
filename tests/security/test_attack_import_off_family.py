"""A crafted file given to `gormes import` (or a line to `gormes append`) puts an
event on a stream not of its family: the import's checks looked for memory claims
on `memory-<scope>` streams and for runs on `run-<id>` streams, while the readers
took the events from any stream. A forget of the operator's fact on `notes-1`
hid it; an operator's trusted fact on `notes-x` was served to a gateway as
trusted; a `run.started` on `zzzz<the operator's run id>` naming a gateway's
scope listed the operator's run to that gateway. Each door now refuses an event
off its family (decision 0086), and the readers read only their family's streams,
so a log an older gormes filled so is not believed either."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
from cli_helpers import assert_one_line_error, json_lines, run_gormes, write_notes
from mcp_helpers import call_ok, gormes_mcp
from pg_helpers import pg_rows, schema_url  # noqa: F401 - schema_url is the `url` fixture
from test_attack_import_memory_claims import MALLORY, SECRET, line

from gormes.events.memory import (
    MemoryFactRecorded,
    MemoryForgotten,
    Origin,
    Provenance,
    evidence_hash,
    fact_id,
)
from gormes.events.runs import RunStarted
from gormes.events.sqlite_log import SQLiteLog



def trusted_fact(scope: str, text: str) -> MemoryFactRecorded:
    provenance = Provenance(origin=Origin(artifact="notes.md"), kind="manual", scope=scope, first_seen=1.0,
                            last_seen=1.0, evidence_hash=evidence_hash(text), source_trust="operator")
    return MemoryFactRecorded(fact_id=fact_id(scope, text), text=text, provenance=provenance,
                              review_state="trusted")


def write_jsonl(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(item) + "\n" for item in lines))
    return path


def all_events(db: Path) -> list[dict]:
    return json_lines(run_gormes(db, "events", "--json").stdout)


def not_audit(db: Path) -> list[dict]:
    return [e for e in all_events(db) if e["type"] != "audit.operation"]


def last_audit(db: Path, operation: str) -> dict:
    return [e["data"] for e in all_events(db)
            if e["type"] == "audit.operation" and e["data"]["operation"] == operation][-1]


def refused(db: Path, args: tuple[str, ...], operation: str, *phrases: str, input: str | None = None) -> None:
    """Refused in one line naming `phrases`, exit 2, audited, nothing written,
    with --live-work too (an event off its family is not live work to vouch for)."""
    before = not_audit(db)
    for extra in ((), ("--live-work",)):
        done = run_gormes(db, *args, *extra, input=input)
        assert done.returncode == 2, done
        error = assert_one_line_error(done)
        for phrase in phrases:
            assert phrase in error, error
        assert not_audit(db) == before
        assert last_audit(db, operation)["outcome"] == "invalid"


def recalled(db: Path, query: str) -> list[dict]:
    done = run_gormes(db, "recall", query, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["hits"]


async def gateway_call(db: Path, tool: str, **arguments: object) -> dict:
    async with gormes_mcp(db, client_name="mallory") as client:
        return await call_ok(client, tool, **arguments)


def append_directly(db: Path, stream: str, event: msgspec.Struct) -> None:
    """What an older gormes's import left in the log."""
    log = SQLiteLog(db)
    try:
        log.append_now(stream, [event])
    finally:
        log.close()


def test_a_forget_of_the_operators_fact_on_another_stream_is_refused(tmp_path: Path) -> None:
    """On `memory-project:default` the forget is refused as a claim (0071); on
    `notes-1` it passed as history and hid the operator's fact."""
    db = tmp_path / "g.db"
    added = run_gormes(db, "memory", "add-fact", "backups go to host b1 every night at two", "--json")
    assert added.returncode == 0, added.stderr
    item = json.loads(added.stdout)["fact_id"]
    forget = MemoryForgotten(target_id=item, target_kind="fact", scope="project:default", forgotten_at=2.0)
    crafted = write_jsonl(tmp_path / "forget.jsonl", [line("notes-1", forget)])

    refused(db, ("import", str(crafted)), "events.import",
            "line 1: type 'memory.forgotten' belongs on a stream 'memory-<name>', not on 'notes-1'")
    [hit] = recalled(db, "backups host")
    assert hit["id"] == item

    data = json.dumps(line("notes-1", forget)["data"])
    refused(db, ("append", "notes-1", "memory.forgotten", "--data", "-"), "events.append",
            "type 'memory.forgotten' belongs on a stream 'memory-<name>', not on 'notes-1'", input=data)
    assert [hit["id"] for hit in recalled(db, "backups host")] == [item]


async def test_an_operators_trusted_fact_on_another_stream_is_refused_and_never_served(tmp_path: Path) -> None:
    """Imported on `notes-x`, it was served to the gateway's `memory__recall` as
    trusted. In a log an older gormes filled so, it is not folded now."""
    db = tmp_path / "g.db"
    crafted = write_jsonl(tmp_path / "fact.jsonl", [
        {"stream": "notes-1", "type": "note.added", "data": {"text": "a note is at home anywhere"}},
        line("notes-x", trusted_fact(MALLORY, SECRET))])
    refused(db, ("import", str(crafted)), "events.import",
            "line 2: type 'memory.fact_recorded' belongs on a stream 'memory-<name>', not on 'notes-x'")
    assert (await gateway_call(db, "memory__recall", query="deploy key"))["hits"] == []

    append_directly(db, "notes-x", trusted_fact(MALLORY, SECRET))
    assert (await gateway_call(db, "memory__recall", query="deploy key"))["hits"] == []
    doctor = run_gormes(db, "doctor", "--json", "--offline")
    [streams] = [c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "store.event_streams"]
    assert streams["status"] == "warn" and "memory.fact_recorded (1)" in streams["message"], streams


async def test_a_run_started_off_the_run_streams_never_lists_the_operators_run_to_a_gateway(
        tmp_path: Path) -> None:
    """A `run.started` naming mallory on `zzzz<run id>` (imported, or in a log an
    older gormes filled) made `run__list` show mallory the operator's run; so did
    one appended to the operator's ended run stream by `--ignore-versions`."""
    db = tmp_path / "g.db"
    answers = tmp_path / "answers.json"
    answers.write_text(json.dumps([{"text": "the secret answer is 42"}]))
    done = run_gormes(db, "run", "agent", "--prompt", "secret task", "--model", f"scripted:{answers}")
    assert done.returncode == 0, done.stderr
    [run] = json.loads(run_gormes(db, "runs", "list", "--json").stdout)
    run_id = run["run_id"]
    claim = RunStarted(run_id="x", handler="agent", handler_version="0", trust="gateway", scope=MALLORY)

    crafted = write_jsonl(tmp_path / "claim.jsonl", [line(f"zzzz{run_id}", claim)])
    refused(db, ("import", str(crafted)), "events.import",
            f"line 1: type 'run.started' belongs on a stream 'run-<name>', not on 'zzzz{run_id}'")
    assert (await gateway_call(db, "run__list"))["runs"] == []

    append_directly(db, f"zzzz{run_id}", claim)
    onto_ended = write_jsonl(tmp_path / "onto.jsonl", [line(f"run-{run_id}", claim)])
    assert run_gormes(db, "import", str(onto_ended), "--ignore-versions").returncode == 0
    assert (await gateway_call(db, "run__list"))["runs"] == []


def test_a_migrate_continuation_refuses_an_event_off_its_family(tmp_path: Path, url: str) -> None:
    own = tmp_path / "own.db"
    write_notes(own, [("notes", "note")])
    migrate = ("migrate", "--from", f"sqlite:{own}", "--to", url)
    assert run_gormes(own, *migrate).returncode == 0
    append_directly(own, "notes-x", trusted_fact(MALLORY, SECRET))
    before = pg_rows(url, "SELECT count(*) FROM events")
    for extra in ((), ("--live-work",)):
        done = run_gormes(own, *migrate, *extra)
        assert done.returncode == 2, done
        error = assert_one_line_error(done)
        assert "type 'memory.fact_recorded' belongs on a stream 'memory-<name>', not on 'notes-x'" in error
        assert pg_rows(url, "SELECT count(*) FROM events") == before
