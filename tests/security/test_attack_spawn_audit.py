"""A run's spawns are audited like its tool calls (an attacker's finding: a model's
`agent.spawn` started subagents with no audit record, and a spawn refused past
the depth cap or for arguments that do not validate left none either, though a
refused tool call of the same turn was audited). A spawn that starts a child is
an `agent.spawn` record sealed with the parent's `run.child_spawned`; a refused
one is `denied` (SpawnRefused) or `invalid` (InvalidArguments). Replay writes
none, and still replays exactly."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import rows, run_gormes

# Every agent spawns a deeper one and makes a spawn call that does not validate,
# until the depth cap refuses the spawn of the deepest.
SCRIPT = {"model": "scripted", "agents": [{"replies": [
    {"tool_calls": [
        {"name": "agent.spawn", "arguments": {"prompt": "go deeper"}},
        {"name": "agent.spawn", "arguments": {"nonsense": 1}},
    ]},
    {"text": "done"},
]}]}



def ok(db: Path, *args: str) -> str:
    done = run_gormes(db, *args, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_every_spawn_and_every_refused_spawn_is_audited(tmp_path: Path):
    db, script = tmp_path / "g.db", tmp_path / "spawn.json"
    script.write_text(json.dumps(SCRIPT))
    ok(db, "run", "agent", "--prompt", "start", "--model", f"scripted:{script}")
    spawns = rows(db, "SELECT position, json_extract(data, '$.caller'), json_extract(data, '$.trust'),"
                      " json_extract(data, '$.outcome'), json_extract(data, '$.allowed'),"
                      " json_extract(data, '$.audit_kind'), json_extract(data, '$.error')"
                      " FROM events WHERE type = 'audit.operation'"
                      " AND json_extract(data, '$.operation') = 'agent.spawn' ORDER BY position")
    started = {run: depth for run, depth in rows(
        db, "SELECT json_extract(data, '$.run_id'), json_extract(data, '$.depth') FROM events"
            " WHERE type = 'run.started'")}
    assert len(started) == 4  # the root and three subagents: the default depth cap is 3
    by_outcome: dict[str, list[tuple]] = {}
    for row in spawns:
        by_outcome.setdefault(row[3], []).append(row)
    assert {k: len(v) for k, v in by_outcome.items()} == {"ok": 3, "invalid": 4, "denied": 1}
    for _, caller, trust, outcome, allowed, kind, error in spawns:
        depth = started[caller.removeprefix("run-")]
        assert trust == ("operator" if depth == 0 else "child-agent")
        assert kind == "run.spawn" and bool(allowed) == (outcome == "ok")
        if outcome == "invalid":
            assert error.startswith("InvalidArguments: invalid agent.spawn arguments"), error
    [(_, deepest, *_, refused)] = by_outcome["denied"]
    assert started[deepest.removeprefix("run-")] == 3 and refused.startswith("SpawnRefused: depth cap reached")
    # a started child's record is sealed in the transaction of its parent's run.child_spawned
    spawned = rows(db, "SELECT position, stream FROM events WHERE type = 'run.child_spawned' ORDER BY position")
    assert [position - 1 for position, _ in spawned] == [row[0] for row in by_outcome["ok"]]
    assert [stream for _, stream in spawned] == [row[1] for row in by_outcome["ok"]]
    ok(db, "audit", "verify")

    before = rows(db, "SELECT count(*) FROM events")
    root = next(run for run, depth in started.items() if depth == 0)
    assert ok(db, "replay", root).splitlines()[-1].startswith("exact")
    assert rows(db, "SELECT count(*) FROM events") == before  # replay audits nothing of its own
