"""Numbers a person reads (issue 19, item 8), through the real CLI: a lexical
recall score and a knowledge fallback hit are never printed as zero when they are
not, and `events --limit 0` is refused rather than answered with "no events"."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from cli_helpers import REPO, assert_one_line_error, cli_env, gormes_command, run_gormes, write_notes


def ok(db: Path, *args: str) -> str:
    done = run_gormes(db, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_lexical_recall_score_is_printed_with_its_digits(tmp_path: Path):
    db = tmp_path / "g.db"
    ok(db, "memory", "add-fact", "Ada prefers green tea", "--subject", "Ada", "--scope", "chat:a")
    ok(db, "memory", "add-fact", "Ada drinks coffee at work", "--subject", "Ada", "--scope", "chat:a")
    args = ("recall", "green tea", "--mode", "lexical", "--scope", "chat:a")
    (hit,) = json.loads(ok(db, *args, "--json"))["hits"]
    assert 0 < hit["score"] < 1e-3  # bm25 on a tiny log: the case that printed 0.0000
    row = next(line for line in ok(db, *args).splitlines() if line.lstrip().startswith("1 "))
    score = row.split("│")[1].strip()
    assert float(score) == float(f"{hit['score']:.4g}") and float(score) > 0


def test_the_knowledge_fallback_scores_its_first_hit(tmp_path: Path):
    db = tmp_path / "g.db"
    root = tmp_path / "notes"
    root.mkdir()
    for name in ("a", "b", "c"):  # a term in every file: FTS5's bm25 is then about 1e-6
        (root / f"{name}.md").write_text(f"# Note {name}\n\nAbout drinks and {name}.\n")
    env = {"GORMES_GBRAIN": str(tmp_path / "no-gbrain"), "GORMES_KNOWLEDGE_ROOT": str(root),
           "GORMES_KNOWLEDGE_INDEX": str(tmp_path / "index.db")}
    done = subprocess.run(gormes_command(db, "ops", "call", "knowledge.search", '{"query": "drinks note"}'),
                          capture_output=True, text=True, env={**cli_env(), **env}, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["routed_to"] == "fallback"
    assert [h["source"] for h in answer["hits"]] == ["fts"] * 3
    assert answer["hits"][0]["score"] > 0


def test_events_limit_0_is_refused(tmp_path: Path):
    db = tmp_path / "g.db"
    write_notes(db, [("s", "one")])
    line = assert_one_line_error(run_gormes(db, "events", "--limit", "0"))
    assert "'--limit'" in line and "1<=x" in line
    assert "one" in ok(db, "events", "--limit", "1")
