"""Route a knowledge query: to a healthy GBrain brain, else to our own index.

A brain answer counts only if at least one hit traces to a markdown file under
the root; otherwise (no brain, a brain in `error`, missing, failing or slow, or a
brain that found nothing traceable) we search our FTS5 index and grep the files
for exact strings. Untraceable brain hits are kept, after ours, marked untrusted.
The fallback is announced once per process on the `gormes.knowledge` logger
(stderr when logging is not configured); every answer still says why it fell back.
"""

from __future__ import annotations

import logging
from pathlib import Path

import msgspec
import trio

from gormes.knowledge import KnowledgeHit, check_query, default_index_path
from gormes.knowledge import brain as gbrain
from gormes.knowledge.brain import BrainConfig, BrainHealth
from gormes.knowledge.index import KnowledgeIndex, check_root, exact_strings, grep, markdown_files

log = logging.getLogger("gormes.knowledge")


class KnowledgeAnswer(msgspec.Struct, frozen=True, kw_only=True):
    query: str
    root: str
    routed_to: str  # "gbrain" or "fallback"
    brain: BrainHealth
    fallback_reason: str | None
    hits: list[KnowledgeHit]
    skipped: list[str] = []  # markdown files that could not be read


class FallbackNotice:
    """Says "no brain, using our own index" once per process, then stays quiet."""

    def __init__(self) -> None:
        self.announced = False

    def announce(self, reason: str) -> None:
        if not self.announced:
            self.announced = True
            log.warning("gormes: knowledge search falls back to the local markdown index (%s)", reason)

    def reset(self) -> None:
        self.announced = False


fallback_notice = FallbackNotice()


async def search_knowledge(
    query: str,
    *,
    root: Path,
    limit: int = 5,
    brain: BrainConfig | None = None,
    index_path: Path | None = None,
    notice: FallbackNotice = fallback_notice,
) -> KnowledgeAnswer:
    text = check_query(query)
    config = brain or BrainConfig()
    await trio.to_thread.run_sync(check_root, root)  # an unreadable root fails here, whatever answers
    health = await gbrain.detect(config)
    untraced: list[KnowledgeHit] = []
    if health.present:
        hits, failure = await gbrain.search(config, root, text, limit)
        if any(hit.trusted for hit in hits):
            return KnowledgeAnswer(query=text, root=str(root), routed_to="gbrain", brain=health,
                                   fallback_reason=None, hits=hits)
        untraced = hits
        reason = failure or ("gbrain found nothing" if not hits else "no gbrain hit traces to a markdown file")
    else:
        reason = f"no healthy gbrain: {health.status}" + (f" ({health.detail})" if health.detail else "")
    notice.announce(reason)
    local, skipped = await trio.to_thread.run_sync(
        local_search, root, index_path or default_index_path(root), text, limit)
    return KnowledgeAnswer(query=text, root=str(root), routed_to="fallback", brain=health,
                           fallback_reason=reason, hits=local + untraced, skipped=skipped)


def local_search(root: Path, index_path: Path, query: str, limit: int) -> tuple[list[KnowledgeHit], list[str]]:
    """Exact-string grep hits first, then FTS5 hits on other files, up to `limit`."""
    files = markdown_files(root)
    index = KnowledgeIndex(root, index_path)
    report = index.refresh(files)
    exact = grep(files[0], exact_strings(query), limit)
    seen = {hit.path for hit in exact}
    ranked = [hit for hit in index.search(query, limit) if hit.path not in seen]
    return (exact + ranked)[:limit], report.skipped
