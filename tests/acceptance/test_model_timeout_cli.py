"""The model's timeout and retries are settable from the command line and the
environment, and a timeout is recorded as what it is: it timed out, after how long,
against which URL (never an empty `cannot reach URL:`)."""

from __future__ import annotations

import json
import socket
import sqlite3
import threading
from collections.abc import Iterator

import pytest
from cli_helpers import cli_env, gormes_command

import subprocess


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A server that accepts connections and never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    listener.close()


def failures(db) -> list[dict]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT data FROM events WHERE type = 'run.llm_failed' ORDER BY position").fetchall()
    return [json.loads(d) for (d,) in rows]


@pytest.mark.parametrize("how", ["flags", "environment"])
def test_a_model_timeout_is_recorded_with_how_long_and_where(tmp_path, silent_server, how):
    db = tmp_path / "gormes.db"
    env = dict(cli_env(), OPENAI_BASE_URL=silent_server, OPENAI_API_KEY="test")
    args = ["run", "agent", "--prompt", "hello", "--model", "openai:gpt-test", "--json"]
    if how == "flags":
        args += ["--model-timeout", "0.5", "--model-retries", "1"]
    else:
        env.update(GORMES_MODEL_TIMEOUT="0.5", GORMES_MODEL_RETRIES="1")
    ran = subprocess.run(gormes_command(db, *args), capture_output=True, text=True, env=env, timeout=60)
    assert ran.returncode == 1, ran.stderr
    assert json.loads(ran.stdout)["status"] == "failed"
    failed = failures(db)
    assert [f["attempt"] for f in failed] == [1, 2]  # one retry, each attempt recorded
    for f in failed:
        assert "timed out after 0.5 s" in f["error"] and silent_server in f["error"], f["error"]
        assert f["retryable"] is True


def test_a_bad_timeout_is_one_line(tmp_path):
    ran = subprocess.run(gormes_command(tmp_path / "g.db", "run", "agent", "--prompt", "x", "--model",
                                        "openai:m", "--model-timeout", "-1"),
                         capture_output=True, text=True, env=cli_env(), timeout=60)
    assert ran.returncode == 2
    assert ran.stderr.count("\n") <= 3 and "model-timeout" in ran.stderr


def test_a_bad_max_tokens_field_is_one_line_and_runs_nothing(tmp_path):
    db = tmp_path / "g.db"
    env = dict(cli_env(), OPENAI_BASE_URL="http://127.0.0.1:9/v1", OPENAI_API_KEY="test",
               GORMES_OPENAI_MAX_TOKENS_FIELD="max_output_tokens")
    ran = subprocess.run(gormes_command(db, "run", "agent", "--prompt", "x", "--model", "openai:o3-mini"),
                         capture_output=True, text=True, env=env, timeout=60)
    assert ran.returncode == 2, ran.stderr
    assert ran.stderr.startswith("gormes: error:") and ran.stderr.count("\n") == 1, ran.stderr
    assert "GORMES_OPENAI_MAX_TOKENS_FIELD" in ran.stderr and "max_completion_tokens" in ran.stderr
    if db.exists():  # refused before a run began: no run was recorded
        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT count(*) FROM events WHERE type = 'run.started'").fetchone()[0] == 0
