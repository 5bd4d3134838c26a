"""Fused recall is at least as good as its best mode on every metric, on the
shipped fixtures: with semantic off (always), and on (when the `semantic` extra is
installed); the weights behind it are docs/decisions/0036-fused-recall-weights.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from gormes.events.catalog import load_all
from gormes.recall.eval_fixtures import load_fixtures
from gormes.recall.evals import run_recall_evals
from gormes.recall.semantic import semantic_status

FIXTURES = Path(__file__).parents[2] / "evals" / "recall"
METRICS = ("precision", "recall", "mrr", "ndcg")


async def fused_against_best_mode(modes: list[str]) -> dict[str, tuple[float, float]]:
    load_all()
    report = await run_recall_evals(load_fixtures(FIXTURES), modes=[*modes, "fused"], k=5)
    by_mode = {m.mode: m for m in report.modes}
    assert all(by_mode[m].enabled for m in modes), [by_mode[m].reason for m in modes]
    fused = by_mode["fused"].scored
    return {metric: (getattr(fused, metric), max(getattr(by_mode[m].scored, metric) for m in modes))
            for metric in METRICS}


async def test_fused_is_at_least_its_best_mode_with_semantic_off():
    compared = await fused_against_best_mode(["lexical", "graph"])
    assert all(fused >= best for fused, best in compared.values()), compared


async def test_fused_is_at_least_its_best_mode_with_semantic_on():
    if not semantic_status().enabled:
        pytest.skip("the gormes[semantic] extra is not installed")
    compared = await fused_against_best_mode(["lexical", "graph", "semantic"])
    assert all(fused >= best for fused, best in compared.values()), compared
