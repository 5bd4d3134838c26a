"""Steering from `gormes top`: the operator's messages and their receipts, and
decisions on approval requests.

    receipt = await send_message(executor, action)          # through the audited door
    receipt = await check_receipt(store, queue, receipt, job_run=...)  # read yet?
    line = await decide_approval(executor, action, caller)  # approval.approve / approval.deny

A message to a run goes through `run.send` (the run's own inbox, `run.message_sent`);
one to a job through `job.send` (the job's inbox, which an agent job's run also
reads). Both are calls on the executor as the operator, so each is validated and
audited once (decision 0019). The receipt is read, not written: the run's
`run.inbox_read` event that returned the message (its seq), or for a job without
a run the inbox row's `read_at`, so watching a receipt adds nothing to the log.

An approval is decided through `approval.approve` or `approval.deny` with the
typed reason, as the operator, audited like `gormes approve|deny` (decision 0033):
a request no longer pending is refused by the operation, and its one line shown.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gormes.actors.jobs.queue import JobQueue
from gormes.dashboard.keys import Action
from gormes.dashboard.model import Receipt, receipt_seq
from gormes.events.runs import run_stream
from gormes.events.store import EventStore


async def send_message(executor: Any, action: Action, caller: Any) -> Receipt:
    """`action` (kind "send") through the executor as `caller` (the operator);
    raises what the operation raises."""
    if action.run_id is not None:
        sent = await executor.call("run.send", {"run_id": action.run_id, "payload": action.text}, caller)
        return Receipt(message_id=sent.message_id, run_id=action.run_id)
    sent = await executor.call("job.send", {"id": action.job_id, "payload": action.text}, caller)
    return Receipt(message_id=sent.id, job_id=action.job_id)


async def check_receipt(store: EventStore, queue: JobQueue, receipt: Receipt, *,
                        job_run: str | None = None) -> Receipt:
    """`receipt`, marked read if it now is. `job_run`: the job's current run, whose
    inbox reads also return the job's messages."""
    if receipt.read:
        return receipt
    run_id = receipt.run_id or job_run
    if run_id is not None:
        seq = receipt_seq(await store.read_stream(run_stream(run_id)), receipt.message_id)
        if seq is not None:
            return msgspec.structs.replace(receipt, read_seq=seq, read=True)
    if receipt.job_id is not None:
        for message in await queue.inbox(receipt.job_id):
            if message.id == receipt.message_id and message.read_at is not None:
                return msgspec.structs.replace(receipt, read=True)
    return receipt



async def decide_approval(executor: Any, action: Action, caller: Any) -> str:
    """`action` (kind "approve" or "deny") through the executor as `caller`; the line
    to show. Raises what the operation raises."""
    operation = "approval.approve" if action.kind == "approve" else "approval.deny"
    decided = await executor.call(operation, {"id": action.approval_id, "reason": action.text}, caller)
    resumed = f"; job {decided.resumed_job} resumed" if decided.resumed_job else ""
    return f"approval {decided.id} {decided.status}: {decided.operation} for run {decided.run_id}{resumed}"
