"""The code in the README and docs/ is code a user can run: it imports only public
names, the README's Python samples run as written, and docs/providers.md's
example script drives a real run with a subagent."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import gormes
import gormes.providers

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# What is public, as gormes/__init__.py's docstring says: module -> its public names.
PUBLIC = {
    "gormes": set(gormes.__all__),
    "gormes.providers": set(gormes.providers.__all__),
    "gormes.providers.pricing": {"cost", "format_cost", "PricingError"},
}


def code_blocks(path: Path, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", path.read_text(), re.S | re.M)


def python_samples() -> list[tuple[str, str]]:
    return [(path.relative_to(REPO).as_posix(), block) for path in DOCS for block in code_blocks(path, "python")]


def private_uses(code: str) -> list[str]:
    """Every import of gormes, and every `gormes.X`, that names something not public."""
    tree = compile(code, "<sample>", "exec", ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bad += [a.name for a in node.names if a.name.split(".")[0] == "gormes" and a.name not in PUBLIC]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "gormes":
            public = PUBLIC.get(node.module, set())
            bad += [f"{node.module}.{a.name}" for a in node.names if a.name not in public]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "gormes":
            if node.attr not in PUBLIC["gormes"]:
                bad.append(f"gormes.{node.attr}")
    return bad


def test_there_are_samples_that_use_gormes():
    using = [where for where, code in python_samples() if "gormes" in code]
    assert {"README.md", "docs/postgres.md", "docs/providers.md"} <= set(using)


@pytest.mark.parametrize(("where", "code"), python_samples())
def test_a_sample_imports_only_public_names(where, code):
    assert private_uses(code) == [], where


def test_the_check_finds_a_private_import():
    found = private_uses("from gormes.events.sqlite import SQLiteEventStore\nimport gormes.events\n"
                         "import gormes\ngormes.default_codec\nfrom gormes import job, Codec\n")
    assert sorted(found) == [
        "gormes.Codec", "gormes.default_codec", "gormes.events", "gormes.events.sqlite.SQLiteEventStore"]


def run_python(path: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("GORMES_DB", None)
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=60)


def test_the_readme_samples_run_as_written(tmp_path):
    samples = code_blocks(REPO / "README.md", "python")
    assert len(samples) == 4
    outputs = []
    for n, code in enumerate(samples):
        (tmp_path / f"sample{n}.py").write_text(code)
        done = run_python(tmp_path / f"sample{n}.py", tmp_path)
        assert done.returncode == 0, f"README sample {n + 1}:\n{code}\n{done.stderr}"
        outputs.append(done.stdout)
    handlers, submitted, logged, tools = outputs
    assert handlers == tools == ""  # declaring a handler or an operation runs nothing
    assert submitted.split()[1] == "waiting"
    assert "greeter-7 Greeted(name='Ada')" in logged


def test_the_providers_example_script_spawns_a_subagent(tmp_path):
    (script,) = code_blocks(REPO / "docs" / "providers.md", "json")[:1]
    (tmp_path / "script.json").write_text(script)
    db = str(tmp_path / "gormes.db")
    gormes_cli = [sys.executable, "-m", "gormes", "--db", db]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    ran = subprocess.run([*gormes_cli, "run", "agent", "--prompt", "Summarize the docs",
                          "--model", "scripted:script.json", "--json"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert ran.returncode == 0, ran.stderr
    parent = json.loads(ran.stdout)
    assert (parent["status"], parent["result"]) == ("completed", "Done.")
    listed = subprocess.run([*gormes_cli, "runs", "list", "--json"], capture_output=True, text=True,
                            env=env, cwd=tmp_path, timeout=60)
    children = [r for r in json.loads(listed.stdout) if r["parent_run_id"] == parent["run_id"]]
    # the researcher agent answered the spawned task, after its tool call and its scripted error
    assert [(c["status"], c["last_tool"], c["iterations"]) for c in children] == [("completed", "fs.read", 2)]
