"""benchmarks/gateway_reconnect.py --quick: the smoke test of the benchmark of what a
reconnection after an ended flood leaves in the log (decision 0081). Real `gormes mcp`
processes and the SDK client; it checks the JSON line's shape and that each
reconnection left less than the flood's connection did (the decision's point); no
timing is asserted."""

from __future__ import annotations

from bench_quick import quick_json


def test_quick_mode_prints_the_records_per_reconnection_against_the_first_flood() -> None:
    result, _ = quick_json("gateway_reconnect.py", timeout=300)
    assert (result["benchmark"], result["backend"], result["rate"]) == ("gateway_reconnect", "sqlite", "20req/60s")
    assert len(result["records_per_reconnection"]) == 2
    assert result["first_flood_records"] > 100  # the flood's refusals, then it was ended
    assert 0 < result["records_per_reconnection_median"] < result["first_flood_records"]
    assert result["ratio"] == round(result["records_per_reconnection_median"] / result["first_flood_records"], 4)
    assert result["ratio"] < 0.1
