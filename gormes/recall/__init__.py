"""Recall over the memory graph: lexical, graph, semantic and fused ranking.

The public API is gormes/recall/api.py (`recall`, `recall_in_store` and their
typed results); the ranking modules are pure functions over rows.
"""

from gormes.recall.api import (
    CROSS_SCOPE_TRUST,
    DEFAULT_SCOPE,
    MODES,
    CrossScopeDenied,
    EmptyQuery,
    InvalidScope,
    ModeScore,
    ModeStatus,
    PathStep,
    RecallError,
    RecallHit,
    RecallResult,
    ScoreBreakdown,
    Why,
    recall,
    recall_in_store,
)

__all__ = [
    "CROSS_SCOPE_TRUST", "DEFAULT_SCOPE", "MODES", "CrossScopeDenied", "EmptyQuery", "InvalidScope",
    "ModeScore", "ModeStatus", "PathStep", "RecallError", "RecallHit", "RecallResult", "ScoreBreakdown",
    "Why", "recall", "recall_in_store",
]
