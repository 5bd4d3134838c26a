"""The retrieval metrics, on rankings small enough to check by hand."""

from __future__ import annotations

import math

import pytest

from gormes.recall.eval_metrics import (
    mean_scores,
    ndcg_at_k,
    precision_at_k,
    recall_at_k,
    reciprocal_rank,
    score_ranking,
)


def test_a_perfect_ranking_scores_one_everywhere_but_precision():
    scores = score_ranking(["a", "b", "x"], {"a", "b"}, k=5)
    assert (scores.recall, scores.reciprocal_rank, scores.ndcg, scores.first_relevant_rank) == (1.0, 1.0, 1.0, 1)
    assert scores.precision == 2 / 5  # precision@k divides by k, whatever was returned


def test_hand_computed_values():
    ranked = ["x", "a", "y", "b", "z"]
    relevant = {"a", "b", "c"}
    assert precision_at_k(ranked, relevant, 5) == 2 / 5
    assert recall_at_k(ranked, relevant, 5) == 2 / 3
    assert reciprocal_rank(ranked, relevant) == 1 / 2
    dcg = 1 / math.log2(3) + 1 / math.log2(5)
    ideal = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert ndcg_at_k(ranked, relevant, 5) == pytest.approx(dcg / ideal)


def test_only_the_first_k_count():
    scores = score_ranking(["x", "y", "a"], {"a"}, k=2)
    assert (scores.precision, scores.recall, scores.reciprocal_rank, scores.ndcg) == (0.0, 0.0, 0.0, 0.0)
    assert scores.first_relevant_rank == 3  # still reported: it shows how near the miss was


def test_a_relevant_id_returned_twice_counts_once():
    assert ndcg_at_k(["a", "a"], {"a"}, 2) == 1.0
    assert recall_at_k(["a", "a"], {"a"}, 2) == 1.0


def test_metrics_that_need_relevant_ids_refuse_none():
    with pytest.raises(ValueError):
        recall_at_k(["a"], set(), 1)
    with pytest.raises(ValueError):
        ndcg_at_k(["a"], set(), 1)
    with pytest.raises(ValueError):
        score_ranking(["a"], {"a"}, 0)


def test_means_are_rounded_and_empty_means_are_zero():
    means = mean_scores([score_ranking(["a"], {"a"}, 3), score_ranking(["x", "a"], {"a"}, 3)])
    assert (means.queries, means.mrr, means.recall, means.precision) == (2, 0.75, 1.0, 0.3333)
    assert mean_scores([]).queries == 0 and mean_scores([]).ndcg == 0.0
