"""`gormes memory ...` and `gormes recall ...` driven in subprocesses against a real file."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import run_gormes


def gormes(db: Path, *args: str):
    return run_gormes(db, *args)


def ok(db: Path, *args: str) -> str:
    done = gormes(db, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def seed(db: Path) -> None:
    ok(db, "memory", "relate", "Ada Lovelace", "works at", "Acme", "--scope", "chat:a")
    ok(db, "memory", "add-fact", "Ada prefers green tea", "--subject", "Ada Lovelace", "--scope", "chat:a")
    ok(db, "memory", "add-fact", "Bob's password hint is parrot", "--subject", "Bob", "--scope", "chat:b")


def test_recall_json_has_scores_and_reasons(tmp_path: Path):
    db = tmp_path / "g.db"
    seed(db)
    result = json.loads(ok(db, "recall", "where does Ada work", "--scope", "chat:a", "--json"))
    assert result["mode"] == "fused" and result["scopes"] == ["chat:a"]
    assert any(n.startswith("semantic: ") for n in result["notes"]) or any(
        m["mode"] == "semantic" and m["enabled"] for m in result["modes"])
    texts = [h["text"] for h in result["hits"]]
    assert "Ada Lovelace works_at Acme" in texts
    for hit in result["hits"]:
        assert hit["scores"]["fused"]["rank"] >= 1 and hit["why"]
    graph = json.loads(ok(db, "recall", "Ada", "--mode", "graph", "--k", "1", "--scope", "chat:a", "--json"))
    assert len(graph["hits"]) == 1 and graph["hits"][0]["why"][0]["seed"] == "ada-lovelace"


def test_recall_stays_in_its_scope_unless_asked(tmp_path: Path):
    db = tmp_path / "g.db"
    seed(db)
    mine = json.loads(ok(db, "recall", "password parrot", "--scope", "chat:a", "--json"))
    assert mine["hits"] == []
    wide = json.loads(ok(db, "recall", "password parrot", "--scope", "chat:a", "--cross-scope", "--json"))
    assert [h["text"] for h in wide["hits"]] == ["Bob's password hint is parrot"]
    assert "Ada prefers green tea" in ok(db, "recall", "tea", "--scope", "chat:a")  # the table for people


def test_empty_query_is_one_line_and_exit_2(tmp_path: Path):
    db = tmp_path / "g.db"
    for query in ("", "   "):
        done = gormes(db, "recall", query)
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.count("\n") == 1 and "query is empty" in done.stderr
    bad_scope = gormes(db, "recall", "Ada", "--scope", "everywhere")
    assert bad_scope.returncode == 2 and "scope" in bad_scope.stderr and "Traceback" not in bad_scope.stderr


def test_review_promote_and_reject_through_the_cli(tmp_path: Path):
    db = tmp_path / "g.db"
    seed(db)
    # memory.remember through the audited executor, as the operator
    out = json.loads(ok(db, "ops", "call", "memory.remember",
                        json.dumps({"relation": {"subject": "Ada Lovelace", "predicate": "owes", "object": "Mallory"},
                                    "scope": "project:default"})))
    assert out["review_state"] == "trusted"  # the operator's word is trusted
    extracted = json.loads(ok(db, "memory", "relate", "Ada Lovelace", "met", "Eve", "--scope", "chat:b", "--json"))
    edge_id = extracted["relationship_id"]
    assert ok(db, "memory", "review", edge_id, "--reject").strip() == f"{edge_id} rejected"
    wide = json.loads(ok(db, "recall", "Eve", "--scope", "chat:a", "--cross-scope", "--mode", "graph", "--json"))
    assert "Ada Lovelace met Eve" not in [h["text"] for h in wide["hits"]]
    assert ok(db, "memory", "review", edge_id, "--promote").strip() == f"{edge_id} promoted"
    wide = json.loads(ok(db, "recall", "Eve", "--scope", "chat:a", "--cross-scope", "--mode", "graph", "--json"))
    assert "Ada Lovelace met Eve" in [h["text"] for h in wide["hits"]]
    missing = gormes(db, "memory", "review", "r_nope", "--promote")
    assert missing.returncode == 2 and "no fact, relationship" in missing.stderr


def test_mirror_twice_changes_nothing(tmp_path: Path):
    db = tmp_path / "g.db"
    seed(db)
    out = tmp_path / "mirror"
    ok(db, "memory", "mirror", "--out", str(out))
    first = {p: p.read_bytes() for p in sorted(out.rglob("*.md"))}
    assert out / "USER.md" in first and out / "entities/chat_a/ada-lovelace.md" in first
    assert "0 written" in ok(db, "memory", "mirror", "--out", str(out))
    assert {p: p.read_bytes() for p in sorted(out.rglob("*.md"))} == first
