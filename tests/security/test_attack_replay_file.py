"""A recording edited so that its runs spawn the run replayed, or a run spawned
already, is refused before anything replays (an attacker's finding: `gormes
replay --file` of an export whose child was rewritten to the run itself replayed
without end, 100% CPU and memory growing 80 MB a second; a run spawned by two
parents doubles at each level). A run of a tree is spawned once."""

from __future__ import annotations

import gzip
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


def bomb(tmp_path: Path) -> Path:
    """64 MiB of newlines in about 64 KiB of gzip (a thousand to one)."""
    path = tmp_path / "bomb.jsonl.gz"
    with gzip.GzipFile(path, "wb") as out:
        for _ in range(64):
            out.write(b"\n" * (1 << 20))
    return path


@pytest.mark.parametrize("command", [("replay", "--file"), ("import",)])
def test_a_compression_bomb_is_refused_as_it_inflates(tmp_path: Path, command: tuple[str, ...]):
    """Tried here: two megabytes of gzip holding two gigabytes of newlines
    took `replay --file` to 19 GB of memory (the file was inflated whole) and past two
    minutes; a line at a time, the newlines alone would take half an hour. Both
    readers of a gzipped export refuse it within its first megabytes."""
    db = tmp_path / "target.db"
    done = run_gormes(db, *command, str(bomb(tmp_path)), timeout=60)
    assert done.returncode == 2, done
    line = assert_one_line_error(done)
    assert "inflates more than 200 times its size" in line and "compression bomb" in line, line


def test_a_gzipped_export_still_replays(tmp_path: Path):
    archived = tmp_path / "subagents.jsonl.gz"
    archived.write_bytes(gzip.compress(FIXTURE.read_bytes()))
    done = run_gormes(tmp_path / "none.db", "replay", "--file", str(archived), timeout=60)
    assert done.returncode == 0, done
    assert done.stdout.startswith("exact"), done.stdout
