"""`gormes tail --kind K` keeps only audit events of that audit kind."""

from __future__ import annotations

import json
import subprocess
import sys


def gormes(db, *args):
    return subprocess.run([sys.executable, "-m", "gormes", "--db", str(db), *args],
                          capture_output=True, text=True, timeout=60)


def test_tail_filters_audit_events_by_kind(tmp_path):
    db = tmp_path / "g.db"
    assert gormes(db, "append", "note-1", "note.added", "--data", '{"text": "not audit"}').returncode == 0
    assert gormes(db, "ops", "call", "time.now").returncode == 0
    assert gormes(db, "ops", "call", "fs.list", '{"path": "."}', "--workspace", str(tmp_path)).returncode == 0
    assert gormes(db, "ops", "call", "shell.run", '{"command": "true"}').returncode != 0  # denied: off

    def kinds(*args):
        out = gormes(db, "tail", "--json", *args)
        assert out.returncode == 0, out.stderr
        return [json.loads(line)["data"].get("audit_kind") for line in out.stdout.splitlines()]

    assert kinds("--kind", "fs.read") == ["fs.read"]
    assert sorted(kinds("--kind", "fs.read", "--kind", "time.read")) == ["fs.read", "time.read"]
    assert kinds("--kind", "shell.exec") == ["shell.exec"]  # the denial is audited too
    assert kinds() == [None, "log.write", "time.read", "fs.read", "shell.exec"]  # the append is audited
