"""`gormes trace RUN` against a real OTLP/HTTP receiver: a recorded run with two
levels of subagents and tool calls arrives as spans with the right parents, GenAI
attributes and token counts; the environment's endpoint, headers and service name
are honoured; tracing twice sends the same ids."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from otlp_receiver import attributes, otlp_receiver

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "replay_fixtures"


def gormes(db: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run([sys.executable, "-m", "gormes", "--db", str(db), *args],
                          capture_output=True, text=True, env={**clean, **(env or {})}, timeout=120)


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    db = tmp_path / "g.db"
    for name in ("subagents.jsonl", "provider_retry.jsonl", "tool_error.jsonl"):
        assert gormes(db, "import", str(FIXTURES / name)).returncode == 0
    return db


def by_name(spans: list) -> dict[str, list]:
    found: dict[str, list] = {}
    for span in spans:
        found.setdefault(span.name, []).append(span)
    return found


def test_a_run_with_subagents_arrives_as_nested_spans(recorded: Path) -> None:
    with otlp_receiver() as (url, received):
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": url, "OTEL_EXPORTER_OTLP_HEADERS": "x-team=agents",
               "OTEL_SERVICE_NAME": "gormes-test"}
        result = gormes(recorded, "trace", "subagents-1", "--children", env=env)
        assert result.returncode == 0, result.stderr
        assert "sent 11 span(s)" in result.stdout
        spans = received.spans()
        assert received.service_names() == {"gormes-test"}
        assert received.headers[0]["x-team"] == "agents"

    assert len(spans) == 11
    assert len({s.trace_id for s in spans}) == 1
    runs = {attributes(s)["gormes.run.id"]: s for s in spans if s.name == "invoke_agent agent"}
    assert set(runs) == {"subagents-1", "subagents-2", "subagents-3"}
    assert runs["subagents-1"].parent_span_id == b""
    assert runs["subagents-2"].parent_span_id == runs["subagents-1"].span_id
    assert runs["subagents-3"].parent_span_id == runs["subagents-2"].span_id

    events = [json.loads(line) for line in (FIXTURES / "subagents.jsonl").read_text().splitlines()]
    turns = [e for e in events if e["type"] == "run.llm_turn"]
    chats = [s for s in spans if attributes(s).get("gen_ai.operation.name") == "chat"]
    assert len(chats) == len(turns) == 6
    for turn in turns:
        run = runs[turn["stream"][4:]]
        [chat] = [c for c in chats if c.parent_span_id == run.span_id
                  and attributes(c)["gormes.seq"] == turn["data"]["seq"]]
        a = attributes(chat)
        assert a["gen_ai.usage.input_tokens"] == turn["data"]["usage"]["input"]
        assert a["gen_ai.usage.output_tokens"] == turn["data"]["usage"]["output"]
        assert a["gen_ai.request.model"] == turn["data"]["model"]
        assert chat.kind == chat.SPAN_KIND_CLIENT
    tools = [s for s in spans if attributes(s).get("gen_ai.operation.name") == "execute_tool"]
    assert sorted(attributes(t)["gen_ai.tool.name"] for t in tools) == ["fs.grep", "fs.list"]
    assert {t.parent_span_id for t in tools} == {runs["subagents-2"].span_id, runs["subagents-3"].span_id}
    top = attributes(runs["subagents-1"])
    final = [e for e in events if e["stream"] == "run-subagents-1" and e["type"] == "run.completed"][0]
    assert top["gormes.run.tokens.input"] == final["data"]["tokens"]["input"]
    assert runs["subagents-1"].status.code == runs["subagents-1"].status.STATUS_CODE_OK


def test_tracing_twice_sends_the_same_ids(recorded: Path) -> None:
    with otlp_receiver() as (url, received):
        for _ in range(2):
            assert gormes(recorded, "trace", "subagents-1", "--children",
                          env={"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": url + "/v1/traces"}).returncode == 0
        first, second = received.requests
    ids = [sorted((s.trace_id, s.span_id, s.parent_span_id) for rs in r.resource_spans
                  for ss in rs.scope_spans for s in ss.spans) for r in (first, second)]
    assert ids[0] == ids[1] and len(ids[0]) == 11


def test_failed_model_attempts_and_tool_errors_are_error_spans(recorded: Path) -> None:
    with otlp_receiver() as (url, received):
        for run in ("provider-retry-1", "tool-error-1"):
            result = gormes(recorded, "trace", run, env={"OTEL_EXPORTER_OTLP_ENDPOINT": url})
            assert result.returncode == 0, result.stderr
        spans = received.spans()
    failed = [s for s in spans if attributes(s).get("gen_ai.operation.name") == "chat"
              and s.status.code == s.status.STATUS_CODE_ERROR]
    assert len(failed) == 2
    for span in failed:
        [event] = span.events
        assert event.name == "exception"
        assert "rate limited" in span.status.message or "overloaded" in span.status.message
        assert attributes(span)["error.type"]
    tool_errors = [s for s in spans if attributes(s).get("gen_ai.operation.name") == "execute_tool"
                   and s.status.code == s.status.STATUS_CODE_ERROR]
    assert tool_errors and all(attributes(s)["gormes.tool.outcome"] != "ok" for s in tool_errors)


def test_without_an_endpoint_nothing_is_sent_and_json_lists_the_spans(recorded: Path) -> None:
    result = gormes(recorded, "trace", "subagents-1", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["sent"] is False and data["endpoint"] is None
    assert len(data["spans"]) == 1 + 2  # the run and its two model turns; no children
    assert {s["trace_id"] for s in data["spans"]} == {data["trace_id"]}


def test_the_text_says_why_nothing_was_sent(recorded: Path) -> None:
    """With an endpoint set and exporting turned off, it said no endpoint was set."""
    plain = gormes(recorded, "trace", "subagents-1")
    assert plain.returncode == 0 and "not sent: no OTLP endpoint configured (set OTEL_EXPORTER_OTLP_ENDPOINT" \
        in plain.stdout, plain
    off = gormes(recorded, "trace", "subagents-1", env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
                                                         "OTEL_TRACES_EXPORTER": "none"})
    assert off.returncode == 0, off.stderr
    assert "not sent: OTEL_TRACES_EXPORTER=none turns exporting off (unset it, or give --endpoint)" in off.stdout


def test_an_unknown_run_and_a_refusing_collector_are_one_line(recorded: Path) -> None:
    missing = gormes(recorded, "trace", "no-such-run")
    assert missing.returncode == 2
    assert missing.stderr.startswith("gormes: error: no run 'no-such-run'") and missing.stderr.count("\n") == 1
    with otlp_receiver() as (url, received):
        received.refuse = True
        refused = gormes(recorded, "trace", "subagents-1", env={"OTEL_EXPORTER_OTLP_ENDPOINT": url})
    assert refused.returncode == 1
    assert refused.stderr.startswith("gormes: error: the collector at ") and refused.stderr.count("\n") == 1
    assert refused.stderr.rstrip().endswith("did not take the 3 span(s): HTTP 400 Bad Request")


def test_a_collector_that_is_not_there_is_one_line_naming_why(recorded: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    down = gormes(recorded, "trace", "subagents-1", "--endpoint", f"http://127.0.0.1:{port}/v1/traces",
                  env={"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "2"})
    assert down.returncode == 1
    assert down.stderr.count("\n") == 1, down.stderr  # none of the SDK's own retry lines
    assert down.stderr.startswith(f"gormes: error: the collector at http://127.0.0.1:{port}/v1/traces did not take")
    assert ": Connection refused (retried " in down.stderr
