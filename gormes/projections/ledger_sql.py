"""The ledger's UPDATEs, compiled from the job state machine's table.

Each transition of gormes/events/job_machine.py becomes one `Write`: the UPDATE
of the job's `jobs` row (its status, the columns its effects set, `updated_at`
when it stamps, `version`) and the parameters it takes from the event. The same
table is what `evolve` folds, so the ledger and the folded state cannot disagree
on a status or a field the table names.

The SQL is built once per dialect at import (the ledger's hot path only fills in
parameters). A transition that removes the job on an option (`remove_on_complete`,
`remove_on_fail`) updates the row only when the option is not set; the caller
then deletes the rows of a job that set it. On PostgreSQL that is one statement
(a data-modifying WITH), which reads back nothing: its store sends the ledger's
statements in a pipeline, where a rowcount would be a round trip.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import msgspec

from gormes.events.base import Recorded
from gormes.events.jobs import TOKEN_KINDS
from gormes.events.job_machine import (
    ALWAYS, TRANSITIONS, Append, Case, Count, Effect, First, Locked, Put, StatusIn, Take,
    Transition,
)

_json = msgspec.json.Encoder()


def encode_json(value: Any) -> str | None:
    return None if value is None else _json.encode(value).decode()


def _json_text(value: Any) -> str:
    return _json.encode(value).decode()  # None is `null` here: an element of a list


# The JSON text columns of `jobs` (what the state holds as values).
JSON_COLUMNS = frozenset({"data", "result", "progress", "options", "submitter"})
# A field of the state that the ledger spreads over several columns.
SPREAD: dict[str, dict[str, str]] = {
    "tokens": {f"tokens_{kind}": kind for kind in TOKEN_KINDS},
}
_STATUS = re.compile(r"[a-z][a-z-]*")

class Param(NamedTuple):
    """One `?` of a write: the event's attribute `attr`, through `convert` if given."""

    attr: str
    convert: Callable[[Any], Any] | None = None


class Write(NamedTuple):
    """One transition's UPDATE of the job's row. `sql` takes `params(rec)`."""

    sql: str
    params: Callable[[Recorded], tuple[Any, ...]]
    removes: str | None  # the option whose job this UPDATE leaves for the caller to delete
    fused: bool = False  # the removal is done in `sql` too (PostgreSQL)


def _status(name: str | None) -> str:
    if name is None:
        return "status"
    if not _STATUS.fullmatch(name):
        raise ValueError(f"not a status: {name!r}")
    return f"'{name}'"


def _condition(when: StatusIn | Locked) -> str:
    if isinstance(when, Locked):
        return "lock_token IS NOT NULL"
    return f"status IN ({', '.join(_status(s) for s in sorted(when.statuses))})"


def status_sql(to: Any) -> str:
    """The SQL value of a transition's target status (over the row before it)."""
    if isinstance(to, Case):
        return (
            f"CASE WHEN {_condition(to.when)} THEN {_status(to.then)}"
            f" ELSE {_status(to.otherwise)} END"
        )
    return _status(to)


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def of_event(params: Sequence[Param]) -> Callable[[Any], tuple[Any, ...]]:
    """The event -> every parameter, in order. One attrgetter fetches them all (a
    claim's are all plain attributes: the hot path of a worker's round), then
    the few that need it are converted."""
    if not params:
        return lambda e: ()
    get = operator.attrgetter(*(p.attr for p in params))
    if len(params) == 1:
        convert = params[0].convert
        return (lambda e: (convert(get(e)),)) if convert else (lambda e: (get(e),))
    conversions = [(i, p.convert) for i, p in enumerate(params) if p.convert is not None]
    if not conversions:
        return get

    def values(e: Any) -> tuple[Any, ...]:
        out = list(get(e))
        for i, convert in conversions:
            out[i] = convert(out[i])
        return tuple(out)

    return values


def effect_sql(effect: Effect, columns: Mapping[str, type]) -> list[tuple[str, Param | None]]:
    """The SET terms of one effect, each with the parameter it takes (None: none)."""
    field = effect.field
    if field in SPREAD and isinstance(effect, Count) and isinstance(effect.by, str):
        return [
            (f"{column} = {column} + ?", Param(f"{effect.by}.{part}"))  # attrgetter's dotted path
            for column, part in SPREAD[field].items()
        ]
    if field not in columns:
        raise TypeError(f"the ledger has no column for the field {field!r} ({effect!r})")
    encode = encode_json if field in JSON_COLUMNS else None
    if isinstance(effect, Take):
        return [(f"{field} = ?", Param(effect.attr, encode))]
    if isinstance(effect, Append):
        # The column holds a JSON list as msgspec wrote it (no spaces): the element's
        # JSON goes before its closing bracket, as msgspec would write the longer list.
        if field not in JSON_COLUMNS:
            raise TypeError(f"{effect!r}: only a JSON column holds a list")
        return [(
            f"{field} = CASE WHEN {field} IS NULL OR {field} = '[]' THEN '['"
            f" ELSE substr({field}, 1, length({field}) - 1) || ',' END || CAST(? AS TEXT) || ']'",
            Param(effect.attr, _json_text),
        )]
    if isinstance(effect, First):
        return [(f"{field} = coalesce({field}, ?)", Param(effect.attr, encode))]
    if isinstance(effect, Put):
        value = effect.constant
        if value is None:
            return [(f"{field} = NULL", None)]
        if isinstance(value, int) and not isinstance(value, bool):
            return [(f"{field} = {value}", None)]
        if isinstance(value, str):
            return [(f"{field} = {_literal(encode(value) if encode else value)}", None)]
        raise TypeError(f"no SQL for the constant {value!r} ({effect!r})")
    if isinstance(effect, Count):
        if isinstance(effect.by, str):
            return [(f"{field} = {field} + ?", Param(effect.by, int))]
        return [(f"{field} = {field} + {int(effect.by)}", None)]
    raise TypeError(f"unknown effect {effect!r}")


def set_terms(t: Transition, columns: Mapping[str, type], extra: str | None = None
              ) -> tuple[str, list[Param]]:
    """The SET list of `t`'s UPDATE ("" when it sets nothing) and its parameters,
    in order. `extra` is a term the ledger adds beyond the table (live_children)."""
    terms: list[tuple[str, Param | None]] = []
    if t.to is not None:
        terms.append((f"status = {status_sql(t.to)}", None))
    for effect in t.sets:
        terms += effect_sql(effect, columns)
    if extra is not None:
        terms.append((extra, None))
    if t.stamps:
        terms.append(("updated_at = ?", Param("at")))
    return ", ".join(sql for sql, _ in terms), [p for _, p in terms if p is not None]


class Spelling(NamedTuple):
    """What a dialect spells its own way in a compiled write."""

    not_option: str  # a WHERE term over the row, true unless the option {key} is set
    option_test: str  # the same option as a boolean value, in the WITH form (None: no WITH)
    fused_removal: bool  # remove in the UPDATE's own statement (PostgreSQL)


def compile_write(t: Transition, columns: Mapping[str, type], spelling: Spelling,
                  extra: str | None = None) -> Write | None:
    """`t` as one UPDATE of the job's row (None: it makes none, as it creates the
    row, removes it or changes no column of it)."""
    if t.follows is None or t.removes == ALWAYS:
        return None
    sets, params = set_terms(t, columns, extra)
    if not sets:
        return None
    values = of_event(params)

    def row_last(rec: Recorded) -> tuple[Any, ...]:  # ..., version, id
        return values(rec.event) + (rec.version, rec.stream[4:])

    key = t.removes
    if key is None:
        return Write(f"UPDATE jobs SET {sets}, version = ? WHERE id = ?", row_last, None)
    if not spelling.fused_removal:
        return Write(
            f"UPDATE jobs SET {sets}, version = ? WHERE id = ?"
            f" AND {spelling.not_option.format(key=key)}", row_last, key,
        )
    sql = (
        f"WITH j AS (SELECT id, {spelling.option_test.format(key=key)} AS remove"
        " FROM jobs WHERE id = ?),"
        f" u AS (UPDATE jobs SET {sets}, version = ? FROM j WHERE jobs.id = j.id AND NOT j.remove),"
        " i AS (DELETE FROM inbox USING j WHERE inbox.job_id = j.id AND j.remove),"
        " m AS (DELETE FROM job_model_tokens USING j WHERE job_model_tokens.job_id = j.id AND j.remove),"
        " t AS (DELETE FROM transcript USING j WHERE transcript.job_id = j.id AND j.remove)"
        " DELETE FROM jobs USING j WHERE jobs.id = j.id AND j.remove"
    )

    def row_first(rec: Recorded) -> tuple[Any, ...]:  # id, ..., version
        return (rec.stream[4:],) + values(rec.event) + (rec.version,)

    return Write(sql, row_first, key, fused=True)


def compile_writes(columns: Mapping[str, type], spelling: Spelling,
                   extras: Mapping[type, str]) -> dict[Transition, Write | None]:
    """Every transition's write, for one dialect; `extras` adds SET terms by event type."""
    return {
        t: compile_write(t, columns, spelling, extras.get(t.event)) for t in TRANSITIONS
    }
