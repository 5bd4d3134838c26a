"""benchmarks/trio_wakes.py --quick: the smoke test of the trio-only wake benchmark.

It checks the one JSON line's shape and its arithmetic (each case's ratio is its
cost per wake over the smallest size's, same depth and collector setting). No
timing is asserted: the figures are the benchmark's, not the test's.
"""

from __future__ import annotations

from bench_quick import quick_json


def test_quick_mode_prints_one_json_line_with_a_ratio_per_configuration() -> None:
    result, _ = quick_json("trio_wakes.py", timeout=300)
    cases = result["cases"]
    assert result["comparator_tasks"] == 10
    assert {(c["tasks"], c["depth"], c["collector"]) for c in cases} == {
        (n, d, g) for n in (10, 200) for d in (1, 10) for g in (False, True)
    }
    for case in cases:
        assert case["us_per_wake"] > 0
        base = next(b for b in cases if b["tasks"] == 10 and b["depth"] == case["depth"]
                    and b["collector"] == case["collector"])
        assert abs(case["ratio"] - case["us_per_wake"] / base["us_per_wake"]) < 0.01
    assert set(result["ratio_largest"]) == {
        "depth 1, collector off", "depth 10, collector off", "depth 1, collector on", "depth 10, collector on",
    }
