"""benchmarks/scale.py --quick: the shape of the reads-at-scale benchmark's one JSON line.

It builds the template with the real code (the demo, a worker draining jobs,
agent runs, memory writes), replicates it into two logs, rebuilds their
projections and runs every read on both as the real CLI; a read that fails (a
copied run that does not replay exactly, say) fails the benchmark and so this
test. No timing is asserted: the figures are the benchmark's. A second run
reuses the cached logs.
"""

from __future__ import annotations

import os
from pathlib import Path

from bench_quick import quick_json

READS = {
    "events --limit 20", "tail", "jobs list --limit 20", "jobs get", "jobs stats", "runs list",
    "runs show", "replay RUN", "doctor", "top --once", "projections status",
    "audit export --since", "recall",
}


def _run(cache: Path) -> tuple[dict, str]:
    return quick_json("scale.py", timeout=900, env={**os.environ, "BENCH_SCALE_DIR": str(cache)})


def test_quick_mode_prints_a_ratio_for_every_read_and_reuses_its_logs(tmp_path: Path) -> None:
    result, log = _run(tmp_path)
    assert {"benchmark", "events_big", "events_small", "mix_events", "bytes_per_event", "target",
            "ratios", "over_target", "seconds_big", "seconds_small", "whole_log", "runs"} <= set(result)
    assert result["benchmark"] == "scale" and result["target"] == 1.5
    assert set(result["ratios"]) == READS == set(result["seconds_big"]) == set(result["seconds_small"])
    assert result["events_big"] >= 6_000 > result["events_small"] >= result["mix_events"]
    assert all(r > 0 for r in result["ratios"].values())
    assert set(result["over_target"]) == {n for n, r in result["ratios"].items() if r > 1.5}
    for size in ("big", "small"):
        assert set(result["whole_log"][size]) == {"projections_rebuild_eps", "export_eps"}
    assert "writing" in log and "template" in log
    again, log = _run(tmp_path)
    assert "writing" not in log  # the cached logs and template
    assert again["events_big"] == result["events_big"]
