"""`gormes memory` and `gormes recall` on PostgreSQL: the real CLI in subprocesses,
`--db postgresql://...` naming a fresh schema, each run in the test's tmp dir
(no SQLite file may appear there). Skipped, with the reason, only when the
server cannot be reached."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pg_helpers import fresh_schema, url_for_schema


@pytest.fixture
def url() -> Iterator[str]:
    with fresh_schema() as name:
        yield url_for_schema(name)


def ok(url: str, cwd: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "gormes", "--db", url, *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd)
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done.stdout


def test_remember_recall_and_mirror_on_postgres(url: str, tmp_path: Path):
    work = tmp_path / "cwd"
    work.mkdir()
    ok(url, work, "memory", "relate", "Ada Lovelace", "works at", "Acme Corp", "--scope", "chat:a")
    ok(url, work, "memory", "add-fact", "Ada prefers green tea in the morning", "--subject", "Ada Lovelace",
       "--scope", "chat:a")
    ok(url, work, "memory", "add-fact", "Ada's salary is secret", "--subject", "Ada Lovelace", "--scope", "chat:b")

    lexical = json.loads(ok(url, work, "recall", "green teas", "--mode", "lexical", "--scope", "chat:a", "--json"))
    [hit] = lexical["hits"]
    assert hit["text"] == "Ada prefers green tea in the morning"
    assert hit["scores"]["lexical"]["ranking"] == "ts_rank_cd" and hit["scores"]["lexical"]["score"] > 0
    assert hit["why"][0]["reason"] == "ts_rank_cd match on green, teas"

    fused = json.loads(ok(url, work, "recall", "where does Ada work", "--scope", "chat:a", "--json"))
    texts = [h["text"] for h in fused["hits"]]
    assert "Ada Lovelace works_at Acme Corp" in texts
    assert "Ada's salary is secret" not in texts  # chat:b's, not visible from chat:a
    table = ok(url, work, "recall", "Ada", "--scope", "chat:a")
    assert "green tea" in table and "salary" not in table

    out = tmp_path / "mirror"
    ok(url, work, "memory", "mirror", "--out", str(out))
    pages = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.md"))
    assert "USER.md" in pages and len(pages) > 1
    assert "works_at" in "".join(p.read_text() for p in out.rglob("*.md"))
    again = json.loads(ok(url, work, "memory", "mirror", "--out", str(out), "--json"))
    assert again["pages"] == len(pages) and again["written"] == 0  # deterministic
    assert list(work.iterdir()) == []  # no SQLite file named after the URL
