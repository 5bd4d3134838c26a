"""`gormes tail --follow` started before its database exists (an audit tail that
systemd starts before the daemon) waits for the file, says so once on stderr, then
follows it from the first event; SIGTERM still ends it with exit 0."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
from pathlib import Path

from cli_helpers import REPO, cli_env, gormes_command, write_notes

SAFETY_TIMEOUT = 60  # only so that a broken tail fails the test instead of hanging it


def lines_of(stream) -> queue.Queue[str | None]:
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        for line in stream:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def test_follow_waits_for_a_database_that_does_not_exist_yet(tmp_path: Path) -> None:
    db = tmp_path / "not-yet" / "gormes.db"
    tail = subprocess.Popen(gormes_command(db, "tail", "--follow", "--json"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=cli_env(), cwd=REPO)
    try:
        out, err = lines_of(tail.stdout), lines_of(tail.stderr)
        assert err.get(timeout=SAFETY_TIMEOUT) == f"gormes: waiting for {db} to be created\n"
        assert tail.poll() is None  # still there, not an error
        assert not db.parent.exists()  # waiting creates nothing

        write_notes(db, [("audit-like", "first"), ("audit-like", "second")])
        seen = [json.loads(out.get(timeout=SAFETY_TIMEOUT)) for _ in range(2)]
        assert [(e["position"], e["data"]["text"]) for e in seen] == [(1, "first"), (2, "second")]
        write_notes(db, [("audit-like", "third")])
        assert json.loads(out.get(timeout=SAFETY_TIMEOUT))["data"]["text"] == "third"

        tail.send_signal(signal.SIGTERM)
        assert tail.wait(timeout=SAFETY_TIMEOUT) == 0
        assert out.get(timeout=SAFETY_TIMEOUT) is None and err.get(timeout=SAFETY_TIMEOUT) is None
    finally:
        if tail.poll() is None:
            tail.kill()
            tail.wait()
        tail.stdout.close()
        tail.stderr.close()


def test_an_interrupt_while_waiting_is_a_clean_exit(tmp_path: Path) -> None:
    db = tmp_path / "never.db"
    tail = subprocess.Popen(gormes_command(db, "tail", "--follow"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=cli_env(), cwd=REPO)
    try:
        err = lines_of(tail.stderr)
        assert "waiting for" in err.get(timeout=SAFETY_TIMEOUT)
        tail.send_signal(signal.SIGINT)
        assert tail.wait(timeout=SAFETY_TIMEOUT) == 0
        assert err.get(timeout=SAFETY_TIMEOUT) is None
        assert not db.exists()
    finally:
        if tail.poll() is None:
            tail.kill()
            tail.wait()
        tail.stdout.close()
        tail.stderr.close()
