"""Test doubles for GBrain: small `gbrain` executables on PATH, one per state.

Each fake logs its arguments to calls.log beside it and answers:
  healthy   doctor: {"status": "ok"}; search: search.out; sync: exit 0
  warnings  doctor: {"status": "warnings", checks: one warn}
  error     doctor: {"status": "error", ...}, exit 1
  failing   every command exits 3 with a message on stderr
  garbage   doctor prints text that is not JSON
  slow      doctor never answers (sleeps)
  missing   no `gbrain` anywhere on PATH
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

DOCTOR = {
    "healthy": ('{"status": "ok", "checks": [{"name": "db", "status": "ok"}]}', 0),
    "warnings": ('{"status": "warnings", "checks": [{"name": "embeddings", "status": "warn"}]}', 0),
    "error": ('{"status": "error", "checks": [{"name": "db", "status": "fail"}]}', 1),
}

SCRIPT = """#!/bin/sh
here="$(dirname "$0")"
echo "$*" >> "$here/calls.log"
case "$STATE" in
  failing) echo "gbrain: database is locked" >&2; exit 3 ;;
  slow) exec sleep 60 ;;
esac
case "$1" in
  doctor) cat "$here/doctor.json"; exit "$(cat "$here/doctor.rc")" ;;
  search) cat "$here/search.out"; exit 0 ;;
  sync) exit "$(cat "$here/sync.rc")" ;;
esac
exit 2
"""


class FakeBrain:
    def __init__(self, directory: Path) -> None:
        self.dir = directory

    def answers_search(self, output: object) -> None:
        text = output if isinstance(output, str) else json.dumps(output)
        (self.dir / "search.out").write_text(text)

    def sync_fails(self) -> None:
        (self.dir / "sync.rc").write_text("4")

    def calls(self) -> list[str]:
        log = self.dir / "calls.log"
        return log.read_text().splitlines() if log.exists() else []


def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, state: str) -> FakeBrain:
    """Put a fake `gbrain` in `state` first on PATH (or, for `missing`, none at all)."""
    directory = tmp_path / "fake-bin"
    directory.mkdir()
    system_path = os.pathsep.join(p for p in ("/usr/bin", "/bin") if Path(p).is_dir())
    monkeypatch.setenv("PATH", str(directory) + os.pathsep + system_path)
    monkeypatch.delenv("GORMES_GBRAIN", raising=False)
    if state == "missing":
        assert shutil.which("gbrain") is None, "a real gbrain on the system PATH would spoil this test"
        return FakeBrain(directory)
    script = directory / "gbrain"
    script.write_text(SCRIPT.replace('"$STATE"', f'"{state}"'))
    script.chmod(0o755)
    doctor, rc = DOCTOR.get(state, ("this is not json", 0))
    (directory / "doctor.json").write_text(doctor)
    (directory / "doctor.rc").write_text(str(rc))
    (directory / "sync.rc").write_text("0")
    (directory / "search.out").write_text('{"results": []}')
    return FakeBrain(directory)


def write_notes(root: Path) -> Path:
    """A small knowledge root: three decisions and a note."""
    (root / "decisions").mkdir(parents=True)
    (root / "decisions" / "database.md").write_text(
        "# Database\n\nWe decided to use SQLite in WAL mode as the default event store.\n"
        "Postgres is the scale-out backend.\n")
    (root / "decisions" / "scheduler.md").write_text(
        "# Scheduler\n\nWe chose cronsim for cron expressions; each firing is one transaction.\n")
    (root / "decisions" / "events.md").write_text(
        "# Event names\n\nTags look like `job.claimed`; streams are `job-<id>`.\n")
    (root / "notes.md").write_text("# Notes\n\nThe dashboard refreshes twice a second.\n")
    return root
