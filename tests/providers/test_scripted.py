from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import trio
import trio.testing
from timer_tasks import timer_tasks

from gormes.providers import (
    InvalidModelReply,
    Message,
    ModelReply,
    ModelRequest,
    ProviderError,
    ToolCall,
    Usage,
    open_provider,
)
from gormes.providers.scripted import (
    ScriptedProvider,
    ScriptError,
    estimate_tokens,
)
from gormes.errors import UserError

SCRIPT = {
    "model": "scripted",
    "agents": [
        {
            "name": "researcher-events",
            "match": "Topic: events",
            "replies": [
                {"tool_calls": [{"name": "fs.read", "arguments": {"path": "docs/events.md"}}]},
                {"text": "Events are typed and append-only."},
            ],
        },
        {
            "name": "researcher-actors",
            "match": "Topic: actors",
            "replies": [
                {"tool_calls": [{"name": "fs.grep", "arguments": {"pattern": "actor", "root": "docs"}}]},
                {"tool_calls": [{"name": "fs.read", "arguments": {"path": "docs/actors.md"}}]},
                {"text": "An actor owns one stream.", "usage": {"input": 100, "output": 10, "cache_read": 40}},
            ],
        },
        {
            "name": "parent",
            "replies": [
                {"text": "Let me delegate.", "tool_calls": [
                    {"name": "spawn", "arguments": {"task": "Topic: events"}, "id": "spawn-a"},
                    {"name": "spawn", "arguments": {"task": "Topic: actors"}, "id": "spawn-b"},
                ]},
                {"text": "Done: both topics summarised."},
            ],
        },
    ],
}


def write_script(tmp_path: Path, script: object, name: str = "script.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(script))
    return path


@pytest.fixture
def script_path(tmp_path: Path) -> Path:
    return write_script(tmp_path, SCRIPT)


def request(*messages: Message) -> ModelRequest:
    return ModelRequest(model="scripted", messages=messages)


async def converse(provider: ScriptedProvider, task: str, *, jitter: random.Random | None = None) -> list[ModelReply]:
    """A minimal agent loop: model turn, fake tool results, until a final answer."""
    messages = [Message(role="system", content="You are a researcher."), Message(role="user", content=task)]
    replies = []
    while True:
        if jitter:
            await trio.sleep(jitter.random() / 1000)
        reply = await provider.complete(request(*messages))
        replies.append(reply)
        messages.append(reply.message)
        if not reply.message.tool_calls:
            return replies
        for call in reply.message.tool_calls:
            messages.append(Message(role="tool", content=f"result of {call.name}", tool_call_id=call.id))


async def test_a_script_plays_the_same_twice(script_path):
    first = await converse(ScriptedProvider.open(script_path), "Topic: actors")
    second = await converse(ScriptedProvider.open(script_path), "Topic: actors")
    assert first == second
    assert [r.message.content for r in first] == ["", "", "An actor owns one stream."]
    assert first[0].message.tool_calls == (
        ToolCall(id="call-1-1", name="fs.grep", arguments='{"pattern":"actor","root":"docs"}'),
    )
    assert [r.finish_reason for r in first] == ["tool_calls", "tool_calls", "stop"]
    assert first[-1].usage == Usage(input=100, output=10, cache_read=40)


async def test_concurrent_agents_sharing_a_script_each_get_their_own_replies(script_path):
    provider = ScriptedProvider.open(script_path)
    tasks = ["Topic: events", "Topic: actors", "Topic: events", "Topic: actors", "Summarise Topic: none"]
    for seed in range(5):
        results: dict[int, list[ModelReply]] = {}
        jitter = random.Random(seed)

        async def run(i: int, task: str, results: dict[int, list[ModelReply]], jitter: random.Random) -> None:
            results[i] = await converse(provider, task, jitter=jitter)

        async with trio.open_nursery() as nursery:
            for i, task in enumerate(tasks):
                nursery.start_soon(run, i, task, results, jitter)
        assert results[0] == results[2] and results[1] == results[3]
        assert results[0][-1].message.content == "Events are typed and append-only."
        assert results[1][-1].message.content == "An actor owns one stream."
        assert [r.message.content for r in results[4]] == ["Let me delegate.", "Done: both topics summarised."]
        if seed == 0:
            baseline = results
        assert results == baseline


async def test_the_turn_is_the_number_of_assistant_messages(script_path):
    provider = ScriptedProvider.open(script_path)
    opening = (Message(role="system", content="Parent."), Message(role="user", content="Go"))
    later = await provider.complete(request(*opening, Message(role="assistant", content="Let me delegate.")))
    assert later.message.content == "Done: both topics summarised."
    with pytest.raises(ProviderError, match="'parent' has 2 replies; the conversation asks for reply 3") as caught:
        await provider.complete(request(*opening, *[Message(role="assistant", content="x")] * 2))
    assert not caught.value.retryable


async def test_the_agent_is_chosen_by_the_opening_not_by_later_messages(script_path):
    provider = ScriptedProvider.open(script_path)
    reply = await provider.complete(
        request(
            Message(role="system", content="Topic: actors"),
            Message(role="user", content="go"),
            Message(role="assistant", content="ok"),
            Message(role="user", content="Topic: events (steering)"),
        )
    )
    assert reply.message.tool_calls[0].arguments == '{"path":"docs/actors.md"}'


async def test_an_error_entry_fails_its_turn_once_then_the_retry_gets_the_reply(tmp_path):
    path = write_script(tmp_path, [
        {"error": "rate limited (scripted)"},
        {"error": "server overloaded (scripted)"},
        {"text": "third time lucky"},
        {"error": "the request was rejected", "retryable": False},
    ])
    provider = ScriptedProvider.open(path)
    first = request(Message(role="user", content="hello"))
    for expected in ("rate limited", "server overloaded"):
        with pytest.raises(ProviderError, match=expected) as caught:
            await provider.complete(first)
        assert caught.value.retryable
    assert (await provider.complete(first)).message.content == "third time lucky"
    assert (await provider.complete(first)).message.content == "third time lucky"

    # A trailing error has no reply after it: that turn fails on every attempt.
    second = request(Message(role="user", content="hello"), Message(role="assistant", content="third time lucky"))
    for _ in range(3):
        with pytest.raises(ProviderError, match="rejected") as caught:
            await provider.complete(second)
        assert not caught.value.retryable

    # A new provider plays the errors again.
    with pytest.raises(ProviderError, match="rate limited"):
        await ScriptedProvider.open(path).complete(first)


async def test_every_run_meets_its_errors_even_on_a_shared_provider(tmp_path):
    path = write_script(tmp_path, [{"error": "flaky"}, {"text": "ok"}])
    provider = ScriptedProvider.open(path)
    outcomes: dict[int, list[str]] = {}

    async def run(i: int, task: str) -> None:
        # A run retries in the task that made the call, as the agent loop does.
        seen = outcomes.setdefault(i, [])
        while True:
            try:
                reply = await provider.complete(request(Message(role="user", content=task)))
            except ProviderError as exc:
                assert exc.retryable
                seen.append("error")
                await trio.sleep(0.001)
                continue
            seen.append(reply.message.content)
            return

    async with trio.open_nursery() as nursery:
        for i, task in enumerate(["a", "b", "a", "a"]):  # identical conversations included
            nursery.start_soon(run, i, task)
    async with trio.open_nursery() as nursery:  # later runs on the same provider
        nursery.start_soon(run, 4, "a")
    assert outcomes == {i: ["error", "ok"] for i in range(5)}


async def test_no_matching_agent_is_a_provider_error(tmp_path):
    path = write_script(tmp_path, {"agents": [{"match": "Topic: x", "replies": [{"text": "x"}]}]})
    with pytest.raises(ProviderError, match="no agent's `match` occurs") as caught:
        await ScriptedProvider.open(path).complete(request(Message(role="user", content="Topic: y")))
    assert not caught.value.retryable


async def test_arguments_that_are_not_json_make_an_invalid_reply(tmp_path):
    path = write_script(tmp_path, [{"tool_calls": [{"name": "fs.read", "arguments": "{\"path\": "}]}])
    with pytest.raises(InvalidModelReply, match="'fs.read' are not JSON"):
        await ScriptedProvider.open(path).complete(request(Message(role="user", content="go")))


async def test_usage_without_a_given_count_is_characters_over_four(tmp_path):
    path = write_script(tmp_path, {"model": "scripted-demo", "agents": [{"replies": [{"text": "abcdefghi"}]}]})
    provider = ScriptedProvider.open(path)
    reply = await provider.complete(request(Message(role="system", content="12345"), Message(role="user", content="123")))
    assert reply.usage == Usage(input=2, output=3)  # ceil(8 / 4), ceil(9 / 4)
    assert reply.model == provider.model == "scripted-demo"
    assert [estimate_tokens(n) for n in (0, 1, 4, 5)] == [0, 1, 1, 2]


async def test_a_delayed_reply_comes_after_its_delay_and_the_wait_is_cancellable(tmp_path, autojump_clock):
    path = write_script(tmp_path, [{"text": "slow", "delay_ms": 90000}])
    provider = ScriptedProvider.open(path)
    started = trio.current_time()
    reply = await provider.complete(request(Message(role="user", content="go")))
    assert reply.message.content == "slow" and trio.current_time() - started == pytest.approx(90)
    with trio.move_on_after(5) as scope:
        await provider.complete(request(Message(role="user", content="go")))
    assert scope.cancelled_caught


async def test_delayed_replies_of_many_runs_wait_on_one_shared_timer(tmp_path, autojump_clock):
    provider = ScriptedProvider.open(write_script(tmp_path, [{"text": "slow", "delay_ms": 1000}]))
    done: list[float] = []

    async def one_run() -> None:
        reply = await provider.complete(request(Message(role="user", content="go")))
        assert reply.message.content == "slow"
        done.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        for _ in range(200):
            nursery.start_soon(one_run)
        await trio.testing.wait_all_tasks_blocked()
        # 200 waiting replies: one timer task, not a cancel scope each
        assert timer_tasks() == 1
    assert done == [1.0] * 200


async def test_open_provider_opens_a_script(script_path):
    provider = open_provider(f"scripted:{script_path}")
    assert provider.name == f"scripted:{script_path}" and provider.model == "scripted"
    with pytest.raises(UserError, match="takes no options"):
        open_provider(f"scripted:{script_path}", api_key="sk")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "no such file"),
        ("{\"agents\": [", "not valid JSON"),
        ("{\"agents\": []}", "`agents` is empty"),
        ("{\"agents\": [{\"replies\": []}]}", "agents[0].replies is empty"),
        ("[{\"text\": 3}]", "Expected `str | null`, got `int` - at `$[0].text`"),
        ("[{\"text\": \"x\", \"delay_ms\": -1}]", "`delay_ms` must be 0 or more, not -1"),
        ("[{\"txt\": \"typo\"}]", "unknown field `txt`"),
        ("[{}]", "replies[0]: a reply needs `text` or `tool_calls`"),
        ("[{\"text\": \"a\", \"error\": \"b\"}]", "replies[0]: an entry is either an `error` or a reply"),
        ("[{\"tool_calls\": [{\"arguments\": {}}]}]", "missing required field `name`"),
        ("\"just a string\"", "Expected `object | array`, got `str`"),
    ],
)
def test_a_bad_script_is_one_clear_line_naming_the_file(tmp_path, content, problem):
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ScriptError) as caught:
        ScriptedProvider.open(path)
    message = str(caught.value)
    assert isinstance(caught.value, UserError)
    assert message.startswith(f"model script {path}: ") and problem in message and "\n" not in message


def test_a_directory_is_not_a_script(tmp_path):
    with pytest.raises(ScriptError, match="is a directory"):
        ScriptedProvider.open(tmp_path)


async def test_a_reply_longer_than_max_tokens_stops_there_as_an_apis_does(tmp_path):
    words = "word " * 2000  # 2500 tokens at four characters a token
    provider = open_provider(f"scripted:{write_script(tmp_path, [{'text': words}])}")
    ask = ModelRequest(model="scripted", messages=(Message(role="user", content="write"),), max_tokens=100)
    cut = await provider.complete(ask)
    assert (cut.finish_reason, cut.usage.output, cut.message.content) == ("length", 100, words[:400])
    whole = await provider.complete(ModelRequest(model="scripted", messages=ask.messages))
    assert (whole.finish_reason, whole.message.content) == ("stop", words)


async def test_a_tool_call_cut_inside_its_arguments_is_an_invalid_reply(tmp_path):
    calls = [{"name": "fs.read", "arguments": {"path": "p" * 1000}}]
    provider = open_provider(f"scripted:{write_script(tmp_path, [{'tool_calls': calls}])}")
    ask = ModelRequest(model="scripted", messages=(Message(role="user", content="go"),), max_tokens=50)
    with pytest.raises(InvalidModelReply, match="are not JSON") as caught:
        await provider.complete(ask)
    assert not caught.value.retryable
