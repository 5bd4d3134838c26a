"""Job events: every transition of a durable job, on the job's own stream `job-<id>`.

Times are integer milliseconds since the epoch, decided by the caller (the queue
reads its clock, the pure rules never do). Anything random (backoff jitter) is
drawn before deciding and recorded here, so folding a stream again gives the
same state and rebuilding the ledger gives the same rows.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

import msgspec

from gormes.events.base import Event

# Each vocabulary is written once, as the Literal the events are typed with; the
# tuples are read off it (the CLI's choices and the dashboard import these).
Status = Literal[
    "waiting", "delayed", "active", "paused", "waiting-children",
    "completed", "failed", "dead", "cancelled",
]
STATUSES: tuple[str, ...] = get_args(Status)
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "dead", "cancelled"})
ChildPolicy = Literal["fail_parent", "remove_dep", "ignore", "continue"]
POLICIES: tuple[str, ...] = get_args(ChildPolicy)
BackoffKind = Literal["exponential", "fixed"]
BACKOFF_KINDS: tuple[str, ...] = get_args(BackoffKind)
ChildOutcome = Literal["complete", "failed", "dead", "cancelled", "timeout"]
TranscriptKind = Literal["log", "tool_call", "llm_turn", "error"]
# How a debounced job takes a submission coalesced into it: `last`, its data
# replaces the job's; `merge`, it is appended to the job's list of datas.
DebounceMode = Literal["last", "merge"]
DEBOUNCE_MODES: tuple[str, ...] = get_args(DebounceMode)


# The bounds of what a submitter may choose: every time a job computes from them
# (now + delay, a backoff, a deadline) stays far inside a 64-bit integer column.
# They are checked when a job is submitted (`job_rules.validate_options`), never
# by the types below: those are also the shape of recorded events, and an event
# recorded before a bound existed must still decode.
MAX_DELAY_MS = 10 * 365 * 24 * 3600 * 1000  # ten years
MAX_ATTEMPTS = 1000
PRIORITY_RANGE = (-(2**31), 2**31 - 1)  # a 32-bit signed int
MAX_NAME_LENGTH = 200  # job names, queue names, ids
MAX_KEY_LENGTH = 500  # idempotency keys
MAX_CHILDREN = 1_000_000
MAX_WAITING = 1_000_000_000
MAX_CONCURRENCY = 100_000  # a concurrency key's limit
MAX_COALESCED = 1000  # submissions one debounced job takes; the next one starts a new job


class Backoff(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Retry delay: exponential is `2^(n-1) x delay_ms`, fixed is `delay_ms`; +-jitter
    (never more than MAX_DELAY_MS)."""

    kind: BackoffKind = "exponential"
    delay_ms: int = 1000
    jitter: float = 0.2


class JobOptions(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a submitter may choose. Unknown keys are refused when parsed; values
    out of range are refused by `job_rules.validate_options` on every submit."""

    queue: str = "default"
    priority: int = 0  # lower runs first
    delay_ms: int = 0
    max_attempts: int = 3
    backoff: Backoff = Backoff()
    timeout_ms: int | None = None
    max_stalled: int = 5  # clamped to 1..100
    parent_id: str | None = None
    on_child_fail: ChildPolicy = "fail_parent"  # applies when THIS job, as a child, fails
    max_children: int | None = None
    idempotency_key: str | None = None
    max_waiting: int | None = None  # admission control for the queue
    remove_on_complete: bool = False
    remove_on_fail: bool = False
    # At most `concurrency_limit` jobs with this key are held by workers at once,
    # across workers and hosts (a claim skips a job whose key is at its limit).
    concurrency_key: str | None = None
    concurrency_limit: int | None = None  # with a key; None: 1
    # A submission with a debounce key joins the job of the same name, key and
    # submitter that is still waiting out its window (`job.coalesced`), instead of
    # becoming a job; the job runs once `debounce_ms` pass with no new submission,
    # or `debounce_max_ms` after its first one (docs/control.md).
    debounce_key: str | None = None
    debounce_ms: int | None = None
    debounce_mode: DebounceMode = "last"
    debounce_max_ms: int | None = None


class Submitter(msgspec.Struct, frozen=True, kw_only=True):
    """Who submitted a job: its trust class, caller id and memory scope.

    Recorded on `job.submitted` by the operation that submits it (job.submit,
    run.submit: from the executor's Caller), never taken from the submitter's
    input. A job spawned by a running job inherits its parent's submitter."""

    trust: str  # one of gormes.ops.spec.TRUST_CLASSES (events do not import ops)
    caller: str  # "cli", "mcp:<client>", "run-<id>", "cron", ...
    scope: str | None = None  # the memory scope the work is pinned to (None: the class's default)


class Tokens(msgspec.Struct, frozen=True, kw_only=True):
    """Token counts of model usage. `input` counts every prompt token: `cache_read`
    (served from the provider's prompt cache) and `cache_write` (written into it)
    are parts of it. `output` counts every completion token: `reasoning` (the hidden
    reasoning a provider reports apart: OpenAI's `reasoning_tokens`) is part of it.
    Events recorded before a kind existed decode with 0 for it (decision 0035)."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    reasoning: int = 0

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(
            input=self.input + other.input,
            output=self.output + other.output,
            cache_read=self.cache_read + other.cache_read,
            cache_write=self.cache_write + other.cache_write,
            reasoning=self.reasoning + other.reasoning,
        )


# Every kind `Tokens` counts, in its order (the ledger's columns are named after them).
TOKEN_KINDS: tuple[str, ...] = ("input", "output", "cache_read", "cache_write", "reasoning")


class TranscriptEntry(msgspec.Struct, frozen=True, kw_only=True):
    kind: TranscriptKind = "log"
    text: str = ""
    data: Any = None


# -- lifecycle --------------------------------------------------------------


class JobSubmitted(Event, tag="job.submitted", kw_only=True):
    job_id: str
    name: str
    data: Any
    options: JobOptions
    depth: int = 0
    created_at: int
    delay_until: int | None = None  # set when submitted delayed
    replay_of: str | None = None
    # None: recorded before submitters were, or submitted from Python without one.
    submitter: Submitter | None = None


class JobClaimed(Event, tag="job.claimed", kw_only=True):
    worker_id: str
    lock_token: str
    lease_ms: int
    lock_until: int
    at: int


class JobLeaseRenewed(Event, tag="job.lease_renewed", kw_only=True):
    lock_token: str
    lock_until: int
    at: int


class JobCompleted(Event, tag="job.completed", kw_only=True):
    result: Any = None
    at: int


class JobAwaitingChildren(Event, tag="job.awaiting_children", kw_only=True):
    """The holder returned while children are still live: the lock is dropped and
    the job runs again once they are all terminal (it reads their child_done)."""

    at: int


class JobFailed(Event, tag="job.failed", kw_only=True):
    """An attempt failed. `status` is where it went: `delayed` (retry at
    `delay_until`, after `backoff_ms` chosen with jitter), `dead` or `failed`."""

    error: str
    status: Literal["delayed", "dead", "failed"]
    attempt_consumed: bool = True
    delay_until: int | None = None
    backoff_ms: int | None = None
    unrecoverable: bool = False
    at: int


class JobStalled(Event, tag="job.stalled", kw_only=True):
    """The lease expired past the grace: requeued (or dead at max_stalled)."""

    dead: bool = False
    at: int


class JobTimedOut(Event, tag="job.timed_out", kw_only=True):
    """Dead without retry: "timeout exceeded", "handler ignored abort", ..."""

    error: str
    at: int


class JobReleased(Event, tag="job.released", kw_only=True):
    """The holder gave the job back without consuming an attempt (shutdown, lease lost)."""

    reason: str = ""
    at: int


class JobCoalesced(Event, tag="job.coalesced", kw_only=True):
    """A submission with this job's debounce key, inside its window, joined it
    instead of becoming a job of its own: its `data` replaced the job's (`last`)
    or was appended to the job's list (`merge`), and the job now runs at
    `delay_until` (the window again from now, never past its max wait)."""

    data: Any
    mode: DebounceMode
    delay_until: int
    submitter: Submitter | None = None  # who submitted it (as job.submitted's)
    at: int


class JobPromoted(Event, tag="job.promoted", kw_only=True):
    at: int


class JobPaused(Event, tag="job.paused", kw_only=True):
    at: int


class JobResumed(Event, tag="job.resumed", kw_only=True):
    at: int


class JobCancelled(Event, tag="job.cancelled", kw_only=True):
    reason: str = "cancelled"
    at: int


class JobRetried(Event, tag="job.retried", kw_only=True):
    at: int


class JobPruned(Event, tag="job.pruned", kw_only=True):
    at: int


# -- while it runs ------------------------------------------------------------


class JobProgressed(Event, tag="job.progressed", kw_only=True):
    progress: Any
    at: int


class JobTokensAdded(Event, tag="job.tokens_added", kw_only=True):
    """Tokens the job's holder spent (`from_child` None), or a terminal child's total
    rolled up (whatever its outcome). `model`: the model whose turn they are (None:
    reported without one, a roll-up, or recorded before it was kept); the ledger
    keeps per-model totals of the holders' own tokens from it (decision 0035)."""

    tokens: Tokens
    from_child: str | None = None
    model: str | None = None
    at: int


class JobTranscribed(Event, tag="job.transcribed", kw_only=True):
    entry: TranscriptEntry
    at: int


# -- family and inbox ---------------------------------------------------------


class JobChildAdded(Event, tag="job.child_added", kw_only=True):
    child_id: str
    at: int


class JobMessageSent(Event, tag="job.message_sent", kw_only=True):
    message_id: str
    sender: str
    payload: Any
    at: int


class JobChildDone(Event, tag="job.child_done", kw_only=True):
    """A child reached a terminal state; also a message in this job's inbox."""

    message_id: str
    child_id: str
    outcome: ChildOutcome
    result: Any = None
    error: str | None = None
    policy: ChildPolicy = "fail_parent"
    at: int


class JobChildrenSettled(Event, tag="job.children_settled", kw_only=True):
    """No live child is left (or one failed under `continue`): runnable again."""

    at: int


class JobInboxRead(Event, tag="job.inbox_read", kw_only=True):
    message_ids: tuple[str, ...]
    at: int


JobEvent = (
    JobSubmitted | JobClaimed | JobLeaseRenewed | JobCompleted | JobAwaitingChildren
    | JobFailed | JobStalled | JobTimedOut | JobReleased | JobPromoted | JobPaused
    | JobResumed | JobCancelled | JobRetried | JobPruned | JobProgressed | JobTokensAdded
    | JobTranscribed | JobChildAdded | JobMessageSent | JobChildDone | JobChildrenSettled
    | JobInboxRead | JobCoalesced
)


def job_stream(job_id: str) -> str:
    return f"job-{job_id}"
