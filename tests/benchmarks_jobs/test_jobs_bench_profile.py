"""benchmarks/jobs.py's profiled drain: a real worker draining jobs under
benchmarks/profile_worker.py writes one stats file holding both of its threads,
and `profile_top` / `profile_parts` read it. No timing is asserted: the figures
are the benchmark's; this checks that the profile sees the store's writer thread
(where `python -m cProfile` sees nothing) and that the shares are shares.
"""

from __future__ import annotations

from pathlib import Path


def test_a_profiled_drain_sees_the_writer_thread_and_reports_shares(bench, tmp_path: Path) -> None:
    stats = tmp_path / "worker.prof"
    drain = bench.gormes_throughput(tmp_path, 50, profile=stats)
    assert drain.jobs_per_s > 0 and drain.cpu_s > 0 and drain.observer_cpu_s >= 0
    assert bench.completed_count(tmp_path / "gormes.db") == 50

    top, parts = bench.profile_top(stats)
    assert len(top) == bench.PROFILE_TOP  # (at 50 jobs the imports lead; at 20,000 the writer)
    every, _ = bench.profile_top(stats, top=10_000)
    functions = [row["function"] for row in every]
    # The writer thread's work is in the profile: the claims and completions run there.
    assert any(f.startswith("gormes/actors/jobs/batch.py") for f in functions), functions
    assert not any(f.endswith("(_commit)") for f in functions)  # a wrapper, left out
    assert 0 < parts["writer_thread"] < 1
    assert 0 < parts["sqlite3_calls"] < 1
    assert 0 < parts["trio_internals"] < 1
    shares = [row["cumulative_share"] for row in every]
    assert shares == sorted(shares, reverse=True)
    assert shares[0] > 0 and all(0 <= share <= 1 for share in shares)
    # Entry points that only hold others' work are left out.
    assert not any(f.startswith("gormes/cli/") for f in functions)
