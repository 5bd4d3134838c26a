"""The built wheel carries what it needs: installed into a fresh virtualenv, away
from the checkout, `gormes skills list`, `gormes eval skills` and `gormes eval
recall` find the shipped skills, routing evals and recall fixtures.

The wheel is built from this tree with hatchling (the build backend, installed by
the dev extra), without network. The fresh virtualenv gets the wheel alone; its
dependencies come from this test's own environment through a .pth line, which
adds that site-packages to sys.path without running its .pth files, so the
editable install of the checkout stays out of sight.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml
from cli_helpers import REPO

pytestmark = pytest.mark.slow


def run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{args}: {done.stdout}{done.stderr}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], Path]:
    """(the fresh virtualenv's bin/, its environment, an empty working directory)."""
    root = tmp_path_factory.mktemp("wheel")
    dist = root / "dist"
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
         str(REPO), "-w", str(dist)], cwd=root)
    (wheel,) = dist.glob("gormes-*.whl")
    venv = root / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=root)
    python = venv / "bin" / "python"
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-index", "--no-deps",
         str(wheel)], cwd=root)
    purelib = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=root)
    Path(purelib.stdout.strip(), "_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "GORMES_DB", "GORMES_SKILLS_DIR", "GORMES_SKILL_EVALS_DIR")}
    env.update(XDG_DATA_HOME=str(root / "xdg"), COLUMNS="200")
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    return venv / "bin", env, elsewhere


def test_gormes_is_imported_from_the_wheel_not_the_checkout(installed):
    bin_dir, env, cwd = installed
    done = run([str(bin_dir / "python"), "-c",
                "import gormes, gormes.data; print(gormes.__file__); print(gormes.data.shipped('skills'))"], cwd, env)
    package, skills = (Path(line) for line in done.stdout.splitlines())
    assert bin_dir.parent in package.parents and REPO not in package.parents
    assert skills == package.parent / "data" / "skills" and skills.is_dir()


def test_skills_list_finds_the_shipped_skills(installed):
    bin_dir, env, cwd = installed
    rows = json.loads(run([str(bin_dir / "gormes"), "skills", "list", "--json"], cwd, env).stdout)
    shipped = sorted(p.parent.name for p in (REPO / "skills").glob("*/SKILL.md"))
    assert [r["name"] for r in rows] == shipped and len(shipped) >= 4
    table = run([str(bin_dir / "gormes"), "skills", "list"], cwd, env).stdout
    assert all(name in table for name in shipped)


def test_eval_skills_routes_every_shipped_phrase(installed):
    bin_dir, env, cwd = installed
    cases = sum(len(yaml.safe_load(p.read_text())["cases"]) for p in (REPO / "evals" / "skills").glob("*.yaml"))
    report = json.loads(run([str(bin_dir / "gormes"), "eval", "skills", "--json"], cwd, env).stdout)
    assert report["total"] == cases > 0 and report["correct"] == cases
    text = run([str(bin_dir / "gormes"), "eval", "skills"], cwd, env).stdout
    assert text.startswith(f"routing accuracy: 100.0% ({cases}/{cases}) on {bin_dir.parent}")


def test_eval_recall_scores_the_shipped_fixtures(installed):
    bin_dir, env, cwd = installed
    report = json.loads(run([str(bin_dir / "gormes"), "eval", "recall", "--json"], cwd, env).stdout)
    assert report["fixtures"] == sorted(p.stem for p in (REPO / "evals" / "recall").glob("*.yaml"))
    assert report["queries"] > 0 and report["privacy_violations"] == []
    lexical = next(m for m in report["modes"] if m["mode"] == "lexical")
    assert lexical["enabled"] and lexical["scored"]["queries"] > 0
    assert list(cwd.iterdir()) == []  # nothing was looked for, or left, in the working directory
