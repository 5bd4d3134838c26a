"""A recording edited so that its runs spawn the run replayed, or a run spawned
already, is refused before anything replays (an attacker's finding: `gormes
replay --file` of an export whose child was rewritten to the run itself replayed
without end, 100% CPU and memory growing 80 MB a second; a run spawned by two
parents doubles at each level). A run of a tree is spawned once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import REPO, assert_one_line_error, run_gormes

FIXTURE = REPO / "replay_fixtures" / "subagents.jsonl"  # subagents-1 spawns -2, which spawns -3


def edited(tmp_path: Path, spawner: str, child: str) -> Path:
    """The fixture with `spawner`'s spawn rewritten to name `child`."""
    lines = [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]
    for line in lines:
        if line["type"] == "run.child_spawned" and line["stream"] == f"run-{spawner}":
            line["data"]["child_run_id"] = child
    out = tmp_path / "edited.jsonl"
    out.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return out


@pytest.mark.parametrize(("spawner", "child", "why"), [
    ("subagents-2", "subagents-1", "spawns run subagents-1, which is the run replayed"),
    ("subagents-2", "subagents-2", "spawns run subagents-2, which run subagents-1 spawns already"),
])
def test_an_edited_tree_is_refused_before_anything_replays(tmp_path: Path, spawner: str, child: str, why: str):
    recording = edited(tmp_path, spawner, child)
    done = run_gormes(tmp_path / "none.db", "replay", "--file", str(recording), timeout=60)
    assert done.returncode == 1, done
    line = assert_one_line_error(done)
    assert f"run {spawner} {why}: a run of a tree is spawned once" in line, line
    assert not (tmp_path / "none.db").exists()


def test_the_unedited_tree_replays_exactly(tmp_path: Path):
    done = run_gormes(tmp_path / "none.db", "replay", "--file", str(FIXTURE), timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("exact")
