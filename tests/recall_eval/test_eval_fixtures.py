"""Fixture files: what they may say, what is refused with one clear line, and
the memory events one turns into."""

from __future__ import annotations

from pathlib import Path

import pytest

from gormes.events.memory import (
    MemoryFactRecorded,
    MemoryRelationshipObserved,
    fact_id,
    memory_stream,
)
from gormes.recall.eval_fixtures import (
    FixtureError,
    load_fixtures,
    parse_fixtures,
    seed_events,
)

REPO = Path(__file__).resolve().parents[2]

SMALL = """
name: small
conversations:
  - scope: chat:1
    run: r1
    trust: gateway
    turns:
      - text: Ada works at Acme.
        at: 10
        relationships: [{key: ada-acme, subject: Ada, predicate: works_at, object: Acme}]
        facts: [{key: old, text: Ada works at Acme, subject: Ada}]
      - text: Ada moved to Initech.
        at: 20
        facts: [{key: new, text: Ada works at Initech, subject: Ada, supersedes: [old]}]
facts:
  - {key: doc, scope: "project:p", at: 5, text: The project uses SQLite}
queries:
  - {id: q1, query: where does Ada work, scope: chat:1, relevant: [new]}
"""


def test_the_shipped_fixtures_hold_enough_of_every_kind_of_query():
    fixtures = load_fixtures(REPO / "evals" / "recall")
    queries = [q for f in fixtures for q in f.queries]
    assert len(queries) >= 50
    tags = [t for q in queries for t in q.tags]
    assert tags.count("confusable") >= 10 and tags.count("stale") >= 5
    negatives = [q for q in queries if "cross-scope" in q.tags and not q.relevant]
    assert len(negatives) >= 8
    assert sum(q.expect_denied for q in queries) >= 3


def test_a_fixture_becomes_memory_events_with_provenance():
    (fixture,) = parse_fixtures(SMALL, "small.yaml")
    seed = seed_events(fixture)
    assert set(seed.events) == {memory_stream("chat:1"), memory_stream("project:p")}
    chat = seed.events[memory_stream("chat:1")]
    relationship = next(e for e in chat if isinstance(e, MemoryRelationshipObserved))
    assert relationship.review_state == "unreviewed"  # gateway text
    assert relationship.provenance.origin.run_id == "r1" and relationship.provenance.origin.turn_id == "seq:1"
    assert relationship.provenance.first_seen == fixture.epoch + 10
    new = next(e for e in chat if isinstance(e, MemoryFactRecorded) and e.text == "Ada works at Initech")
    assert new.supersedes == (fact_id("chat:1", "Ada works at Acme"),)
    assert seed.items["new"].id == new.fact_id and seed.items["doc"].scope == "project:p"


@pytest.mark.parametrize(("change", "message"), [
    (("relevant: [new]", "relevant: [nope]"), "query 'q1': 'nope' is not a key of this fixture"),
    (("scope: chat:1, relevant", "scope: room-1, relevant"), "scope 'room-1' is not chat:<id> or project:<id>"),
    (("query: where does Ada work", "query: '  '"), "query 'q1': the query is empty"),
    (("supersedes: [old]", "supersedes: [older]"), "fact 'new' supersedes unknown key 'older'"),
    (("at: 20", "at: soon"), "Expected `float`, got `str`"),
    (("trust: gateway", "trust: gateway\n    colour: red"), "unknown field `colour`"),
    (("key: new", "key: old"), "key 'old' names two different items"),
    (("relevant: [new]}", "relevant: [new], expect_denied: true}"), "expect_denied needs cross_scope: true"),
])
def test_a_malformed_fixture_is_one_line_naming_the_file(change, message):
    broken = SMALL.replace(*change)
    assert broken != SMALL
    with pytest.raises(FixtureError) as caught:
        parse_fixtures(broken, "evals/recall/small.yaml")
    text = str(caught.value)
    assert text.startswith("evals/recall/small.yaml") and message in text and "\n" not in text


def test_broken_yaml_and_json_lines_are_refused(tmp_path):
    with pytest.raises(FixtureError, match="broken YAML"):
        parse_fixtures("name: [unclosed", "x.yaml")
    with pytest.raises(FixtureError, match="line 2: not JSON"):
        parse_fixtures('{"name": "a", "queries": []}\n{oops\n', "x.jsonl")
    with pytest.raises(FixtureError, match="expected a mapping"):
        parse_fixtures("- just\n- a list\n", "x.yaml")


def test_jsonl_holds_one_fixture_per_line(tmp_path):
    line = '{"name": "%s", "facts": [{"key": "f", "scope": "chat:1", "at": 0, "text": "t"}],' \
           ' "queries": [{"id": "q", "query": "t", "scope": "chat:1", "relevant": ["f"]}]}'
    (tmp_path / "two.jsonl").write_text(line % "a" + "\n\n" + line % "b" + "\n")
    assert [f.name for f in load_fixtures(tmp_path)] == ["a", "b"]


def test_a_directory_without_queries_or_with_twin_names_is_refused(tmp_path):
    with pytest.raises(FixtureError, match="not found"):
        load_fixtures(tmp_path / "missing")
    with pytest.raises(FixtureError, match="no recall queries found"):
        load_fixtures(tmp_path)
    (tmp_path / "a.yaml").write_text(SMALL)
    (tmp_path / "b.yaml").write_text(SMALL)
    with pytest.raises(FixtureError, match="two fixtures are named 'small'"):
        load_fixtures(tmp_path)
