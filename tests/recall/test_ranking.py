"""The pure ranking pieces: terms, MATCH quoting, graph walk and decay, fusion."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gormes.recall import graph
from gormes.recall.api import Why
from gormes.recall.fused import fuse
from gormes.recall.items import MemoryItem, ModeHit
from gormes.recall.lexical import _same_stem, match_expression, matched_terms, query_terms, words

DAY = 86400.0


def edge(id_: str, s: str, o: str, last_seen: float = 0.0, scope: str = "chat:a") -> MemoryItem:
    return MemoryItem(id=id_, kind="relationship", text=f"{s} r {o}", scope=scope, review_state="trusted",
                      last_seen=last_seen, subject=s, predicate="r", object=o)


def test_terms_drop_stopwords_but_never_everything():
    assert query_terms("Where does Ada WORK, ada?") == ("ada", "work")
    assert query_terms("the") == ("the",)
    assert query_terms("?!") == ()


def test_match_expression_quotes_fts_syntax_away():
    assert match_expression(["ada", 'x"y', "NEAR"]) == '"ada" OR "x""y" OR "NEAR"'


def test_matched_terms_allow_word_endings():
    assert matched_terms(["work", "tea", "zebra"], "Ada works with teams") == ("work", "tea")
    assert matched_terms(["working", "te", "t"], "Ada work te tea") == ("working", "te")


@given(st.lists(st.text("abcé", min_size=1, max_size=7), max_size=5), st.lists(st.text("abcé", max_size=8), max_size=8))
def test_matched_terms_finds_what_comparing_every_word_finds(terms, text_words):
    text = " ".join(text_words)
    tokens = set(words(text))
    naive = tuple(t for t in terms if t in tokens or any(_same_stem(t, w) for w in tokens))
    assert matched_terms(terms, text) == naive


def test_walk_decays_by_hops_and_by_last_seen():
    seed = graph.Seed(entity_id="a", name="A", strength=1.0)
    fresh, old = edge("e1", "a", "b", last_seen=100 * DAY), edge("e2", "a", "c", last_seen=70 * DAY)
    far = edge("e3", "b", "d", last_seen=100 * DAY)
    levels = [[fresh, old], [far]]
    reach, hits = graph.walk([seed], levels, graph.reference_time(None, [fresh, old, far]))
    scores = {h.item.id: h.score for h in hits}
    assert scores["e1"] == graph.HOP_DECAY
    assert abs(scores["e2"] - graph.HOP_DECAY * 0.5) < 1e-12  # 30 days older: half
    assert abs(scores["e3"] - graph.HOP_DECAY**2) < 1e-12
    assert reach["d"].depth == 2 and [e.id for e in reach["d"].path] == ["e1", "e3"]


def test_collect_edges_stops_at_depth_and_never_revisits():
    edges = {"a": [edge("e1", "a", "b")], "b": [edge("e1", "a", "b"), edge("e2", "b", "c")], "c": [edge("e3", "c", "d")]}

    def edges_from(entities):
        return [e for ent in entities for e in edges.get(ent, [])]

    levels = graph.collect_edges([graph.Seed(entity_id="a", name="A", strength=1.0)], edges_from, depth=2)
    assert [[e.id for e in level] for level in levels] == [["e1"], ["e2"]]


def test_fusion_rewards_agreement_and_keeps_each_breakdown():
    def hits(mode, ids):
        return [ModeHit(item=edge(i, "a", "b"), score=10.0 - n, why=Why(mode=mode, reason=mode)) for n, i in enumerate(ids)]

    # two text modes agreeing on their second hit lift it over either's first
    ranked = fuse({"lexical": hits("lexical", ["x", "y"]), "semantic": hits("semantic", ["z", "y"])})
    assert [r.item.id for r in ranked] == ["y", "z", "x"]
    y = ranked[0]
    assert (y.scores.lexical.rank, y.scores.semantic.rank, y.scores.fused.rank) == (2, 2, 1)
    assert [w.mode for w in y.why] == ["lexical", "semantic"]


def test_the_graph_fills_places_without_displacing_the_text_modes_firsts():
    def hits(mode, ids):
        return [ModeHit(item=edge(i, "a", "b"), score=10.0 - n, why=Why(mode=mode, reason=mode)) for n, i in enumerate(ids)]

    ranked = fuse({"lexical": hits("lexical", ["x", "y"]), "graph": hits("graph", ["z", "y", "w"])})
    # lexical's hits keep the top places; the graph's own guesses follow them
    assert [r.item.id for r in ranked] == ["x", "y", "z", "w"]
    assert ranked[1].scores.graph.rank == 2 and ranked[2].scores.lexical is None