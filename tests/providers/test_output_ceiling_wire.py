"""A budgeted turn's output ceiling on each provider's wire (decision 0065): the
field each API documents, sent only when the run is charged to a budget, and
checked by the local wire servers, which refuse what the real APIs refuse."""

from __future__ import annotations

import pytest
from anthropic_server import MessagesServer
from anthropic_server import Reply as AnthropicReply
from openai_server import ChatServer, TextReply, request_problems

from gormes.actors.runs.manager import RunManager
from gormes.control.budget_book import BudgetBook
from gormes.errors import UserError
from gormes.events.runs import RunLlmTurn, run_stream
from gormes.providers import Message, ModelRequest, open_provider
from gormes.providers.openai import OpenAIProvider, _wire_request, output_bound_field
from gormes.providers.wire_names import tool_names

ESTIMATE = 300  # the budget's --output-estimate: the ceiling of a turn that sets no max_tokens


def opener(scheme: str, server, **config):
    def open_(spec: str):
        return open_provider(spec, base_url=server.base_url, api_key="sk-test", env={}, **config)
    return open_


async def agent_turn(store, scheme: str, server, *, budget: bool, **config) -> RunLlmTurn:
    if budget:
        await BudgetBook(store).set("b", tokens=1_000_000, output_estimate=ESTIMATE)
    async with RunManager.open(store, providers=opener(scheme, server, **config)) as runs:
        outcome = await runs.run("agent", {"prompt": "hello"}, model=f"{scheme}:test-model",
                                 budget="b" if budget else None)
    assert outcome.status == "completed", outcome.error
    turns = [r.event for r in await store.read_stream(run_stream(outcome.run_id)) if isinstance(r.event, RunLlmTurn)]
    assert len(turns) == 1
    return turns[0]


def test_openais_own_api_takes_max_completion_tokens_and_other_servers_max_tokens() -> None:
    assert output_bound_field("https://api.openai.com/v1") == "max_completion_tokens"
    assert OpenAIProvider("o3-mini", api_key="sk-test", env={}).output_field == "max_completion_tokens"
    for url in ("http://127.0.0.1:11434/v1", "https://openrouter.ai/api/v1", "http://localhost:8000/v1"):
        assert output_bound_field(url) == "max_tokens"


def test_a_reasoning_model_behind_another_address_takes_max_completion_tokens() -> None:
    # a company's proxy in front of OpenAI relays o3-mini's request: OpenAI refuses max_tokens
    assert output_bound_field("https://llm-proxy.example.com/v1", "o3-mini") == "max_completion_tokens"
    assert output_bound_field("https://llm-proxy.example.com/v1", "gpt-5-mini") == "max_completion_tokens"
    assert output_bound_field("https://llm-proxy.example.com/v1", "gpt-4o") == "max_tokens"
    assert output_bound_field("http://127.0.0.1:11434/v1", "llama3.1") == "max_tokens"


def test_a_routers_model_name_goes_out_with_the_field_the_router_documents() -> None:
    # `openai/o3-mini` is a router's name for the model (OpenRouter's ids, LiteLLM's
    # provider prefix), which OpenAI's own API does not serve: the router resolves it
    # and translates the request, and its documented field is max_tokens (decision 0077).
    assert output_bound_field("https://openrouter.ai/api/v1", "openai/o3-mini") == "max_tokens"
    assert output_bound_field("http://127.0.0.1:4000/v1", "openai/gpt-5-mini") == "max_tokens"
    # a relay that passes the body on unchanged is named by the operator
    env = {"GORMES_OPENAI_MAX_TOKENS_FIELD": "max_completion_tokens"}
    assert output_bound_field("https://relay.example.com/v1", "openai/o3-mini", env) == "max_completion_tokens"


def test_the_operator_names_the_field_for_a_server_the_rules_guess_wrong() -> None:
    env = {"GORMES_OPENAI_MAX_TOKENS_FIELD": "max_completion_tokens"}
    assert output_bound_field("http://127.0.0.1:8000/v1", "my-model", env) == "max_completion_tokens"
    assert OpenAIProvider("my-model", base_url="http://127.0.0.1:8000/v1", env=env).output_field == \
        "max_completion_tokens"
    assert output_bound_field("https://api.openai.com/v1", "gpt-4o", {"GORMES_OPENAI_MAX_TOKENS_FIELD": "max_tokens"}) \
        == "max_tokens"
    with pytest.raises(UserError, match="GORMES_OPENAI_MAX_TOKENS_FIELD must be one of"):
        OpenAIProvider("my-model", base_url="http://127.0.0.1:8000/v1", env={"GORMES_OPENAI_MAX_TOKENS_FIELD": "max"})


async def test_a_budgeted_turn_of_a_reasoning_model_through_another_address_is_accepted(store) -> None:
    with ChatServer() as server:  # the stand-in refuses max_tokens for o3-mini, as OpenAI does
        server.queue(TextReply("hi"))
        await BudgetBook(store).set("b", tokens=1_000_000, output_estimate=ESTIMATE)
        async with RunManager.open(store, providers=opener("openai", server)) as runs:
            outcome = await runs.run("agent", {"prompt": "hello"}, model="openai:o3-mini", budget="b")
    assert outcome.status == "completed", outcome.error
    assert server.rejections == []
    [body] = [r.body for r in server.requests]
    assert body["max_completion_tokens"] == ESTIMATE and "max_tokens" not in body


def test_the_server_refuses_max_tokens_for_a_reasoning_model_as_openai_does() -> None:
    messages = [{"role": "user", "content": "x"}]
    refused = request_problems({"model": "o3-mini", "messages": messages, "max_tokens": 300})
    assert refused and "Use 'max_completion_tokens' instead" in refused[0]
    assert request_problems({"model": "o3-mini", "messages": messages, "max_completion_tokens": 300}) == []
    assert request_problems({"model": "gpt-4o", "messages": messages, "max_completion_tokens": 0})


def test_what_goes_to_openais_own_api_is_what_it_accepts_from_a_reasoning_model() -> None:
    request = ModelRequest(model="o3-mini", messages=(Message(role="user", content="x"),), max_tokens=ESTIMATE)
    provider = OpenAIProvider("o3-mini", api_key="sk-test", env={})
    body = _wire_request(request, tool_names(provider.name, ()), stream=False, output_field=provider.output_field)
    assert body["max_completion_tokens"] == ESTIMATE and "max_tokens" not in body
    assert request_problems(body) == []


async def test_a_budgeted_openai_turn_sends_the_ceiling_and_an_unbudgeted_one_none(store) -> None:
    with ChatServer() as server:
        server.queue(TextReply("hi"))
        turn = await agent_turn(store, "openai", server, budget=True)
        server.queue(TextReply("hi"))
        bare = await agent_turn(store, "openai", server, budget=False)
    budgeted, unbudgeted = (r.body for r in server.requests)
    assert budgeted["max_tokens"] == ESTIMATE  # a compatible server's field: it is not OpenAI's own URL
    assert "max_tokens" not in unbudgeted and "max_completion_tokens" not in unbudgeted
    assert turn.sent_max_tokens == ESTIMATE and turn.request.max_tokens is None  # the handler's request
    assert bare.sent_max_tokens is None
    assert server.rejections == []


@pytest.mark.parametrize(("default", "sent", "recorded"), [(4096, ESTIMATE, ESTIMATE), (200, 200, None)])
async def test_an_anthropic_turn_sends_the_lower_of_the_ceiling_and_the_providers_max_tokens(
    store, default, sent, recorded,
) -> None:
    with MessagesServer() as server:
        server.queue(AnthropicReply("hi"))
        turn = await agent_turn(store, "anthropic", server, budget=True, max_tokens=default)
    assert server.requests[0].body["max_tokens"] == sent
    assert turn.sent_max_tokens == recorded  # a provider bound within the ceiling goes as it was
    assert server.rejections == []


async def test_an_unbudgeted_anthropic_turn_sends_the_providers_max_tokens(store) -> None:
    with MessagesServer() as server:
        server.queue(AnthropicReply("hi"))
        turn = await agent_turn(store, "anthropic", server, budget=False, max_tokens=5000)
    assert server.requests[0].body["max_tokens"] == 5000 and turn.sent_max_tokens is None
