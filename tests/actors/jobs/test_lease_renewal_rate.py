"""`gormes worker` warns when its jobs in flight need more lease renewals a second
than a log records alongside them (leases.renewal_warning)."""

from __future__ import annotations

from gormes.actors.jobs.leases import RENEWALS_PER_S_WARN, renewal_warning


def test_the_warning_names_the_figures_past_the_rate() -> None:
    assert renewal_warning(10_000, 30_000) is None  # 667/s
    assert renewal_warning(RENEWALS_PER_S_WARN, 2_000) is None  # exactly the rate
    warning = renewal_warning(10_000, 2_000)
    assert warning is not None
    assert "--concurrency 10000" in warning and "--lease 2000 ms" in warning and "10,000 lease renewals/s" in warning


def test_the_worker_says_it_on_stderr_at_start(tmp_path) -> None:
    """The real command: the one line comes before any job, and the worker runs on."""
    import os
    import signal
    import subprocess
    import sys

    worker = subprocess.Popen(
        [sys.executable, "-m", "gormes", "--db", str(tmp_path / "w.db"), "worker",
         "--concurrency", "10000", "--lease", "2000"],
        stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert worker.stderr is not None
        first = worker.stderr.readline()
        assert first.startswith("gormes: warning: --concurrency 10000 at --lease 2000 ms needs 10,000 lease renewals/s")
        assert worker.poll() is None
    finally:
        # SIGTERM: it stops the worker even before trio listens (the suite's process
        # may hand its children SIGINT ignored, and this line comes before trio runs).
        worker.send_signal(signal.SIGTERM)
        try:
            worker.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.communicate()
            raise
