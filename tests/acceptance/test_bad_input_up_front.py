"""Bad input is refused up front (decision 0090): one `gormes: error:` line, exit 2,
nothing recorded; and a user's operation that raises is one line too (exit 1: the
call failed), audited as an error."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import assert_one_line_error, rows, run_gormes

BOOM = '''
import msgspec
import gormes


class In(msgspec.Struct):
    x: int


def deeper(x):
    raise RuntimeError(f"kaboom {x}")


@gormes.operation("my.boom")
async def boom(ctx, input: In) -> dict:
    """Fails."""
    deeper(input.x)
'''


def test_a_user_operation_that_raises_is_one_line_naming_it_and_audited_as_an_error(tmp_path: Path):
    db = tmp_path / "g.db"
    module = tmp_path / "badop.py"
    module.write_text(BOOM)
    called = run_gormes(db, "ops", "call", "my.boom", '{"x": 1}', "--import", str(module))
    line = assert_one_line_error(called)
    assert called.returncode == 1
    assert line == f"gormes: error: operation my.boom failed: RuntimeError: kaboom 1 (raised at {module}:11)"
    [(outcome, error)] = rows(db, "SELECT json_extract(data, '$.outcome'), json_extract(data, '$.error')"
                                  " FROM events WHERE type = 'audit.operation'")
    assert (outcome, error) == ("error", "RuntimeError: kaboom 1")
