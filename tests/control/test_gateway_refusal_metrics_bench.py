"""benchmarks/gateway_refusal_metrics.py --quick: the smoke test of the benchmark of a
scrape with a log full of refusals (decision 0079). It checks the JSON line's shape,
that the counter counted what was recorded since the daemon began and no more (the
benchmark asserts it), and the ratios' arithmetic; no timing is asserted: the
figures are the decision's."""

from __future__ import annotations

import os

from bench_quick import ROOT, quick_json


def test_quick_mode_prints_the_scrapes_of_both_logs_and_the_comparator() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))  # this tree's gormes
    result, _ = quick_json("gateway_refusal_metrics.py", timeout=300, env=env)
    assert (result["benchmark"], result["backend"], result["audit_records"]) == (
        "gateway_refusal_metrics", "sqlite", 4000)
    assert result["refused"] == {"few": 100, "many": 2000}
    for name in ("scrape_ms", "refusals_ms", "new_ms", "first_scrape_ms"):
        assert set(result[name]) == {"few", "many"} and all(v > 0 for v in result[name].values())
    assert abs(result["ratio"] - result["scrape_ms"]["many"] / result["scrape_ms"]["few"]) < 0.02
    assert abs(result["comparator_ratio"] - result["count_all_ms"] / result["refusals_ms"]["many"]) < 0.02
