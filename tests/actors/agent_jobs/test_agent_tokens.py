"""What an agent job's earlier attempts used and never gave the job: the runs'
live usage (a resumed run's copied prefix excluded, subagents included) against
the job's own token deltas."""

from __future__ import annotations

from gormes.actors.agent_jobs.tokens import given_by_runs, missed_tokens, total, used_live
from gormes.events.base import Recorded
from gormes.events.jobs import JobTokensAdded, Tokens
from gormes.events.runs import (
    ForkOrigin,
    RecordedReply,
    RunCancelled,
    RunChildFinished,
    RunChildSpawned,
    RunLlmTurn,
    RunStarted,
    RunTokensAdded,
)


def turn(seq: int, input: int, output: int = 1, model: str = "m") -> RunLlmTurn:
    return RunLlmTurn(seq=seq, request_hash="h", model=model, message_count=1,
                      reply=RecordedReply(content="ok"), usage=Tokens(input=input, output=output))


class Log:
    """Run streams as `read_stream` gives them, positions in one global order."""

    def __init__(self) -> None:
        self.streams: dict[str, list[Recorded]] = {}
        self.position = 0

    def add(self, run_id: str, *events) -> list[Recorded]:
        stream = self.streams.setdefault(run_id, [])
        for event in events:
            self.position += 1
            stream.append(Recorded(self.position, f"run-{run_id}", len(stream) + 1, event.type, event, 0.0))
        return stream

    async def read_run(self, run_id: str) -> list[Recorded]:
        return self.streams.get(run_id, [])


def started(run_id: str, resumed_from: ForkOrigin | None = None) -> RunStarted:
    return RunStarted(run_id=run_id, handler="agent", handler_version="v", resumed_from=resumed_from)


async def test_a_resumed_runs_copied_prefix_is_not_counted_twice_and_subagents_are() -> None:
    log = Log()
    first = log.add("r1", started("r1"), turn(1, 100), RunChildSpawned(seq=2, child_run_id="c1", handler="agent"))
    log.add("c1", started("c1"), turn(1, 10), RunTokensAdded(seq=2, input=5))
    log.add("r1", RunChildFinished(seq=3, child_run_id="c1", status="completed", tokens=Tokens(input=15, output=1)),
            turn(4, 200), RunCancelled(reason="job paused"))
    cut = first[4].position  # the r1 turn with seq 4: the last observation copied
    # r2 resumes r1: a copy of its four observations, then a turn of its own
    log.add("r2", started("r2", ForkOrigin(run_id="r1", position=cut)),
            *[r.event for r in first[1:5]], turn(5, 1000))

    used = await used_live(log.read_run, ["r1", "r2"])
    # r1's turns, its child's turn and token report (not the child's total again), r2's own turn
    assert total(used) == Tokens(input=100 + 10 + 5 + 200 + 1000, output=1 + 1 + 1 + 1)
    # per model: the handler's own report (RunTokensAdded) has none
    assert used == {"m": Tokens(input=100 + 10 + 200 + 1000, output=4), None: Tokens(input=5)}


async def test_missed_is_what_the_runs_used_beyond_what_the_job_was_given() -> None:
    log = Log()
    log.add("r1", started("r1"), turn(1, 100), turn(2, 50), RunCancelled(reason="job lease lost"))
    given = [
        Recorded(1, "job-j", 1, "job.tokens_added",
                 JobTokensAdded(tokens=Tokens(input=100, output=1), model="m", at=0), 0.0),
        # a child job's rollup is not what the job's own runs gave
        Recorded(2, "job-j", 2, "job.tokens_added",
                 JobTokensAdded(tokens=Tokens(input=7), from_child="k", at=0), 0.0),
    ]
    assert given_by_runs(given) == {"m": Tokens(input=100, output=1)}
    assert await missed_tokens(log.read_run, given, ["r1"]) == {"m": Tokens(input=50, output=1)}
    assert await missed_tokens(log.read_run, given, []) == {}
    # once given, nothing is missed any more
    given.append(Recorded(3, "job-j", 3, "job.tokens_added",
                          JobTokensAdded(tokens=Tokens(input=50, output=1), model="m", at=0), 0.0))
    assert await missed_tokens(log.read_run, given, ["r1"]) == {}


async def test_missed_tokens_are_per_model_and_never_more_than_the_totals_miss() -> None:
    log = Log()
    log.add("r1", started("r1"), turn(1, 100, model="a"), turn(2, 40, model="b"), RunCancelled(reason="job paused"))
    given = [Recorded(1, "job-j", 1, "job.tokens_added",
                      JobTokensAdded(tokens=Tokens(input=100, output=1), model="a", at=0), 0.0)]
    assert await missed_tokens(log.read_run, given, ["r1"]) == {"b": Tokens(input=40, output=1)}
    # a job given its tokens before they carried a model: they are under None, and the
    # per-model difference would count them again; the totals' difference is given instead
    old = [Recorded(1, "job-j", 1, "job.tokens_added", JobTokensAdded(tokens=Tokens(input=100, output=1), at=0), 0.0)]
    assert await missed_tokens(log.read_run, old, ["r1"]) == {None: Tokens(input=40, output=1)}


async def test_a_resumed_subagents_copied_prefix_is_not_counted_twice() -> None:
    log = Log()
    log.add("r1", started("r1"), RunChildSpawned(seq=1, child_run_id="c1", handler="agent"))
    first_child = log.add("c1", started("c1"), turn(1, 10), turn(2, 20), RunCancelled(reason="job paused"))
    log.add("r1", RunCancelled(reason="job paused"))
    # r2 resumes r1 (nothing copied: the cut is at the spawn); its spawn resumes c1 as c2
    log.add("r2", started("r2", ForkOrigin(run_id="r1", position=log.streams["r1"][0].position)),
            RunChildSpawned(seq=1, child_run_id="c2", handler="agent"), turn(3, 1000))
    log.add("c2", started("c2", ForkOrigin(run_id="c1", position=first_child[2].position)),
            first_child[1].event, first_child[2].event, turn(3, 300))
    assert total(await used_live(log.read_run, ["r1", "r2"])) == Tokens(input=10 + 20 + 1000 + 300, output=4)
