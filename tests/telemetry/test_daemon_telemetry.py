"""`gormes daemon` with OTEL_EXPORTER_OTLP_ENDPOINT and --metrics-port: runs and
job attempts are exported to a real OTLP/HTTP receiver as they end, `/metrics`
answers on loopback, and a run that ended while the daemon was down is exported
when it starts again (its tracking position kept in the database)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from otlp_receiver import Received, attributes, otlp_receiver

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "replay_fixtures"
WAIT = 60.0  # an upper bound for anything to happen; never a measured duration


def env_with(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "GORMES_"))}
    env["PYTHONPATH"] = str(REPO)
    return {**env, **extra}


def gormes(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "gormes", "--db", str(db), *args],
                            capture_output=True, text=True, env=env_with(), timeout=120)
    assert result.returncode == 0, result.stderr
    return result


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def eventually(check: Callable[[], object], what: str) -> object:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"never saw {what}")


def scrape(port: int) -> dict[tuple[str, tuple], float] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            text = reply.read().decode()
    except (urllib.error.URLError, ConnectionError):
        return None
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def run_ids(received: Received) -> set[str]:
    return {attributes(s)["gormes.run.id"] for s in received.spans() if s.name.startswith("invoke_agent")}


def start_daemon(db: Path, url: str, port: int, log: Path) -> subprocess.Popen:
    with log.open("w") as err:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "gormes", "--db", str(db), "daemon", "--no-governor", "--no-cron",
             "--metrics-port", str(port), "--log-format", "plain"],
            env=env_with(OTEL_EXPORTER_OTLP_ENDPOINT=url, OTEL_SERVICE_NAME="gormes-daemon"),
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=err,
        )


def stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=WAIT)


def test_the_daemon_exports_as_runs_end_and_serves_metrics(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    gormes(db, "import", str(FIXTURES / "subagents.jsonl"))  # ended before telemetry was on
    port = free_port()
    with otlp_receiver() as (url, received):
        proc = start_daemon(db, url, port, tmp_path / "daemon1.log")
        try:
            eventually(lambda: scrape(port), "/metrics answering")
            job_id = json.loads(gormes(db, "jobs", "submit", "echo", "--data", "{}", "--json").stdout)["id"]
            gormes(db, "import", str(FIXTURES / "tool_error.jsonl"))
            eventually(lambda: "tool-error-1" in run_ids(received), "the run's spans")
            attempts = eventually(lambda: [s for s in received.spans() if s.name == "job echo"],
                                  "the job attempt's span")
            metrics = eventually(
                lambda: (m := scrape(port)) and m.get(
                    ("gormes_jobs", (("queue", "default"), ("status", "completed")))) == 1 and m,
                "the completed job in /metrics")
        finally:
            code = stop(proc)
        assert code == 0, (tmp_path / "daemon1.log").read_text()
        assert attributes(attempts[0])["gormes.job.id"] == job_id
        assert attributes(attempts[0])["gormes.job.outcome"] == "completed"
        assert run_ids(received) == {"tool-error-1"}
        assert received.service_names() == {"gormes-daemon"}
        assert metrics[("gormes_job_attempts_total", ())] == 1
        assert ("gormes_projection_lag_events", (("projection", "telemetry.traces"),)) in metrics

        # Ended while the daemon was down: exported once it is back.
        gormes(db, "import", str(FIXTURES / "provider_retry.jsonl"))
        proc = start_daemon(db, url, port, tmp_path / "daemon2.log")
        try:
            eventually(lambda: "provider-retry-1" in run_ids(received), "the run that ended while down")
        finally:
            assert stop(proc) == 0, (tmp_path / "daemon2.log").read_text()
        names = [attributes(s)["gormes.run.id"] for s in received.spans() if s.name.startswith("invoke_agent")]
        assert names.count("tool-error-1") == 1


def test_a_metrics_port_already_taken_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "gormes", "--db", str(tmp_path / "g.db"), "daemon", "--no-governor",
             "--no-cron", "--metrics-port", str(port), "--log-format", "plain"],
            env=env_with(), cwd=REPO, capture_output=True, text=True, timeout=WAIT,
        )
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if "Traceback" in line or line.startswith("gormes: error:")]
    assert errors == [f"gormes: error: metrics port 127.0.0.1:{port}: Address already in use"
                      " (choose another with --metrics-port)"], done.stderr


def test_a_restarted_daemon_goes_on_from_the_counters_the_last_one_kept(tmp_path: Path) -> None:
    """Decision 0084: the daemon keeps `/metrics`' log counters when it stops, and the
    next one takes them up: its first scrape reads only what was appended since."""
    import sqlite3

    db = tmp_path / "d.db"
    gormes(db, "import", str(FIXTURES / "subagents.jsonl"))
    turns = ("gormes_model_turns_total", (("model", "scripted"),))
    tokens = ("gormes_model_tokens_total", (("kind", "input"), ("model", "scripted")))

    def daemon(log: Path) -> subprocess.Popen:
        with log.open("w") as err:
            return subprocess.Popen(
                [sys.executable, "-m", "gormes", "--db", str(db), "daemon", "--no-governor", "--no-cron",
                 "--metrics-port", str(port), "--log-format", "plain"],
                env=env_with(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=err)

    def sql(statement: str) -> list[tuple]:
        conn = sqlite3.connect(db, isolation_level=None)
        try:
            return conn.execute(statement).fetchall()
        finally:
            conn.close()

    port = free_port()
    proc = daemon(tmp_path / "daemon1.log")
    try:
        first = eventually(lambda: scrape(port), "/metrics answering")
    finally:
        assert stop(proc) == 0, (tmp_path / "daemon1.log").read_text()
    assert first[turns] == 6 and first[tokens] == 3827
    [(kept,)] = sql("SELECT position FROM metrics_fold")
    assert kept == sql("SELECT max(position) FROM events")[0][0]  # kept as it stopped
    # a model turn below the kept position deleted outside gormes: a fold from 0 would miss it
    sql("DELETE FROM events WHERE position = (SELECT min(position) FROM events WHERE type = 'run.llm_turn')")
    gormes(db, "import", str(FIXTURES / "tool_error.jsonl"))  # three more turns after it

    proc = daemon(tmp_path / "daemon2.log")
    try:
        second = eventually(lambda: scrape(port), "/metrics answering again")
    finally:
        assert stop(proc) == 0, (tmp_path / "daemon2.log").read_text()
    assert second[turns] == 6 + 3
    assert second[tokens] > first[tokens]
