"""Per-key concurrency and debounce: the pure rules (decision 0032).

A job may name a concurrency key with a limit: at most that many jobs with the
key are held by workers at once, across workers and hosts. The claim enforces
it in its own transaction (gormes/actors/jobs/batch.py); here is only what a
submission may say. A job may name a debounce key with a window: a submission
with the same name, key and submitter that comes while such a job is still
waiting out its window joins it (`job.coalesced`) instead of becoming a job,
and pushes its start back by the window, never past its max wait.

Pure: no I/O, no clock (`now` comes from the caller, in ms since the epoch).
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from gormes.actors.jobs.state import JobState
from gormes.events.jobs import MAX_COALESCED, MAX_KEY_LENGTH, JobOptions

Need = Callable[[bool, str], None]
Short = Callable[[str | None, int, str], None]


def validate_keys(options: JobOptions, need: Need, short: Short) -> JobOptions:
    """The concurrency key and the debounce options (decision 0032): a key is not
    blank; a limit, window, max wait or merge mode comes with its key; a key's
    limit defaults to 1; a debounced job has a window, no delay and no parent."""
    for field in ("concurrency_key", "debounce_key"):
        value = getattr(options, field)
        need(value is None or bool(value.strip()), f"{field} must not be empty")
        short(value, MAX_KEY_LENGTH, field)
    if options.concurrency_key is None:
        need(options.concurrency_limit is None, "concurrency_limit needs a concurrency_key")
    elif options.concurrency_limit is None:
        options = msgspec.structs.replace(options, concurrency_limit=1)
    if options.debounce_key is None:
        for field in ("debounce_ms", "debounce_max_ms"):
            need(getattr(options, field) is None, f"{field} needs a debounce_key")
        need(options.debounce_mode == "last", "debounce_mode needs a debounce_key")
        return options
    need(options.debounce_ms is not None, "a debounce_key needs debounce_ms (the window)")
    window, most = options.debounce_ms, options.debounce_max_ms
    if window is not None and most is not None:
        need(most >= window, "debounce_max_ms must be at least debounce_ms")
    need(options.delay_ms == 0, "delay_ms cannot be combined with a debounce_key (the window delays it)")
    need(options.parent_id is None, "a child job cannot be debounced (parent_id with debounce_key)")
    return options


def debounce_until(options: JobOptions, created_at: int, now: int) -> int:
    """When a debounced job first submitted at `created_at` runs, after a
    submission at `now`: the window from now, never past the max wait."""
    until = now + (options.debounce_ms or 0)
    if options.debounce_max_ms is not None:
        until = min(until, created_at + options.debounce_max_ms)
    return until


def pending_debounce(state: JobState, now: int) -> bool:
    """Whether a submission at `now` with the job's debounce key may join it: it
    has not started, its window is not over and it has room for one more."""
    return (
        state.options.debounce_key is not None and state.status == "delayed"
        and state.attempts_started == 0 and (state.delay_until or 0) > now
        and state.submissions < MAX_COALESCED
    )
