"""A GBrain brain, detected by its health rather than by its presence on PATH.

`gbrain doctor --json` must exit 0 and print a JSON object whose `status` is
`ok` or `warnings`; anything else (status `error`, a missing binary, a non-zero
exit, output that is not such an object, or no answer within the timeout) means
there is no usable brain for this call. Detection runs on every call: a brain
that is slow now is absent now, and may be back on the next call.

`gbrain search QUERY --limit K` is read in either of two shapes (see
docs/knowledge.md): JSON (a list of results, or an object with `results`), each
result naming `path` or `slug` and optionally `title`, `score` and `snippet`
(or `chunk_text`/`text`); or GBrain's text lines `[0.5332] some/slug -- snippet`.
"""

from __future__ import annotations

import math
import os
import re
import stat
from pathlib import Path
from typing import Any

import msgspec
import trio

from gormes.knowledge import MARKDOWN_SUFFIX, KnowledgeHit
from gormes.contained import Root
from gormes.ops.spec import InvalidOperationInput, PathOutsideWorkspace

COMMAND_ENV = "GORMES_GBRAIN"
HEALTHY = frozenset({"ok", "warnings"})
DETAIL_MAX = 200
_TEXT_HIT = re.compile(r"^\s*\[(?P<score>-?[0-9.eE+-]+)\]\s+(?P<slug>\S+)(?:\s+--\s+(?P<snippet>.*))?$")


class BrainConfig(msgspec.Struct, frozen=True, kw_only=True):
    """How to reach GBrain: the executable (default $GORMES_GBRAIN, else
    `gbrain`, found on PATH when run) and a timeout per command, in seconds."""

    command: str = ""
    doctor_timeout: float = 5.0
    search_timeout: float = 15.0
    sync_timeout: float = 60.0

    @property
    def executable(self) -> str:
        return self.command or os.environ.get(COMMAND_ENV) or "gbrain"


class BrainHealth(msgspec.Struct, frozen=True, kw_only=True):
    """What `gbrain doctor --json` said. `status` is GBrain's own word when it
    answered (`ok`, `warnings`, `error`), else why it did not: `missing`,
    `failed` (non-zero exit), `unreadable` (not a JSON object with a status)
    or `timeout`."""

    present: bool
    status: str
    detail: str = ""


class CommandResult(msgspec.Struct, frozen=True, kw_only=True):
    outcome: str  # "ok", "missing", "failed", "timeout"
    stdout: bytes = b""
    detail: str = ""


async def run_brain(config: BrainConfig, args: list[str], timeout: float, cwd: Path | None = None) -> CommandResult:
    """Run `gbrain ARGS`; never raises for a missing, failing or slow brain."""
    argv = [config.executable, *args]
    with trio.move_on_after(timeout) as scope:
        try:
            done = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False, cwd=cwd)
        except FileNotFoundError:
            return CommandResult(outcome="missing", detail=f"{config.executable}: not found")
        except OSError as exc:
            return CommandResult(outcome="missing", detail=f"{config.executable}: {exc.strerror or exc}")
    if scope.cancelled_caught:
        return CommandResult(outcome="timeout", detail=f"{config.executable} {args[0]}: no answer in {timeout:g}s")
    if done.returncode != 0:
        said = (done.stderr or done.stdout).decode("utf-8", "replace").strip().splitlines()
        return CommandResult(outcome="failed", stdout=done.stdout,
                             detail=f"exit {done.returncode}" + (f": {said[-1][:DETAIL_MAX]}" if said else ""))
    return CommandResult(outcome="ok", stdout=done.stdout)


def health_from(result: CommandResult) -> BrainHealth:
    """The brain's health from the outcome of `gbrain doctor --json` (pure)."""
    if result.outcome != "ok":
        return BrainHealth(present=False, status=result.outcome, detail=result.detail)
    try:
        report = msgspec.json.decode(result.stdout)
    except msgspec.DecodeError:
        return BrainHealth(present=False, status="unreadable", detail="doctor output is not JSON")
    status = report.get("status") if isinstance(report, dict) else None
    if not isinstance(status, str):
        return BrainHealth(present=False, status="unreadable", detail="doctor output has no status")
    status = status.strip().lower()
    return BrainHealth(present=status in HEALTHY, status=status, detail=_failing_checks(report))


def _failing_checks(report: dict[str, Any]) -> str:
    checks = report.get("checks")
    if not isinstance(checks, list):
        return ""
    named = [
        str(c.get("name", "?")) for c in checks
        if isinstance(c, dict) and str(c.get("status", "ok")).lower() not in ("ok", "pass")
    ]
    return ", ".join(named)[:DETAIL_MAX]


async def detect(config: BrainConfig) -> BrainHealth:
    return health_from(await run_brain(config, ["doctor", "--json"], config.doctor_timeout))


async def search(config: BrainConfig, root: Path, query: str, limit: int) -> tuple[list[KnowledgeHit], str]:
    """The brain's hits for `query`, each traced to a file under `root` (or
    marked untrusted), and a note when the search itself failed."""
    args = ["search", query, "--limit", str(limit)]
    if query.startswith("-"):
        args = ["search", "--limit", str(limit), "--", query]
    result = await run_brain(config, args, config.search_timeout, cwd=root)
    if result.outcome != "ok":
        return [], f"gbrain search: {result.outcome}" + (f" ({result.detail})" if result.detail else "")
    return parse_search_output(result.stdout, root)[:limit], ""


async def sync(config: BrainConfig, root: Path) -> CommandResult:
    return await run_brain(config, ["sync", "--repo", str(root)], config.sync_timeout, cwd=root)


def parse_search_output(stdout: bytes, root: Path) -> list[KnowledgeHit]:
    """Hits from either documented output shape (pure but for checking that a
    named file exists under `root`)."""
    try:
        data = msgspec.json.decode(stdout)
    except msgspec.DecodeError:
        raw = _text_results(stdout.decode("utf-8", "replace"))
    else:
        results = data.get("results") if isinstance(data, dict) else data
        raw = [r for r in results if isinstance(r, dict)] if isinstance(results, list) else []
    hits = [_hit(item, root) for item in raw]
    return [h for h in hits if h is not None]


def _text_results(text: str) -> list[dict[str, Any]]:
    found = []
    for line in text.splitlines():
        match = _TEXT_HIT.match(line)
        if match:
            found.append({"slug": match["slug"], "score": match["score"], "snippet": match["snippet"] or ""})
    return found


def _hit(item: dict[str, Any], root: Path) -> KnowledgeHit | None:
    named = item.get("path") or item.get("slug") or item.get("file")
    if not isinstance(named, str) or not named.strip():
        return None
    canonical = trace_to_file(named.strip(), root)
    snippet = item.get("snippet") or item.get("chunk_text") or item.get("text") or ""
    title = item.get("title") or Path(canonical or named).stem
    return KnowledgeHit(
        path=canonical or named.strip(), title=str(title), snippet=str(snippet).strip()[:400],
        score=_score(item.get("score")), source="gbrain", trusted=canonical is not None,
    )


def _score(value: Any) -> float:
    try:
        score = float(value)
    except (TypeError, ValueError):
        return 0.0
    return score if math.isfinite(score) else 0.0


def trace_to_file(named: str, root: Path) -> str | None:
    """The path, relative to `root`, of the markdown file a brain result names
    (a path relative to the root, an absolute path under it, or a slug without
    `.md`); None when no such regular file lies inside the root. Looked up
    through gormes/contained.py: a link pointing out traces to nothing."""
    options = [named]
    if not named.endswith(MARKDOWN_SUFFIX):
        options.append(named + MARKDOWN_SUFFIX)
    try:
        contained = Root(root, label="knowledge root")
    except OSError:
        return None
    with contained:
        for option in options:
            try:
                with contained.locate(option) as where:
                    if where.info is not None and stat.S_ISREG(where.info.st_mode) and where.relative.endswith(MARKDOWN_SUFFIX):
                        return where.relative
            except (InvalidOperationInput, PathOutsideWorkspace, OSError):
                continue
    return None
