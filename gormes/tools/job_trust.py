"""Who may do what to a job through the operations (job.*, run.submit).

A job records its `Submitter` (the caller's trust class, id and memory scope).
Operators and the system (cron, the daemon) act on any job. A gateway or a child
agent acts only on its own work: the jobs whose recorded submitter has its trust
class and its memory scope (as a run acts for a caller, gormes/tools/run_trust.py:
a gateway client and the runs acting for it are one owner; a job spawned by a
running job records its parent's submitter). So:

- it may read (job.get, job.list, job.inbox), attach children to (`parent_id`),
  pause, resume or cancel only its own jobs;
- it starts a run only through `run.submit`, never as a raw `agent` job, and it may
  not choose the run's model, except one the operator lists in
  `GORMES_GATEWAY_MODELS` (comma-separated model specs, compared as written);
- it may not jump the queue (a negative priority) or send job data (`job.submit`'s,
  or the job `run.submit` makes) or a message (`job.send`, `run.send`) over
  `MAX_UNTRUSTED_DATA_BYTES` of JSON, nor grow a debounced `merge` job's list of
  datas past it (`data_cap`: a submission that would starts a job of its own;
  1000 joins of 1 MiB made a 1 GB job, each join rewriting all of it);
- its concurrency key is its own (`own_concurrency_key`): the key recorded is the
  one it gave under a prefix naming its trust class and its scope's digest, so its
  jobs never hold, or count against, the operator's key of that name (a
  gateway's job that slept holding `prod` kept the operator's `prod` jobs
  waiting), nor another owner's. It reads the key back as it gave it
  (`key_as_given`: job.submit, job.get, job.list, ... take its own prefix off);
  the operator reads the key stored;
- its jobs go only on a queue the operator lists in `GORMES_GATEWAY_QUEUES`
  (comma-separated queue names, compared as written; `default` when unset), so
  it cannot line up jobs ahead of the operator's on a queue the operator keeps
  for its own work (`own_queue`). The first listed is its default queue: a job
  that names none, or names `default` while the list leaves `default` out, goes
  there;
- its whole trust class may not hold more than `GORMES_GATEWAY_MAX_LIVE_JOBS` (1000
  by default) jobs that are not finished: every gateway together, every child agent
  together. The cap is the class's, not the caller's, because an MCP client names
  itself: a cap per name would be multiplied by inventing names. It is counted in
  the transaction that records the job, under the store's write lock, so
  submits made at once (from any number of processes or hosts) are counted one
  after the other and never pass it (`live_jobs_check`, decision 0070). A
  submission that joins a job it already has (its idempotency key, its debounce
  window) adds none and is not refused.

Every refusal is an `OperationDenied` (bad sizes an `InvalidOperationInput`, a
setting the operator got wrong a `UserError` naming it), raised before anything
is recorded, read from a path or sent to a provider; the executor audits it
(decisions 0060, 0066).
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from gormes.errors import UserError
from gormes.events.jobs import MAX_KEY_LENGTH, MAX_NAME_LENGTH, JobOptions, Submitter
from gormes.ops.spec import Caller, InvalidOperationInput, OperationDenied
from gormes.settings import count_setting

if TYPE_CHECKING:
    from gormes.actors.jobs.queue import Job
    from gormes.events.store import Transaction

PRIVILEGED = frozenset({"operator", "system"})
RUN_JOBS = frozenset({"agent"})  # job names whose handler starts a run
GATEWAY_MODELS_ENV = "GORMES_GATEWAY_MODELS"
MAX_UNTRUSTED_DATA_BYTES = 1024 * 1024
MAX_LIVE_JOBS_ENV = "GORMES_GATEWAY_MAX_LIVE_JOBS"
DEFAULT_MAX_LIVE_JOBS = 1000
GATEWAY_QUEUES_ENV = "GORMES_GATEWAY_QUEUES"
DEFAULT_QUEUE = JobOptions().queue  # the queue of a job that names none: "default"


def privileged(caller: Caller) -> bool:
    return caller.trust in PRIVILEGED


def submitter_of(caller: Caller) -> Submitter:
    """The Submitter a job records for `caller`: its trust class, id and memory scope
    (a gateway or child agent's pinned scope, so work it submits is pinned there too;
    for the classes that name theirs, their default, None meaning project:default)."""
    from gormes.tools.memory import NAMES_ITS_SCOPE, bound_scope

    scope = caller.scope if caller.trust in NAMES_ITS_SCOPE else bound_scope(caller, None)
    return Submitter(trust=caller.trust, caller=caller.id, scope=scope)


def owner_key(caller: Caller) -> tuple[str, str | None]:
    """What a job's submitter must match for `caller` to own it: (trust, scope)."""
    return caller.trust, submitter_of(caller).scope


def owns(caller: Caller, submitter: Submitter | None) -> bool:
    """Whether a job that recorded `submitter` is `caller`'s own work."""
    return submitter is not None and (submitter.trust, submitter.scope) == owner_key(caller)


def require_may_act_on(caller: Caller, job: Job, what: str) -> None:
    """Refuse a gateway or child agent acting on a job that is not its own."""
    if not privileged(caller) and not owns(caller, job.submitter):
        raise OperationDenied(
            f"a {caller.trust!r} caller may not {what} job {job.id}: it is another caller's"
            " (only its submitter, an operator or the system may)"
        )


def check_job_submit(caller: Caller, name: str, data: Any, priority: int) -> None:
    """job.submit's checks before the parent's (see `require_may_act_on`)."""
    if privileged(caller):
        return
    if name in RUN_JOBS:
        raise OperationDenied(
            f"a {caller.trust!r} caller may not submit an {name!r} job directly: use run.submit"
        )
    check_priority(caller, priority)
    check_size(caller, data, "job data")


def check_size(caller: Caller, value: Any, what: str) -> None:
    """Refuse a gateway or child agent `value` (job data, a run's job, a message to a
    job's or a run's inbox) over `MAX_UNTRUSTED_DATA_BYTES` of JSON."""
    if privileged(caller):
        return
    size = len(msgspec.json.encode(value))
    if size > MAX_UNTRUSTED_DATA_BYTES:
        raise InvalidOperationInput(
            f"{what} is {size} bytes of JSON; a {caller.trust!r} caller may send at most"
            f" {MAX_UNTRUSTED_DATA_BYTES}"
        )


def data_cap(caller: Caller) -> int | None:
    """The most bytes of JSON a job of `caller`'s may hold as its data, debounced
    `merge` submissions joined into it included (`JobQueue.submit`'s `merge_cap`);
    None for the operator and the system."""
    return None if privileged(caller) else MAX_UNTRUSTED_DATA_BYTES


def own_options(caller: Caller, options: JobOptions) -> JobOptions:
    """job.submit's `options` as they are recorded for `caller`: on its own queue
    (`own_queue`), with its own concurrency key (`own_concurrency_key`)."""
    options = own_concurrency_key(caller, options)
    queue = own_queue(caller, options.queue)
    return options if queue == options.queue else msgspec.structs.replace(options, queue=queue)


def key_prefix(caller: Caller) -> str:
    """What a gateway's or child agent's concurrency key is recorded under:
    `<trust>:<12 hex digits of its scope's sha256>/`."""
    trust, scope = owner_key(caller)
    return f"{trust}:{hashlib.sha256((scope or '').encode()).hexdigest()[:12]}/"


def own_concurrency_key(caller: Caller, options: JobOptions) -> JobOptions:
    """`options` with a gateway's or child agent's concurrency key under its own
    prefix (`key_prefix`): a key no other owner can name, and none of the
    operator's unless the operator writes it so (a prefix of fixed shape, so two
    owners' keys never meet). The operator's and the system's keys are kept as
    given: they are shared, as decision 0032 says."""
    key = options.concurrency_key
    if key is None or not key.strip() or privileged(caller):  # a blank key is refused as given
        return options
    prefix = key_prefix(caller)
    most = MAX_KEY_LENGTH - len(prefix)
    if len(key) > most:
        raise InvalidOperationInput(f"concurrency_key must be at most {most} characters for a {caller.trust!r} caller")
    return msgspec.structs.replace(options, concurrency_key=prefix + key)


def key_as_given(caller: Caller, key: str | None) -> str | None:
    """A job's stored concurrency key as `caller` reads it: for a gateway or child
    agent, without its own prefix (the key it gave); any other key, and every key
    for the operator and the system, as stored. (It reads only its own jobs; a key
    under its prefix on one of them is one it gave, or one the operator wrote so.)"""
    if key is None or privileged(caller):
        return key
    prefix = key_prefix(caller)
    return key[len(prefix):] if key.startswith(prefix) else key


def check_priority(caller: Caller, priority: int) -> None:
    if not privileged(caller) and priority < 0:
        raise OperationDenied(
            f"a {caller.trust!r} caller may not jump the queue: priority must be >= 0, not {priority}"
        )


def max_live_jobs() -> int:
    """The operator's cap on the unfinished jobs of each untrusted class."""
    return count_setting(None, MAX_LIVE_JOBS_ENV, os.environ, MAX_LIVE_JOBS_ENV, DEFAULT_MAX_LIVE_JOBS)


def live_jobs_check(caller: Caller) -> Callable[[Transaction], None] | None:
    """What `JobQueue.submit` runs in the transaction that records a gateway's or
    child agent's new job (`refuse_past_live_cap`); None for the operator and the
    system, who are not capped. The cap is read here: a bad setting is refused
    before anything is written."""
    if privileged(caller):
        return None
    return functools.partial(refuse_past_live_cap, trust=caller.trust, cap=max_live_jobs())


def refuse_past_live_cap(tx: Transaction, *, trust: str, cap: int) -> None:
    """Refuse a new job when the `trust` class already holds the cap of unfinished
    jobs. Counted in the ledger in the transaction that then records the job, under
    the store's write lock, so concurrent submits are counted one after the other
    (decision 0070); read from the index of the capped classes' live jobs, so the
    lock is held for the class's jobs, not for every live job (its addendum)."""
    from gormes.actors.jobs.queue import JobQueue  # loaded on first use, as job.submit loads it

    if JobQueue.live_count_in(tx, trust) >= cap:
        raise OperationDenied(
            f"{trust!r} callers may hold at most {cap} unfinished jobs between them"
            f" ({MAX_LIVE_JOBS_ENV}); wait for some to finish"
        )


def allowed_queues() -> tuple[str, ...]:
    """The queues the operator lets gateways and child agents use, in its order (the
    first is their default queue): `GORMES_GATEWAY_QUEUES`, comma-separated, each
    name stripped; unset or naming none, `default` alone. A name no queue can have
    is the operator's mistake, and a clear line rather than a list that never
    matches."""
    listed = os.environ.get(GATEWAY_QUEUES_ENV, "")
    queues = tuple(dict.fromkeys(name.strip() for name in listed.split(",") if name.strip()))
    for name in queues:
        if len(name) > MAX_NAME_LENGTH:
            raise UserError(
                f"{GATEWAY_QUEUES_ENV} names a queue of {len(name)} characters; a queue's name has at most"
                f" {MAX_NAME_LENGTH}"
            )
    return queues or (DEFAULT_QUEUE,)


def own_queue(caller: Caller, queue: str) -> str:
    """The queue a gateway's or child agent's job goes on: `queue`, if the operator
    lists it; its default queue (the first listed) for `default`, the queue of a job
    that names none, when the list leaves `default` out; else a refusal naming the
    queues it may use. The operator and the system name any queue."""
    if privileged(caller):
        return queue
    allowed = allowed_queues()
    if queue in allowed:
        return queue
    if queue == DEFAULT_QUEUE:
        return allowed[0]
    raise OperationDenied(
        f"a {caller.trust!r} caller may not submit to queue {queue!r}: the operator lets gateways and"
        f" child agents use only {', '.join(repr(name) for name in allowed)} ({GATEWAY_QUEUES_ENV})"
    )


def allowed_models() -> frozenset[str]:
    """The models the operator lets gateways and child agents choose."""
    listed = os.environ.get(GATEWAY_MODELS_ENV, "")
    return frozenset(spec.strip() for spec in listed.split(",") if spec.strip())


def check_model(caller: Caller, model: str | None) -> None:
    """Refuse a model a gateway or child agent may not choose. The refusal never
    names the model: it must say nothing about whether a path exists."""
    if model is None or privileged(caller) or model in allowed_models():
        return
    raise OperationDenied(
        f"a {caller.trust!r} caller may not choose a run's model, except one the operator"
        f" lists in {GATEWAY_MODELS_ENV}"
    )
