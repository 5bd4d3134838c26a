"""One pricing table, read one way by every command that prints a cost.

A pricing file in the documented format (TOML, one table per model), given as
`--pricing FILE` or as `GORMES_PRICING`, prices an agent job the same in `jobs list`,
`jobs get`, `jobs stats`, `runs list`, `runs show` and `top --once --json`; without
it the model has no price and every one of them says so (null, never 0). A file in
another format (the flat JSON the jobs commands once read) is one line, exit 2."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli_helpers import create_database, REPO, assert_one_line_error, cli_env, gormes_command

MODEL = "acme-large-2025-01"
SHIPPED = "2025.1"  # the version of gormes/data/pricing.toml
PRICING = """\
# US dollars per 1M tokens
[models."acme-large*"]
input = 2.0
output = 8.0
cache_read = 0.5
"""
USAGE = [{"input": 1200, "output": 300, "cache_read": 1000}, {"input": 2000, "output": 100, "cache_read": 0}]
EXPECTED = sum(((u["input"] - u["cache_read"]) * 2.0 + u["cache_read"] * 0.5 + u["output"] * 8.0) / 1e6
               for u in USAGE)

COMMANDS = {  # what prints a cost, and where the job's (or its run's) cost is in the JSON
    "jobs list": (("jobs", "list", "--json"), lambda out, ids: out[0]["cost"]),
    "jobs get": (("jobs", "get", "{job}", "--json"), lambda out, ids: out["cost"]),
    "jobs stats": (("jobs", "stats", "--json"), lambda out, ids: out["cost"]),
    "runs list": (("runs", "list", "--json"), lambda out, ids: out[0]["cost"]),
    "runs show": (("runs", "show", "{run}", "--json"), lambda out, ids: out["cost"]),
    "runs show --tree": (("runs", "show", "{run}", "--tree", "--json"), lambda out, ids: out["tree_cost"]),
    "top": (("top", "--once", "--json"), lambda out, ids: next(j["cost"] for j in out["jobs"] if j["id"] == ids["job"])),
}


def gormes(db: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(gormes_command(db, *args), capture_output=True, text=True,
                          env={**cli_env(), **(env or {})}, timeout=120, cwd=REPO)


def ok(db: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = gormes(db, *args, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def priced_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """A database holding one agent job that ran two model turns on MODEL, and its ids."""
    tmp = tmp_path_factory.mktemp("pricing")
    db = tmp / "gormes.db"
    script = tmp / "script.json"
    script.write_text(json.dumps({"model": MODEL, "agents": [{"replies": [
        {"tool_calls": [{"name": "time.now", "arguments": {}}], "usage": USAGE[0]},
        {"text": "done", "usage": USAGE[1]},
    ]}]}))
    create_database(db)
    worker = subprocess.Popen(gormes_command(db, "worker", "--shutdown-grace", "500"), env=cli_env(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        data = json.dumps({"prompt": "what time is it", "model": f"scripted:{script}"})
        job = ok(db, "jobs", "submit", "agent", "--data", data).strip()
        assert ok(db, "jobs", "wait", job, "--timeout", "60").strip() == "completed"
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
    run = json.loads(ok(db, "jobs", "get", job, "--json"))["result"]["run_id"]
    yield db, {"job": job, "run": run}


def costs(db: Path, ids: dict[str, str], *extra: str, env: dict[str, str] | None = None) -> dict[str, float | None]:
    found = {}
    for name, (args, pick) in COMMANDS.items():
        argv = [a.format(**ids) for a in args]
        found[name] = pick(json.loads(ok(db, *argv[:-1], *extra, argv[-1], env=env)), ids)
    return found


def test_the_documented_file_prices_every_command_the_same(priced_job, tmp_path: Path):
    db, ids = priced_job
    table = tmp_path / "prices.toml"
    table.write_text(PRICING)

    given = costs(db, ids, "--pricing", str(table))
    assert given["jobs list"] == pytest.approx(EXPECTED), given
    assert set(given.values()) == {given["jobs list"]}, given  # the same float everywhere, not just close
    from_env = costs(db, ids, env={"GORMES_PRICING": str(table)})
    assert from_env == given
    # the option wins over the variable, as it does for every option with an env default
    elsewhere = tmp_path / "other.toml"
    elsewhere.write_text('[models."acme-large*"]\ninput = 100.0\noutput = 100.0\n')
    assert costs(db, ids, "--pricing", str(table), env={"GORMES_PRICING": str(elsewhere)}) == given


PRICING_OF = {  # where each command's JSON names the pricing table's version
    "jobs list": (("jobs", "list", "--json"), lambda out: out[0]["pricing"]),
    "jobs get": (("jobs", "get", "{job}", "--json"), lambda out: out["pricing"]),
    "jobs stats": (("jobs", "stats", "--json"), lambda out: out["pricing"]),
    "runs show": (("runs", "show", "{run}", "--json"), lambda out: out["pricing"]),
    "runs list": (("runs", "list", "--json"), lambda out: {row["pricing"] for row in out}.pop()),
    "top": (("top", "--once", "--json"), lambda out: out["pricing"]),
}


def test_every_cost_names_the_version_of_the_table_that_priced_it(priced_job, tmp_path: Path):
    db, ids = priced_job
    versioned = tmp_path / "acme.toml"
    versioned.write_text('version = "acme-3"\n' + PRICING)
    unversioned = tmp_path / "prices.toml"
    unversioned.write_text(PRICING)
    for extra, expected in (((), SHIPPED), (("--pricing", str(versioned)), f"{SHIPPED}+acme-3"),
                            (("--pricing", str(unversioned)), f"{SHIPPED}+prices.toml")):
        for name, (args, pick) in PRICING_OF.items():
            argv = [a.format(**ids) for a in args]
            out = json.loads(ok(db, *argv[:-1], *extra, argv[-1], env={"GORMES_PRICING": ""}))
            assert pick(out) == expected, (name, extra)


def test_a_model_without_a_price_is_unknown_everywhere(priced_job):
    db, ids = priced_job
    assert costs(db, ids, env={"GORMES_PRICING": ""}) == dict.fromkeys(COMMANDS)


@pytest.mark.parametrize("content, says", [
    ('{"input": 2.0, "output": 8.0, "cache_read": 0.5}', "this is JSON; the format is TOML"),
    ("input = 2.0\noutput = 8.0\n", "unknown field `input`"),
    ('[models."acme*"]\ninput = -1\noutput = 1\n', "Expected `float` >= 0"),
    (None, "no such file"),
])
def test_a_bad_pricing_file_is_one_line_and_exit_2_for_every_command(priced_job, tmp_path: Path, content, says):
    db, ids = priced_job
    bad = tmp_path / "prices.json"
    if content is not None:
        bad.write_text(content)
    for name, (args, _) in COMMANDS.items():
        argv = [a.format(**ids) for a in args]
        for done in (gormes(db, *argv, "--pricing", str(bad)), gormes(db, *argv, env={"GORMES_PRICING": str(bad)})):
            line = assert_one_line_error(done)
            assert done.returncode == 2, (name, done.stderr)
            assert f"pricing table {bad}: " in line and says in line, (name, line)


def test_the_human_outputs_show_the_same_cost(priced_job, tmp_path: Path):
    db, ids = priced_job
    table = tmp_path / "prices.toml"
    table.write_text(PRICING)
    shown = f"${EXPECTED:.4f}"
    assert f"cost {shown}" in ok(db, "jobs", "stats", "--pricing", str(table))
    assert f"cost {shown}" in ok(db, "runs", "show", ids["run"], "--pricing", str(table))
    get = ok(db, "jobs", "get", ids["job"], "--pricing", str(table))
    # a cost names the table that priced it: the shipped one's version + the file's name
    named = f"(pricing {SHIPPED}+prices.toml)"
    assert next(line for line in get.splitlines() if line.startswith("cost ")).split() == ["cost", shown, *named.split()]
    (row,) = ok(db, "jobs", "list", "--pricing", str(table)).splitlines()
    assert row.startswith(ids["job"]) and row.endswith(f"  cost {shown} {named}")
    assert f"cost {shown} {named}" in ok(db, "jobs", "stats", "--pricing", str(table))
    assert named in ok(db, "runs", "show", ids["run"], "--pricing", str(table))
    assert "cost" not in ok(db, "jobs", "list", env={"GORMES_PRICING": ""})  # no cost asked for, none read
    assert "cost unknown price" in ok(db, "jobs", "stats", env={"GORMES_PRICING": ""})


def test_the_run_get_operation_and_the_budgets_name_their_table_too(priced_job, tmp_path: Path):
    db, ids = priced_job
    got = json.loads(ok(db, "ops", "call", "run.get", json.dumps({"run_id": ids["run"]}),
                        env={"GORMES_PRICING": ""}))
    assert got["pricing"] == SHIPPED and "cost" in got
    copy = tmp_path / "budgets.db"  # the module's database stays as the other tests read it
    source, target = sqlite3.connect(db), sqlite3.connect(copy)
    source.backup(target)
    source.close()
    target.close()
    ok(copy, "budget", "set", "b", "--tokens", "100")
    (budget,) = json.loads(ok(copy, "budget", "list", "--json", env={"GORMES_PRICING": ""}))["budgets"]
    assert budget["pricing"] == SHIPPED and "spent_cost" in budget
