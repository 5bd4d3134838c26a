"""benchmarks/concurrency.py --quick: the smoke test of the ten-thousand-runs benchmark.

It runs every case of the full benchmark at small N (each in its own process, the
job path through a real `gormes worker`); the test checks the one JSON line's shape
and that every run replayed exactly and no job stalled. No timing is
asserted: the figures are the benchmark's, not the test's.
"""

from __future__ import annotations

import pytest
from bench_quick import ROOT, quick_json

CASE_KEYS = {
    "runs", "delay_ms", "steps", "steps_per_s", "wall_s", "ideal_s", "wall_vs_ideal", "rss_mb",
    "replayed", "replayed_exactly", "cpu_s", "cpu_us_per_step", "rounds", "warmup_s",
}
JOB_KEYS = {
    "jobs", "concurrency", "delay_ms", "lease_ms", "renewals_per_s", "steps", "steps_per_s", "wall_s", "ideal_s",
    "wall_vs_ideal", "worker_rss_mb", "worker_cpu_s", "cpu_us_per_step", "completed", "stalled_while_alive", "renewal_gap_ms", "replayed",
    "replayed_exactly",
}


def test_quick_mode_prints_one_json_line_and_every_run_replays_exactly() -> None:
    result, _ = quick_json("concurrency.py", timeout=600)
    assert {"cases", "ratio_10k_vs_100", "ratio_of", "ratio_pairs", "wall_vs_ideal_1s", "rss_mb_10k",
            "replayed_exactly", "jobs", "targets_met"} <= set(result)
    cases = result["cases"]  # the first case of each (runs, delay): the table
    assert [(c["runs"], c["delay_ms"]) for c in cases] == [(20, 0), (50, 0), (50, 50)]
    for case in cases:
        assert set(case) == CASE_KEYS
        assert case["steps"] == case["runs"] * 11  # 5 model turns asking for a tool, 5 tool calls, a final turn
        assert case["replayed"] == case["runs"]
        assert case["replayed_exactly"] == case["replayed"]
        # a short case runs again in its process after an untimed warm-up round: the
        # median of at least three timed rounds is reported
        assert 3 <= case["rounds"] <= 25 and case["warmup_s"] > 0
    assert cases[2]["ideal_s"] == 0.3 and cases[0]["ideal_s"] is None
    # the ratio: the small and the large case interleaved (small, large, small, large,
    # small), each large one over the mean of the small ones around it; the median
    assert result["ratio_of"] == [50, 20]
    pairs = result["ratio_pairs"]
    assert len(pairs) == 2 and pairs[0]["after"] == pairs[1]["before"]
    assert pairs[0]["before"] == cases[0]["steps_per_s"] and pairs[0]["large"] == cases[1]["steps_per_s"]
    for pair in pairs:
        assert pair["ratio"] == round(pair["large"] / ((pair["before"] + pair["after"]) / 2), 3)
    assert result["ratio_10k_vs_100"] == sorted(p["ratio"] for p in pairs)[1]
    jobs = result["jobs"]
    assert set(jobs) == JOB_KEYS
    assert jobs["steps"] == jobs["jobs"] * 11
    # the CPU is reported rounded to 10 ms, the per-step figure from the unrounded one
    assert jobs["worker_cpu_s"] > 0
    assert abs(jobs["cpu_us_per_step"] - jobs["worker_cpu_s"] / jobs["steps"] * 1e6) <= 0.005 / jobs["steps"] * 1e6 + 1
    assert jobs["replayed_exactly"] == jobs["replayed"] == jobs["jobs"]
    assert jobs["stalled_while_alive"] == 0
    assert jobs["completed"] == jobs["jobs"]
    gaps = jobs["renewal_gap_ms"]  # claim, renewals, completion: in order, none negative
    assert set(gaps) == {"p50", "p99", "max"} and 0 <= gaps["p50"] <= gaps["p99"] <= gaps["max"]
    assert result["replayed_exactly"] is True
    assert result["ratio_of"] == [50, 20]
    assert set(result["targets_met"]) == {"ratio", "wall_vs_ideal", "rss", "replay", "jobs_no_stall"}


def _case(runs: int, delay_ms: int, replayed_exactly: int | None = None) -> dict:
    return {"runs": runs, "delay_ms": delay_ms, "steps_per_s": 1000, "wall_vs_ideal": 1.2 if delay_ms else None,
            "rss_mb": 100.0, "replayed": runs, "replayed_exactly": runs if replayed_exactly is None else replayed_exactly}


def _jobs(replayed_exactly: int) -> dict:
    return {"jobs": 30, "completed": 30, "stalled_while_alive": 0, "replayed": 30, "replayed_exactly": replayed_exactly}


def test_the_replay_target_counts_every_run_of_the_cases_and_the_job_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from benchmarks.concurrency import summary

    pair = [{"before": 1000, "large": 1000, "after": 1000, "ratio": 1.0}]
    cases = [_case(20, 0), _case(50, 0), _case(50, 50)]
    assert summary(cases, pair, (20, 50), _jobs(30))["targets_met"]["replay"] is True
    # one job's run that diverged fails the target, as one case's run does
    assert summary(cases, pair, (20, 50), _jobs(29))["targets_met"]["replay"] is False
    assert summary(cases, pair, (20, 50), _jobs(29))["replayed_exactly"] is False
    diverged = [_case(20, 0), _case(50, 0, replayed_exactly=49), _case(50, 50)]
    assert summary(diverged, pair, (20, 50), _jobs(30))["targets_met"]["replay"] is False
    # a failed job case (statuses, no runs replayed) leaves the target to the cases
    failed = {"jobs": 30, "completed": 12, "stalled_while_alive": 0, "statuses": {"completed": 12}}
    met = summary(cases, pair, (20, 50), failed)["targets_met"]
    assert met["replay"] is True and met["jobs_no_stall"] is False
