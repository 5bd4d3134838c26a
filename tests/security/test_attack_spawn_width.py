"""A run's spawns are capped (`max_children`: 100 by default, GORMES_MAX_CHILDREN;
a subagent has its parent's cap). Tried here: one model turn asking for 108
subagents started all of them, and each could ask for as many, to the depth cap:
nothing bounded a tree's size but a token budget, if one was set. A spawn past
the cap is refused like one past the depth cap: the model is told, the refusal
is audited as denied, and the run replays exactly."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import rows, run_gormes

from gormes.actors.runs.context import DEFAULT_MAX_CHILDREN

ASKED = DEFAULT_MAX_CHILDREN + 8
SCRIPT = {"model": "scripted", "agents": [
    {"match": "start", "replies": [
        {"tool_calls": [{"name": "agent.spawn", "arguments": {"prompt": f"child {i}"}} for i in range(ASKED)]},
        {"text": "done"},
    ]},
    {"match": "child", "replies": [{"text": "a child's answer"}]},
]}


def test_a_turn_cannot_spawn_past_the_runs_cap(tmp_path: Path):
    db, script = tmp_path / "g.db", tmp_path / "wide.json"
    script.write_text(json.dumps(SCRIPT))
    done = run_gormes(db, "run", "agent", "--prompt", "start", "--model", f"scripted:{script}", "--json", timeout=300)
    assert done.returncode == 0, done.stderr
    started = rows(db, "SELECT json_extract(data, '$.run_id'), json_extract(data, '$.depth'),"
                       " json_extract(data, '$.max_children') FROM events WHERE type = 'run.started'")
    assert len(started) == 1 + DEFAULT_MAX_CHILDREN
    assert {cap for *_, cap in started} == {DEFAULT_MAX_CHILDREN}  # recorded, and the children's is their parent's
    refused = rows(db, "SELECT json_extract(data, '$.error') FROM events WHERE type = 'audit.operation'"
                       " AND json_extract(data, '$.operation') = 'agent.spawn'"
                       " AND json_extract(data, '$.outcome') = 'denied'")
    assert len(refused) == ASKED - DEFAULT_MAX_CHILDREN
    assert all(e.startswith("SpawnRefused: spawn cap reached") and f"max_children {DEFAULT_MAX_CHILDREN}" in e
               for (e,) in refused), refused
    root = next(run for run, depth, _ in started if depth == 0)
    # the model was told, in the tool results its next request carried
    turns = rows(db, "SELECT data FROM events WHERE type = 'run.llm_turn'"
                     f" AND stream = 'run-{root}' ORDER BY position")
    assert len(turns) == 2 and turns[1][0].count("spawn cap reached") == ASKED - DEFAULT_MAX_CHILDREN, turns[1]
    before = rows(db, "SELECT count(*) FROM events")
    replayed = run_gormes(db, "replay", root, timeout=300)
    assert replayed.returncode == 0 and replayed.stdout.splitlines()[-1].startswith("exact"), replayed
    assert rows(db, "SELECT count(*) FROM events") == before


def test_the_cap_is_set_by_gormes_max_children_and_a_bad_one_is_one_line(tmp_path: Path):
    import subprocess

    from cli_helpers import REPO, assert_one_line_error, cli_env, gormes_command

    db, script = tmp_path / "g.db", tmp_path / "wide.json"
    script.write_text(json.dumps(SCRIPT))
    command = gormes_command(db, "run", "agent", "--prompt", "start", "--model", f"scripted:{script}")
    for value, code in (("3", 0), ("many", 2)):
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO,
                              env=cli_env() | {"GORMES_MAX_CHILDREN": value})
        assert done.returncode == code, done
    assert "GORMES_MAX_CHILDREN must be a whole number, not 'many'" in assert_one_line_error(done)
    assert rows(db, "SELECT count(*) FROM events WHERE type = 'run.started'") == [(1 + 3,)]


async def test_a_gateways_agent_job_keeps_to_the_cap_and_pays_its_class_budget(store, tmp_path: Path, monkeypatch):
    """The same rules on the job path, where a gateway's work runs (an MCP client's
    `run__submit` is an agent job with a gateway submitter): its subagents stop at
    the cap, and the run and every subagent are charged to `trust:gateway`."""
    import trio
    from agent_worker import agent_worker

    from gormes.actors.jobs.queue import JobQueue
    from gormes.actors.jobs.worker import WorkerConfig
    from gormes.control.budget_book import BudgetBook
    from gormes.events.jobs import Submitter

    monkeypatch.setenv("GORMES_MAX_CHILDREN", "3")
    script = tmp_path / "wide.json"
    script.write_text(json.dumps(SCRIPT))
    await BudgetBook(store).set("trust:gateway", tokens=10_000_000)
    queue = await JobQueue.open(store)
    job = await queue.submit("agent", {"prompt": "start", "model": f"scripted:{script}"}, {"max_attempts": 1},
                             submitter=Submitter(trust="gateway", caller="mcp:mallory2", scope="chat:mcp-mallory2"))

    worker = agent_worker(queue, WorkerConfig(concurrency=1), store=store, log=lambda _: None)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        with trio.fail_after(120):
            while (await queue.get(job.id)).status not in ("completed", "failed", "dead"):
                await trio.sleep(0.05)
        worker.stop()
        await worker.wait_stopped()
    assert (await queue.get(job.id)).status == "completed"
    started = [r.event for r in await store.read_all(types=["run.started"])]
    assert len(started) == 1 + 3 and {s.max_children for s in started} == {3}
    assert all("trust:gateway" in s.budgets for s in started), [s.budgets for s in started]
    assert (await BudgetBook(store).get("trust:gateway")).spent_tokens > 0
    denied = [r.event for r in await store.read_all(types=["audit.operation"])
              if r.event.operation == "agent.spawn" and r.event.outcome == "denied"]
    assert len(denied) == ASKED - 3 and all(d.trust == "gateway" for d in denied)


# The cap on a whole tree (`max_tree_runs`, GORMES_MAX_TREE_RUNS, decision 0063):
# within each run's cap, a tree of subagents of subagents still grew to
# 1 + 100 + 100^2 + 100^3 runs. Two subagents that ask for three each: five runs
# at a cap of 5, whichever of them spawns first.
DEEP = {"model": "scripted", "agents": [
    {"match": "start", "replies": [
        {"tool_calls": [{"name": "agent.spawn", "arguments": {"prompt": f"middle {i}"}} for i in range(2)]},
        {"text": "done"},
    ]},
    {"match": "middle", "replies": [
        {"tool_calls": [{"name": "agent.spawn", "arguments": {"prompt": f"leaf {i}"}} for i in range(3)]},
        {"text": "middle done"},
    ]},
    {"match": "leaf", "replies": [{"text": "a leaf's answer"}]},
]}


def test_a_tree_cannot_grow_past_gormes_max_tree_runs_and_replays_exactly(tmp_path: Path):
    import subprocess

    from cli_helpers import REPO, cli_env, gormes_command

    db, script = tmp_path / "g.db", tmp_path / "deep.json"
    script.write_text(json.dumps(DEEP))
    done = subprocess.run(gormes_command(db, "run", "agent", "--prompt", "start", "--model", f"scripted:{script}"),
                          capture_output=True, text=True, timeout=300, cwd=REPO,
                          env=cli_env() | {"GORMES_MAX_TREE_RUNS": "5"})
    assert done.returncode == 0, done
    started = rows(db, "SELECT json_extract(data, '$.max_tree_runs') FROM events WHERE type = 'run.started'")
    assert started == [(5,)] * 5  # recorded, and a subagent's is its tree's
    refused = rows(db, "SELECT stream, json_extract(data, '$.reason') FROM events WHERE type = 'run.spawn_refused'")
    assert len(refused) == 2 * 3 - 2, refused  # six leaves asked, two started
    assert all(reason.startswith("tree cap reached") and "max_tree_runs 5" in reason for _, reason in refused)
    denied = rows(db, "SELECT json_extract(data, '$.caller'), json_extract(data, '$.error') FROM events"
                      " WHERE type = 'audit.operation' AND json_extract(data, '$.operation') = 'agent.spawn'"
                      " AND json_extract(data, '$.outcome') = 'denied'")
    assert sorted(caller for caller, _ in denied) == sorted(stream for stream, _ in refused)
    assert all(error.startswith("SpawnRefused: tree cap reached") for _, error in denied), denied
    # each refusing subagent's model was told, in the tool results its next request carried
    for stream in {stream for stream, _ in refused}:
        turns = rows(db, f"SELECT data FROM events WHERE type = 'run.llm_turn' AND stream = '{stream}' ORDER BY position")
        told = sum(1 for s, _ in refused if s == stream)
        assert len(turns) == 2 and turns[1][0].count("tree cap reached") == told, turns
    (root,) = rows(db, "SELECT json_extract(data, '$.run_id') FROM events WHERE type = 'run.started'"
                       " AND json_extract(data, '$.depth') = 0")
    before = rows(db, "SELECT count(*) FROM events")
    replayed = run_gormes(db, "replay", root[0], timeout=300)
    assert replayed.returncode == 0 and replayed.stdout.splitlines()[-1].startswith("exact"), replayed
    assert "diverged" not in replayed.stdout, replayed.stdout
    assert rows(db, "SELECT count(*) FROM events") == before


def test_a_bad_gormes_max_tree_runs_is_one_line(tmp_path: Path):
    import subprocess

    from cli_helpers import REPO, assert_one_line_error, cli_env, gormes_command

    db, script = tmp_path / "g.db", tmp_path / "deep.json"
    script.write_text(json.dumps(DEEP))
    command = gormes_command(db, "run", "agent", "--prompt", "start", "--model", f"scripted:{script}")
    for value, said in (("lots", "GORMES_MAX_TREE_RUNS must be a whole number, not 'lots'"),
                        ("-1", "GORMES_MAX_TREE_RUNS must be 0 or more, not '-1'")):
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO,
                              env=cli_env() | {"GORMES_MAX_TREE_RUNS": value})
        assert done.returncode == 2, done
        assert said in assert_one_line_error(done)
    assert not db.exists() or rows(db, "SELECT count(*) FROM events WHERE type = 'run.started'") == [(0,)]
