"""benchmarks/gateway_rate.py --quick: the smoke test of the gateways' call-rate benchmark.

It checks the one JSON line's shape and its arithmetic (each ratio is its limited
median over its unlimited one); no timing is asserted: the figures are the
benchmark's (decision 0072), not the test's.
"""

from __future__ import annotations

import os

from bench_quick import ROOT, quick_json


def test_quick_mode_prints_one_json_line_with_the_ratios_and_the_floods() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))  # this tree's gormes
    result, _ = quick_json("gateway_rate.py", timeout=300, env=env)
    assert (result["benchmark"], result["rate"], result["samples"]) == ("gateway_rate", "600rpm", 20)
    sqlite = result["sqlite"]
    for case in ("gateway_time_now", "gateway_memory_recall", "operator_time_now"):
        figures = sqlite[case]
        assert figures["limited_ms"] > 0 and figures["unlimited_ms"] > 0
        assert abs(figures["ratio"] - figures["limited_ms"] / figures["unlimited_ms"]) < 0.01
    assert sqlite["refused_ms"] > 0
    for case in ("time_now", "memory_recall"):  # each client's share (decision 0082)
        figures = sqlite["share"][case]
        assert figures["class_only_ms"] > 0 and figures["with_share_ms"] > 0
        assert abs(figures["ratio"] - figures["with_share_ms"] / figures["class_only_ms"]) < 0.01
    assert sqlite["flood"]["refusals_per_s"] > 0 and sqlite["flood"]["bytes_per_record"] > 0
    floods = result["flood_mcp"]
    off, limited = floods["off"], floods["600rpm"]
    assert off["served"] > 0 and off["refused"] == 0 and off["ended_by_server_after_s"] is None
    assert off["records"] >= off["served"] and off["bytes_per_record"] > 0
    # half a second at the default: the first burst is served, and the server has
    # no reason to end the connection (it would after 600 refusals in the minute)
    assert limited["records"] >= limited["served"] + limited["refused"] > 0
    assert limited["ended_by_server_after_s"] is None or limited["refused"] >= 600
    shared = floods["600rpm+share"]  # one client's share is 150 a minute: ended after 150 refusals
    assert shared["records"] >= shared["served"] + shared["refused"] > 0 and shared["served"] <= 150
    assert shared["ended_by_server_after_s"] is None or shared["refused"] >= 150
