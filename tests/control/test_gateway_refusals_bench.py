"""benchmarks/gateway_refusals.py --quick: the smoke test of the benchmark of the
refusals' index (decision 0075). It checks the JSON line's shape, that the index's
read and the scan found the same refusals (the benchmark asserts it), and the
ratio's arithmetic; no timing is asserted: the figures are the decision's."""

from __future__ import annotations

import os

from bench_quick import ROOT, quick_json


def test_quick_mode_prints_the_reads_the_build_and_the_writes() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))  # this tree's gormes
    result, _ = quick_json("gateway_refusals.py", timeout=300, env=env)
    assert (result["benchmark"], result["backend"], result["audit_records"]) == ("gateway_refusals", "sqlite",
                                                                                [2000, 4000])
    for name in ("gormes_ms", "scan_ms", "build_ms"):
        assert set(result[name]) == {"2000", "4000"} and all(v > 0 for v in result[name].values())
    assert abs(result["ratio"] - result["gormes_ms"]["4000"] / result["gormes_ms"]["2000"]) < 0.02
    assert result["capped_ms"] > 0
    for kind in ("sealed_us", "refusal_us", "note_us"):
        assert set(result["writes"][kind]) == {"with", "without"}
