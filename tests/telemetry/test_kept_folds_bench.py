"""benchmarks/kept_folds.py --quick: the smoke test of the benchmark of the folds kept in
the database (decision 0084). It checks the JSON line's shape and the ratios'
arithmetic; the benchmark itself asserts that a kept fold counts what a fold from
position 0 counts, and reads only what was appended since. No timing is asserted:
the figures are the decision's."""

from __future__ import annotations

import os

from bench_quick import ROOT, quick_json


def test_quick_mode_prints_the_kept_and_the_whole_folds_of_the_doctor_and_the_metrics() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))  # this tree's gormes
    result, _ = quick_json("kept_folds.py", timeout=300, env=env)
    assert (result["benchmark"], result["backend"], result["events"], result["new"]) == (
        "kept_folds", "sqlite", 4000, 100)
    pairs = {"doctor_ms": ("incremental", "full"), "fold_ms": ("incremental", "full"),
             "first_scrape_ms": ("kept", "cold")}
    for name, (kept, whole) in pairs.items():
        assert set(result[name]) == {kept, whole} and all(v > 0 for v in result[name].values())
    for ratio, name, (kept, whole) in (("doctor_ratio", "doctor_ms", pairs["doctor_ms"]),
                                       ("fold_ratio", "fold_ms", pairs["fold_ms"]),
                                       ("scrape_ratio", "first_scrape_ms", pairs["first_scrape_ms"])):
        # of the medians before they were rounded to the microsecond: 1% apart at most
        assert abs(result[ratio] - result[name][whole] / result[name][kept]) <= 0.01 * result[ratio] + 0.02
