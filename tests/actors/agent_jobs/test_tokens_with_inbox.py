"""An agent job's turn tokens ride on its next inbox read (one transaction a step,
decision 0025): JobContext.tokens_later, then inbox() or flush_tokens()."""

from __future__ import annotations

import pytest
from run_helpers import run_events

from gormes.actors.agent_jobs.handler import agent_job
from gormes.actors.jobs.context import JobContext
from gormes.actors.jobs.queue import JobQueue, LockLost
from gormes.actors.jobs.session import JobSession
from gormes.events.jobs import JobInboxRead, JobTokensAdded, Tokens, job_stream
from gormes.events.runs import RunInboxRead, run_stream
from gormes.events.sqlite import SQLiteEventStore


async def _claimed(store, **kw) -> tuple[JobQueue, JobContext]:
    queue = await JobQueue.open(store)
    await queue.submit("a")
    job = await queue.claim({"a"})
    return queue, JobContext(queue, job, **kw)


async def test_the_inbox_read_writes_the_waiting_tokens_in_its_transaction(tmp_path) -> None:
    async with SQLiteEventStore.open(tmp_path / "db") as store:
        queue, ctx = await _claimed(store)
        await queue.send(ctx.id, {"hi": 1})
        ctx.tokens_later(Tokens(input=3, output=1), model="m")
        ctx.tokens_later(Tokens(input=2), model=None)
        assert ctx.tokens_waiting == 2
        assert (await queue.get(ctx.id)).tokens == Tokens()  # nothing written yet
        head = await store.head()
        [message] = await ctx.inbox()
        assert message.payload == {"hi": 1} and ctx.tokens_waiting == 0
        written = await store.read_all(after_position=head)
        assert [type(r.event) for r in written] == [JobTokensAdded, JobTokensAdded, JobInboxRead]
        assert len({r.event.at for r in written}) == 1  # one session's now: one transaction
        assert (await queue.get(ctx.id)).tokens == Tokens(input=5, output=1)
        ctx.tokens_later(Tokens(output=4))
        await ctx.flush_tokens()
        await ctx.flush_tokens()  # nothing waiting: nothing written
        assert (await queue.get(ctx.id)).tokens == Tokens(input=5, output=5)


async def test_an_empty_inbox_is_answered_without_folding_the_job(tmp_path, monkeypatch) -> None:
    async with SQLiteEventStore.open(tmp_path / "db") as store:
        queue, ctx = await _claimed(store)
        folds: list[str] = []
        state = JobSession.state
        monkeypatch.setattr(JobSession, "state", lambda s, job_id: folds.append(job_id) or state(s, job_id))
        assert await ctx.inbox() == []
        assert folds == []
        await queue.send(ctx.id, "x")
        assert [m.payload for m in await ctx.inbox()] == ["x"]
        assert folds  # a message to read: the job is folded and decides as before


async def test_the_holders_writes_fold_the_job_from_the_state_kept_not_its_whole_stream(tmp_path, monkeypatch) -> None:
    import gormes.actors.jobs.session as session

    async with SQLiteEventStore.open(tmp_path / "db") as store:
        queue, ctx = await _claimed(store)
        whole: list[str] = []
        load = session.load
        monkeypatch.setattr(session, "load", lambda tx, b, job_id: whole.append(job_id) or load(tx, b, job_id))
        for i in range(3):  # the claim's state, then each write's
            ctx.tokens_later(Tokens(input=i + 1), model="m")
            await ctx.flush_tokens()
            await ctx.log(f"step {i}")
        assert whole == []
        await queue.send(ctx.id, "x")  # another writer (which folds): the kept state falls behind
        whole.clear()
        ctx.tokens_later(Tokens(output=2))
        assert [m.payload for m in await ctx.inbox()] == ["x"]
        assert whole == []  # the tail after the kept state was folded, not the stream
        job = await queue.get(ctx.id)
        assert job.tokens == Tokens(input=6, output=2) and job.status == "active"
        monkeypatch.setattr(session, "load", load)

        def fold(tx):  # what a session that kept nothing decides from: the same state
            return JobSession(tx, 0).state(ctx.id)
        kept = queue._claimed_states[ctx.id]
        assert await store.transact(fold) == kept


async def test_a_token_that_no_longer_holds_the_job_writes_nothing(tmp_path) -> None:
    async with SQLiteEventStore.open(tmp_path / "db") as store:
        lost: list[bool] = []
        queue, ctx = await _claimed(store, on_lock_lost=lambda: lost.append(True))
        await queue.release(ctx.id, ctx.lock_token)
        ctx.tokens_later(Tokens(input=1))
        head = await store.head()
        with pytest.raises(LockLost):
            await ctx.inbox()
        ctx.tokens_later(Tokens(input=1))
        with pytest.raises(LockLost):
            await ctx.flush_tokens()
        assert await store.head() == head and lost == [True, True]


class _Appends:
    """Each transaction's appends, as (stream, event type): the store's transact
    and transact_held wrapped, every `tx.append` seen on its way."""

    def __init__(self, store, monkeypatch) -> None:
        self.transactions: list[list[tuple[str, str]]] = []
        for name in ("transact", "transact_held"):
            monkeypatch.setattr(store, name, self._spy(getattr(store, name)))

    def _spy(self, submit):
        async def spied(fn):
            seen: list[tuple[str, str]] = []
            self.transactions.append(seen)

            def run(tx):
                append = tx.append

                def recorded(stream, events, *args, **kw):
                    seen.extend((stream, e.type) for e in events)
                    return append(stream, events, *args, **kw)

                tx.append = recorded
                try:
                    return fn(tx)
                finally:
                    tx.append = append

            return await submit(run)

        return spied


async def test_a_runs_inbox_read_and_its_jobs_are_one_transaction(tmp_path, script, monkeypatch) -> None:
    async with SQLiteEventStore.open(tmp_path / "db") as store:
        model = script({"replies": [{"text": "done"}]})
        queue = await JobQueue.open(store)
        await queue.submit("agent", {"prompt": "p", "model": model})
        job = await queue.claim({"agent"})
        await queue.send(job.id, {"note": 1})
        appends = _Appends(store, monkeypatch)
        result = await agent_job(JobContext(queue, job), job.data)
        run = run_stream(result["run_id"])
        [read] = [t for t in appends.transactions if (job_stream(job.id), "job.inbox_read") in t]
        assert read == [(job_stream(job.id), "job.inbox_read"), (run, "run.inbox_read")]
        [receipt] = [e for e in await run_events(store, result["run_id"]) if isinstance(e, RunInboxRead)]
        assert [m.payload for m in receipt.messages] == [{"note": 1}]
        tokens = [t for t in appends.transactions if (job_stream(job.id), "job.tokens_added") in t]
        assert tokens and all((run, "run.inbox_read") not in t for t in tokens)  # the one turn: at the end


async def test_a_lost_lease_undoes_the_runs_receipt_with_the_jobs_read(tmp_path) -> None:
    async with SQLiteEventStore.open(tmp_path / "db") as store:
        lost: list[bool] = []
        queue, ctx = await _claimed(store, on_lock_lost=lambda: lost.append(True))
        await queue.send(ctx.id, "x")
        await queue.release(ctx.id, ctx.lock_token)
        ctx.tokens_later(Tokens(input=1))
        head = await store.head()
        with pytest.raises(LockLost):
            await ctx.inbox_with(lambda tx, messages: tx.append("run-r", [RunInboxRead(seq=1, messages=())]))
        assert await store.head() == head and lost == [True]


async def test_an_empty_inbox_read_runs_no_sql_and_still_sees_another_process_message(tmp_path) -> None:
    """With the job's state kept from its last write (the stream not moved since),
    an empty read is answered from it: the read and its tokens only append, and
    go in with the batch's INSERT (no query, no savepoint). A message sent through
    another connection moves the stream, and the next read finds it."""
    async with SQLiteEventStore.open(tmp_path / "db") as store:
        queue, ctx = await _claimed(store)
        ctx.tokens_later(Tokens(input=1), model="m")
        statements: list[str] = []
        store.log.conn.set_trace_callback(statements.append)
        assert await ctx.inbox() == []
        store.log.conn.set_trace_callback(None)
        # the batch's own (its head, the ledger's position and rows) and nothing of the read's
        assert not [s for s in statements if s.startswith("SAVEPOINT") or "inbox" in s], statements
        assert (await queue.get(ctx.id)).tokens == Tokens(input=1)

        async with SQLiteEventStore.open(tmp_path / "db") as other:
            await (await JobQueue.open(other)).send(ctx.id, "from elsewhere")
        assert [m.payload for m in await ctx.inbox()] == ["from elsewhere"]
        assert await ctx.inbox() == []
