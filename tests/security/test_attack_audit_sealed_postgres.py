"""test_attack_audit_sealed.py's `gormes memory forget` and `gormes skills
promote` on PostgreSQL: the real CLI SIGKILLed right after the change committed,
`--db postgresql://...` naming a fresh schema, still left its audit record.
Skipped, with the reason, only when the server cannot be reached."""

from __future__ import annotations

from pathlib import Path

import pytest
from pg_helpers import pg_rows, schema_url  # noqa: F401 - schema_url is the `url` fixture
from test_attack_audit_sealed import killed_after_commit, ok, promotable, remembered_and_noted

from gormes.events.redaction import CHUNK


def audits_after(url: str, position: int) -> list[tuple]:
    return pg_rows(url, "SELECT data::jsonb->>'operation', data::jsonb->>'outcome' FROM events"
                        f" WHERE type = 'audit.operation' AND position > {position} ORDER BY position")


def test_a_forget_killed_after_its_last_chunk_committed_is_audited(url: str, tmp_path: Path) -> None:
    fact = remembered_and_noted(tmp_path, url)
    killed_after_commit(url, "redact", "memory", "forget", fact, "--everywhere", "--reason", "asked to")
    assert len(pg_rows(url, "SELECT position FROM events WHERE type = 'memory.forgotten'")) == 1
    [_, (last_chunk,)] = pg_rows(url, "SELECT position FROM events WHERE type = 'log.redacted' ORDER BY position")
    assert pg_rows(url, "SELECT count(*) FROM events WHERE stream = 'notes-1'"
                        " AND data::jsonb ? 'redacted'") == [(CHUNK + 10,)]
    assert audits_after(url, last_chunk) == [("memory.forget", "ok")]
    ok(url, "audit", "verify")


def test_a_promotion_killed_after_its_event_committed_is_audited(url: str, tmp_path: Path) -> None:
    root = promotable(tmp_path)
    skill = root / "alpha" / "SKILL.md"
    before = skill.read_text()
    killed_after_commit(url, "promote", "skills", "promote", "alpha", "--skills-dir", str(root))
    [(promoted_at,)] = pg_rows(url, "SELECT position FROM events WHERE type = 'skill.promoted'")
    assert audits_after(url, promoted_at) == [("skills.promote", "ok")]
    assert skill.read_text() == before
    ok(url, "audit", "verify")
