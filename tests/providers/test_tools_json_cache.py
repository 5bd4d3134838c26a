"""providers.base.tools_json: one entry for every tuple of the same ToolSpec objects."""

from __future__ import annotations

import msgspec

from gormes.providers import base
from gormes.providers.base import ToolSpec, tools_json
from gormes.actors.runs.agent import SPAWN_TOOL
from gormes.actors.runs.live import tool_specs
from gormes.tools.builtin import default_registry


def test_runs_with_the_same_tools_share_one_entry_whatever_their_tuples() -> None:
    shared = tool_specs(default_registry(), "operator", None)
    base._tools_json_cache.clear()
    # each run's agent loop makes a tuple of its own: the shared specs plus its spawn tool
    tuples = [(*shared, SPAWN_TOOL) for _ in range(1000)]
    expected = msgspec.json.encode(tuples[0], order="sorted")
    assert all(tools_json(t) == expected for t in tuples)
    assert len(base._tools_json_cache) == 1


def test_other_tools_or_a_list_are_encoded_as_they_are() -> None:
    one = ToolSpec(name="a", description="", parameters={"type": "object"})
    other = ToolSpec(name="a", description="changed", parameters={"type": "object"})
    assert tools_json((one,)) != tools_json((other,))
    assert tools_json((other,)) == msgspec.json.encode((other,), order="sorted")
    assert tools_json([one, other]) == msgspec.json.encode([one, other], order="sorted")  # type: ignore[arg-type]
    assert tools_json(()) == b"[]"
