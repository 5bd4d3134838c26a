"""The cap on a tree's runs (`max_tree_runs`, decision 0063) tried through every
door a run comes in by, as an attacker who writes the model's replies would:

1. an `agent` job run by a `gormes worker` process;
2. that worker SIGKILLed mid-tree, and the job's next attempt resuming the tree
   on another worker process: the count is rebuilt from the log, not started
   again;
3. `run.submit` over `gormes mcp` (a gateway), run by a worker process: the
   operator's caps hold, and neither the gateway's input nor its model's spawn
   arguments can widen them;
4. `gormes fork` of a capped run: the fork's tree counts the runs its prefix
   spawned, whatever reply it is given at the fork's position.

Each door held when these were written. Not a door but a bound, pinned here too:
a job's failed attempt is retried afresh, a new tree with a count of its own.

Each run of the tree's script is deterministic: the root spawns one middle per
turn, and waits for it; a middle asks for three leaves at once; leaves spawn
nothing. At a cap of 7 the tree holds the root, middle a and its three leaves,
middle b and its first leaf: middle b's other two leaves and middle c are refused.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
from cli_helpers import REPO, assert_job_completes, cli_env, gormes_command, rows, run_gormes
from mcp_helpers import call_ok, call_refused, gormes_mcp
from pg_helpers import fresh_schema, pg_rows, url_for_schema

pytestmark = pytest.mark.slow

CAP = 7
WIDEN = {"max_tree_runs": 1_000_000, "max_children": 1_000_000}  # what an attacker asks for


def spawn(prompt: str, **extra: object) -> dict:
    return {"name": "agent.spawn", "arguments": {"prompt": prompt, **extra}}


def tree_script(slow_ms: int = 0, last: dict | None = None) -> dict:
    """Middle b's leaves answer after `slow_ms` (a crash test kills the worker then);
    `last`: the root's last reply, instead of its answer."""
    middle = [{"match": f"MIDDLE {m}", "replies": [
        {"tool_calls": [spawn(f"{'SLOW' if m == 'b' else ''}LEAF {m}{i}") for i in range(3)]},
        {"text": f"middle {m} done"},
    ]} for m in "abc"]
    return {"agents": [
        {"match": "SLOWLEAF", "replies": [{"text": "a slow leaf's answer", "delay_ms": slow_ms}]},
        {"match": "LEAF", "replies": [{"text": "a leaf's answer"}]},
        *middle,
        {"match": "ROOT", "replies": [
            {"tool_calls": [spawn("MIDDLE a")]},
            {"tool_calls": [spawn("MIDDLE b")]},
            # and the model asks for wider caps in a spawn's arguments: an invalid call
            {"tool_calls": [spawn("MIDDLE c"), spawn("MIDDLE d", **WIDEN)]},
            last or {"text": "root done"},
            {"text": "fork done"},  # a fork whose reply at the root's last turn was replaced
        ]},
    ]}


def write_script(path: Path, slow_ms: int = 0, last: dict | None = None) -> str:
    path.write_text(json.dumps(tree_script(slow_ms, last)))
    return f"scripted:{path}"


# -- reading the log (a SQLite file or a PostgreSQL URL) ---------------------------------


class Event(NamedTuple):
    position: int
    stream: str
    type: str
    data: dict


def log(db: Path | str) -> list[Event]:
    """Every event, in log order."""
    sql = "SELECT position, stream, type, data FROM events ORDER BY position"
    found = rows(db, sql) if isinstance(db, Path) else pg_rows(db, sql)
    return [Event(position, stream, type, json.loads(data)) for position, stream, type, data in found]


def events(db: Path | str, run_id: str, type: str) -> list[dict]:
    return [e.data for e in log(db) if e.stream == f"run-{run_id}" and e.type == type]


def tree_of(db: Path | str, root: str) -> list[str]:
    """The root and every run the log says it spawned, down the tree (a fork's or a
    resumed run's copied `run.child_spawned` records included: those are its tree's)."""
    found, frontier = [root], [root]
    while frontier:
        frontier = [e["child_run_id"] for run in frontier for e in events(db, run, "run.child_spawned")]
        found += frontier
    return found


def prompt_of(db: Path | str, run_id: str) -> str:
    (started,) = events(db, run_id, "run.started")
    return started["input"]["prompt"]


def refusals(db: Path | str, runs: list[str]) -> list[tuple[str, str, str]]:
    """(refusing run's prompt, the refused spawn's prompt, reason) of each tree-cap
    refusal recorded on `runs`' streams."""
    return sorted((prompt_of(db, run), e["input"]["prompt"], e["reason"])
                  for run in runs for e in events(db, run, "run.spawn_refused"))


def audited_spawns(db: Path | str, outcome: str) -> list[tuple[str, str]]:
    """(caller, error) of every spawn audited with `outcome` (denied: refused)."""
    return sorted((e.data["caller"], e.data["error"]) for e in log(db) if e.type == "audit.operation"
                  and e.data["operation"] == "agent.spawn" and e.data["outcome"] == outcome)


def denied_spawns(db: Path | str) -> list[tuple[str, str]]:
    return audited_spawns(db, "denied")


def invalid_spawns(db: Path | str) -> list[tuple[str, str]]:
    return audited_spawns(db, "invalid")


def started_runs(db: Path | str) -> list[tuple[str, int, int, int, str]]:
    """(run id, depth, max_tree_runs, max_children, trust) of every run started."""
    return [(e.data["run_id"], e.data["depth"], e.data["max_tree_runs"], e.data["max_children"], e.data["trust"])
            for e in log(db) if e.type == "run.started"]


def root_run(db: Path | str) -> str:
    (root,) = [run for run, depth, *_ in started_runs(db) if depth == 0]
    return root


def full(root: str, runs: int = CAP, cap: int = CAP) -> str:
    return f"tree cap reached: the tree of run {root} holds {runs} runs, its cap (max_tree_runs {cap})"


def capped_tree_refusals(root: str) -> list[tuple[str, str, str]]:
    """What the tree's script is refused at the cap: middle b's last two leaves, middle c."""
    return sorted([("MIDDLE b", "SLOWLEAF b1", full(root)), ("MIDDLE b", "SLOWLEAF b2", full(root)),
                   ("ROOT", "MIDDLE c", full(root))])


def tree_prompts(db: Path, root: str) -> list[str]:
    return sorted(prompt_of(db, run) for run in tree_of(db, root))


CAPPED_TREE = sorted(["ROOT", "MIDDLE a", "LEAF a0", "LEAF a1", "LEAF a2", "MIDDLE b", "SLOWLEAF b0"])


def replays_exactly(db: Path | str, run_id: str) -> None:
    before = len(log(db))
    replayed = run_gormes(db, "replay", run_id, timeout=300)
    assert replayed.returncode == 0 and replayed.stdout.splitlines()[-1].startswith("exact"), replayed
    assert len(log(db)) == before


# -- workers as processes ----------------------------------------------------------------


def start_worker(db: Path | str, **env: str) -> subprocess.Popen:
    """`gormes worker` with a short lease, so that a killed worker's job is soon taken over."""
    return subprocess.Popen(
        gormes_command(db, "worker", "--concurrency", "2", "--lease", "1000", "--stall-interval", "200",
                       "--stall-grace", "300", "--no-governor"),
        env=cli_env() | env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def stop(worker: subprocess.Popen) -> None:
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)


def submit_agent_job(db: Path | str, model: str, *options: str) -> str:
    submitted = run_gormes(db, "jobs", "submit", "agent", "--data", json.dumps({"prompt": "ROOT", "model": model}),
                           *options)
    assert submitted.returncode == 0, submitted.stderr
    return submitted.stdout.strip()


def attempt_runs(db: Path | str, job_id: str) -> list[str]:
    """The run each attempt of the job named, in order."""
    entries = [e.data["entry"].get("data") or {} for e in log(db)
               if e.stream == f"job-{job_id}" and e.type == "job.transcribed"]
    return [entry["agent_run"] for entry in entries if "agent_run" in entry]


# -- 1. an agent job on a worker process ---------------------------------------------------


def test_an_agent_job_on_a_worker_process_keeps_its_tree_to_the_cap(tmp_path: Path):
    db = tmp_path / "g.db"
    job_id = submit_agent_job(db, write_script(tmp_path / "tree.json"))
    worker = start_worker(db, GORMES_MAX_TREE_RUNS=str(CAP))
    try:
        assert_job_completes(db, job_id, timeout_s=120)
    finally:
        stop(worker)
    job = json.loads(run_gormes(db, "jobs", "get", job_id, "--json").stdout)
    (root,) = attempt_runs(db, job_id)
    assert job["result"] == {"run_id": root, "result": "root done"}
    started = started_runs(db)
    assert len(started) == CAP and {cap for _, _, cap, _, _ in started} == {CAP}  # the worker's setting, recorded
    assert tree_prompts(db, root) == CAPPED_TREE
    assert refusals(db, tree_of(db, root)) == capped_tree_refusals(root)
    # each refusal audited as denied, by the run that asked
    by_prompt = {prompt_of(db, run): run for run in tree_of(db, root)}
    assert denied_spawns(db) == sorted([(f"run-{by_prompt['MIDDLE b']}", f"SpawnRefused: {full(root)}")] * 2
                                       + [(f"run-{root}", f"SpawnRefused: {full(root)}")])
    # the spawn that asked for wider caps is invalid: no place taken, no cap changed
    ((caller, error),) = invalid_spawns(db)
    assert caller == f"run-{root}" and "unknown field" in error, error
    # the model was told, in the tool results of its next request
    turns = events(db, root, "run.llm_turn")
    assert len(turns) == 4 and json.dumps(turns[3]).count("tree cap reached") == 1
    replays_exactly(db, root)


def test_a_failed_attempts_retry_is_a_tree_of_its_own_one_per_attempt(tmp_path: Path):
    """Not a door, a bound: the model fails its root once the tree is full (a
    non-retryable model error), and the job's next attempt starts afresh (decision
    0011: a failed run is not resumed), a new tree with a count of its own. The
    job's runs are at most its attempts' trees, one after the other: a gateway's
    job has the default 3 attempts and cannot choose more."""
    db = tmp_path / "g.db"
    model = write_script(tmp_path / "tree.json", last={"error": "the model gave up", "retryable": False})
    job_id = submit_agent_job(db, model, "--max-attempts", "2", "--backoff-delay", "0")
    worker = start_worker(db, GORMES_MAX_TREE_RUNS=str(CAP))
    try:
        waited = run_gormes(db, "jobs", "wait", job_id, "--timeout", "120", timeout=150)
    finally:
        stop(worker)
    assert waited.stdout.strip() == "dead", (waited.stdout, waited.stderr)
    first, second = attempt_runs(db, job_id)
    assert events(db, second, "run.started")[0].get("resumed_from") is None  # afresh
    for root in (first, second):
        assert tree_prompts(db, root) == CAPPED_TREE
        assert refusals(db, tree_of(db, root)) == capped_tree_refusals(root)
        assert events(db, root, "run.failed")
    assert len(started_runs(db)) == 2 * CAP
    assert len(denied_spawns(db)) == 2 * 3


# -- 2. the worker killed mid-tree, the job resumed on another -----------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path | str]:
    """The database the CLI is given: a SQLite file, or a fresh PostgreSQL schema's URL."""
    if request.param == "sqlite":
        yield tmp_path / "g.db"
        return
    with fresh_schema() as schema:
        yield url_for_schema(schema)


def test_a_tree_resumed_on_another_worker_counts_what_its_log_holds(tmp_path: Path, target: Path | str):
    """The first worker dies with the tree full (7 runs, middle b's slow leaf at
    work): the job's next attempt, on a second worker process, resumes it. Middle a
    and its leaves are in the resumed run's copied prefix and count; middle b and its
    leaf are taken over, as new runs of the new tree. A count started afresh would
    let middle b have all three leaves, and middle c its own."""
    db, script = target, tmp_path / "tree.json"
    job_id = submit_agent_job(db, write_script(script, slow_ms=600_000))
    worker = start_worker(db, GORMES_MAX_TREE_RUNS=str(CAP))
    try:
        deadline = time.monotonic() + 120
        # middle b's two refusals are recorded once its first, slow, leaf is spawned
        while sum(1 for e in log(db) if e.type == "run.spawn_refused") < 2:
            assert time.monotonic() < deadline, "the tree never filled"
            assert worker.poll() is None, "the worker exited"
            time.sleep(0.05)
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    (first,) = attempt_runs(db, job_id)
    assert len(started_runs(db)) == CAP and tree_prompts(db, first) == CAPPED_TREE
    first_refusals = refusals(db, tree_of(db, first))
    assert [(p, r) for p, r, _ in first_refusals] == [("MIDDLE b", "SLOWLEAF b1"), ("MIDDLE b", "SLOWLEAF b2")]

    write_script(script)  # the model answers at once from now on
    worker = start_worker(db, GORMES_MAX_TREE_RUNS=str(CAP))
    try:
        assert_job_completes(db, job_id, timeout_s=120)
    finally:
        stop(worker)
    first_again, second = attempt_runs(db, job_id)
    assert first_again == first
    assert events(db, second, "run.started")[0]["resumed_from"]["run_id"] == first
    job = json.loads(run_gormes(db, "jobs", "get", job_id, "--json").stdout)
    assert job["result"] == {"run_id": second, "result": "root done"}

    # the resumed tree: the copied middle a with its leaves, a new middle b and its first leaf
    tree = tree_of(db, second)
    assert tree_prompts(db, second) == CAPPED_TREE
    old_a = [run for run in tree_of(db, first) if prompt_of(db, run) == "MIDDLE a"]
    assert [run for run in tree if prompt_of(db, run) == "MIDDLE a"] == old_a  # counted from the log
    old_b = [run for run in tree_of(db, first) if prompt_of(db, run) == "MIDDLE b"]
    (new_b,) = [run for run in tree if prompt_of(db, run) == "MIDDLE b"]
    assert [events(db, new_b, "run.started")[0]["resumed_from"]["run_id"]] == old_b  # taken over
    assert refusals(db, tree) == capped_tree_refusals(second)
    assert refusals(db, tree_of(db, first)) == first_refusals  # the first tree's, as they were
    # three runs more in all: the resumed root, middle b and its leaf
    started = started_runs(db)
    assert len(started) == CAP + 3 and {cap for _, _, cap, _, _ in started} == {CAP}
    # every refusal audited: the first tree's two and the resumed tree's three
    assert len(denied_spawns(db)) == 2 + 3
    assert all(error.startswith("SpawnRefused: tree cap reached") for _, error in denied_spawns(db))
    replays_exactly(db, second)


# -- 3. a gateway's run.submit over `gormes mcp`, run by a worker process -------------------


async def test_a_gateways_run_keeps_to_the_operators_caps_and_cannot_widen_them(tmp_path: Path):
    """The worker's operator allows 6 runs a tree and 2 spawns a run. The gateway
    asks, in run.submit's input and in a raw agent job, for a million of each: it is
    refused, audited, nothing queued. Its run then meets both caps: middle a's third
    leaf and middle c by the run's, middle b's last two leaves by the tree's."""
    db = tmp_path / "g.db"
    model = write_script(tmp_path / "tree.json")
    caps = {"GORMES_MAX_TREE_RUNS": "6", "GORMES_MAX_CHILDREN": "2"}
    # the gateway's own process is given no caps: they are the worker's, where its run is made
    async with gormes_mcp(db, env={"GORMES_GATEWAY_MODELS": model}) as client:
        widened = [await call_refused(client, "run__submit", prompt="ROOT", model=model, **{key: value})
                   for key, value in WIDEN.items()]
        raw = await call_refused(client, "job__submit", name="agent",
                                 data={"prompt": "ROOT", "model": model, **WIDEN})
        assert [e for e in log(db) if e.type == "job.submitted"] == []
        job = await call_ok(client, "run__submit", prompt="ROOT", model=model)
        worker = start_worker(db, **caps)
        try:
            assert_job_completes(db, job["id"], timeout_s=120)
        finally:
            stop(worker)
        done = await call_ok(client, "job__get", id=job["id"])
    for refusal, key in zip(widened, WIDEN):
        assert refusal.startswith("InvalidOperationInput: ") and key in refusal, refusal
    assert raw.startswith("OperationDenied: ") and "use run.submit" in raw, raw
    submits = [(e.data["operation"], e.data["trust"], e.data["outcome"]) for e in log(db)
               if e.type == "audit.operation" and e.data["operation"] in ("run.submit", "job.submit")
               and e.data["outcome"] != "started"]
    assert submits == [("run.submit", "gateway", "invalid")] * 2 + [("job.submit", "gateway", "denied"),
                                                                    ("run.submit", "gateway", "ok")]

    root = done["result"]["run_id"]
    assert done["status"] == "completed" and done["result"]["result"] == "root done"
    started = started_runs(db)
    assert len(started) == 6 and {(tree_cap, children) for _, _, tree_cap, children, _ in started} == {(6, 2)}
    assert [trust for _, depth, _, _, trust in started if depth == 0] == ["gateway"]
    assert tree_prompts(db, root) == sorted(["ROOT", "MIDDLE a", "LEAF a0", "LEAF a1", "MIDDLE b", "SLOWLEAF b0"])
    tree = tree_of(db, root)
    assert refusals(db, tree) == [("MIDDLE b", "SLOWLEAF b1", full(root, 6, 6)),
                                  ("MIDDLE b", "SLOWLEAF b2", full(root, 6, 6))]
    by_prompt = {prompt_of(db, run): run for run in tree}
    denied = denied_spawns(db)
    assert [(caller, error.split(":")[1].strip()) for caller, error in denied] == sorted(
        [(f"run-{by_prompt['MIDDLE a']}", "spawn cap reached"), (f"run-{root}", "spawn cap reached")]
        + [(f"run-{by_prompt['MIDDLE b']}", "tree cap reached")] * 2)
    assert all("max_children 2" in error for caller, error in denied if "spawn cap" in error)
    ((caller, error),) = invalid_spawns(db)
    assert caller == f"run-{root}" and "unknown field" in error, error
    replays_exactly(db, root)


# -- 4. `gormes fork` of a capped run ------------------------------------------------------


def llm_turn_positions(db: Path, run_id: str) -> list[int]:
    return [e.position for e in log(db) if e.stream == f"run-{run_id}" and e.type == "run.llm_turn"]


def capped_run(tmp_path: Path) -> tuple[Path, str]:
    """The tree's script run at the cap by `gormes run`: the root's id."""
    db = tmp_path / "g.db"
    done = subprocess.run(gormes_command(db, "run", "agent", "--prompt", "ROOT", "--model",
                                         write_script(tmp_path / "tree.json")),
                          capture_output=True, text=True, timeout=300, cwd=REPO,
                          env=cli_env() | {"GORMES_MAX_TREE_RUNS": str(CAP)})
    assert done.returncode == 0, done
    root = root_run(db)
    assert tree_prompts(db, root) == CAPPED_TREE and refusals(db, tree_of(db, root)) == capped_tree_refusals(root)
    return db, root


def fork(db: Path, root: str, *args: str) -> str:
    """`gormes fork`, its operator's setting a cap far above the source's: the new run's id."""
    forked = subprocess.run(gormes_command(db, "fork", root, *args, "--yes", "--json"),
                            capture_output=True, text=True, timeout=300, cwd=REPO,
                            env=cli_env() | {"GORMES_MAX_TREE_RUNS": "1000000"})
    assert forked.returncode == 0, forked
    (fork_id,) = [e.data["run_id"] for e in log(db) if e.type == "run.started" and e.data.get("forked_from")]
    return fork_id


def test_a_fork_given_more_spawns_at_the_capped_runs_end_makes_none(tmp_path: Path):
    """The root's last reply ("root done") replaced by one asking for two more
    middles: the fork's prefix spawned the whole tree, so both are refused."""
    db, root = capped_run(tmp_path)
    before = len(started_runs(db))
    reply = tmp_path / "reply.json"
    reply.write_text(json.dumps({"content": "", "tool_calls": [spawn("MIDDLE a"), spawn("MIDDLE b")]}))
    forked = fork(db, root, "--at", str(llm_turn_positions(db, root)[-1]), "--reply", str(reply))
    started = started_runs(db)
    assert len(started) == before + 1  # the fork itself, and no subagent
    assert [cap for run, _, cap, _, _ in started if run == forked] == [CAP]  # the source's, not the operator's now
    assert tree_prompts(db, forked) == CAPPED_TREE  # the prefix's runs, counted from the log
    copied = ("ROOT", "MIDDLE c", full(root))  # the source's refusal, served from the prefix
    assert refusals(db, [forked]) == sorted([copied, ("ROOT", "MIDDLE a", full(forked)),
                                             ("ROOT", "MIDDLE b", full(forked))])
    mine = [error for caller, error in denied_spawns(db) if caller == f"run-{forked}"]
    assert mine == [f"SpawnRefused: {full(forked)}"] * 2
    assert events(db, forked, "run.completed")[0]["result"] == "fork done"
    replays_exactly(db, forked)


def test_a_fork_after_the_first_middle_counts_it_and_its_leaves(tmp_path: Path):
    """Forked at the root's second turn, middle a and its three leaves are the fork's
    prefix: its live part makes middle b and one leaf, as the source did, and no more."""
    db, root = capped_run(tmp_path)
    before = len(started_runs(db))
    forked = fork(db, root, "--at", str(llm_turn_positions(db, root)[1]))
    assert len(started_runs(db)) == before + 3  # the fork, a new middle b and its first leaf
    assert tree_prompts(db, forked) == CAPPED_TREE
    assert refusals(db, tree_of(db, forked)) == capped_tree_refusals(forked)
    assert events(db, forked, "run.completed")[0]["result"] == "root done"
    replays_exactly(db, forked)

