"""Reads that cost what they return: every everyday read on a log of 1M events and on one 100 times smaller.

Both logs are copies of one unit of a realistic mix written by the real code
(scale_template.py: the demo's jobs, runs with subagents and tool calls, jobs
drained by a real worker with retries and dead letters, agent runs calling
tools, memory writes, every operation audited), replicated with fresh ids
(scale_replicate.py) through the store's migration path, then every projection
is built by `gormes projections rebuild` (timed: a whole-log command).

Each read is the real CLI in a fresh process (`python -m gormes --db ...`), run
once untimed (page cache; the doctor's remembered position), then timed
`--runs` times on each log, interleaved; the figure is the median and the ratio
is big / small. Reads that name something (a job, a run, a memory scope, an
audit time) name the same thing in both logs: the last copy's. Target: every
ratio at most 1.5. The whole-log commands (`projections rebuild`, `export`) are
reported apart, in events/s.

Built logs are cached under $BENCH_SCALE_DIR (default: a directory in the
system's temp dir), keyed by `VERSION` and the sizes: a second run reuses them.
`--quick` (6,000 events against 600, one timed run) is for the test of the
output's shape. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from scale_replicate import Ids, Replicator, read_template  # noqa: E402
from scale_template import REPO, build_template  # noqa: E402

VERSION = 2  # bump when the mix or its replication changes: cached logs are rebuilt
TARGET = 1.5
STEP_S = 3000.0  # one copy of the mix every 50 minutes: 1M events span about 2 months


def gormes(db: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "gormes", "--db", str(db), *args]


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO) + os.pathsep + e.get("PYTHONPATH", "")
    e.pop("GORMES_DB", None)
    return e


def run_cli(db: Path, *args: str, prints: bool = True) -> float:
    """Seconds `gormes ARGS` took; a command that fails (or prints nothing, when it
    should print) fails the benchmark."""
    start = time.perf_counter()
    done = subprocess.run(gormes(db, *args), env=env(), cwd=REPO, capture_output=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0 or (prints and not done.stdout.strip()):
        raise SystemExit(
            f"gormes {' '.join(args)} on {db.name} exited {done.returncode}: "
            f"{done.stderr.decode(errors='replace').strip()[-500:]}"
        )
    return elapsed


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- the logs ---------------------------------------------------------------------


def cache_dir() -> Path:
    base = os.environ.get("BENCH_SCALE_DIR") or os.path.join(tempfile.gettempdir(), "gormes-bench-scale")
    path = Path(base) / f"v{VERSION}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def template(cache: Path) -> Path:
    db = cache / "template.db"
    done = cache / "template.done"
    if not done.exists():
        for stale in cache.glob("template.db*"):
            stale.unlink()
        progress("scale: writing the template with the real code ...")
        build_template(db)
        done.write_text("ok\n")
    return db


def build(cache: Path, rows: list, copies: int) -> tuple[Path, dict]:
    """The log of `copies` copies (cached), and how long its whole-log rebuild took."""
    db = cache / f"log-{copies}.db"
    meta_file = cache / f"log-{copies}.json"
    if meta_file.exists():
        return db, json.loads(meta_file.read_text())
    for stale in cache.glob(f"log-{copies}.db*"):
        stale.unlink()
    progress(f"scale: writing {copies} copies of the {len(rows)}-event mix ...")
    start = time.perf_counter()
    events = Replicator(rows, copies, STEP_S).write(
        db, lambda k: progress(f"  {k}/{copies} copies") if k % 500 == 0 else None
    )
    written = time.perf_counter() - start
    progress(f"scale: {events} events in {written:.1f} s; projections rebuild ...")
    rebuild_s = run_cli(db, "projections", "rebuild", prints=False)
    meta = {"events": events, "copies": copies, "write_s": round(written, 2),
            "rebuild_s": round(rebuild_s, 2)}
    meta_file.write_text(json.dumps(meta))
    return db, meta


def head(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT max(position) FROM events").fetchone()[0]
    finally:
        conn.close()


# -- what is read -----------------------------------------------------------------


def targets(rows: list) -> dict[str, str]:
    """Template ids of what the reads name: the demo's parent job (with children)
    and its coordinator run (with subagents)."""
    job = next(r[1][4:] for r in rows if r[3] == "job.child_added")
    run = next(r[1][4:] for r in rows if r[3] == "run.child_spawned")
    first_at = rows[0][6]
    return {"job": job, "run": run, "since": first_at}


def reads(db: Path, rows: list, copies: int, names: dict) -> dict[str, list[str]]:
    last = Ids(rows).renamer(copies - 1)
    since = datetime.datetime.fromtimestamp(names["since"] - 60, datetime.timezone.utc)
    return {
        "events --limit 20": ["events", "--limit", "20"],
        "tail": ["tail", "--after", str(head(db) - 50)],
        "jobs list --limit 20": ["jobs", "list", "--limit", "20"],
        "jobs get": ["jobs", "get", last(names["job"])],
        "jobs stats": ["jobs", "stats"],
        "runs list": ["runs", "list"],
        "runs show": ["runs", "show", last(names["run"])],
        "replay RUN": ["replay", last(names["run"])],
        "doctor": ["doctor"],
        "top --once": ["top", "--once"],
        "projections status": ["projections", "status"],
        "audit export --since": ["audit", "export", "--since", since.strftime("%Y-%m-%dT%H:%M:%S")],
        "recall": ["recall", "Ada Lovelace algorithm", "--scope", last("project:default")],
    }


def whole_log(db: Path, meta: dict, scratch: Path) -> dict[str, float]:
    out = scratch / f"export-{meta['copies']}.jsonl"
    seconds = run_cli(db, "export", "--out", str(out), prints=False)
    out.unlink(missing_ok=True)
    return {
        "projections_rebuild_eps": round(meta["events"] / meta["rebuild_s"]),
        "export_eps": round(meta["events"] / seconds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="events in the big log (at least)")
    parser.add_argument("--factor", type=int, default=100, help="how many times smaller the small log is")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each read on each log")
    parser.add_argument("--quick", action="store_true", help="6,000 events against 600, one run")
    args = parser.parse_args()
    if args.quick:
        args.events, args.factor, args.runs = 6_000, 10, 1
    cache = cache_dir()
    rows = read_template(template(cache))
    big_copies = math.ceil(args.events / len(rows))
    small_copies = max(1, round(big_copies / args.factor))
    big, big_meta = build(cache, rows, big_copies)
    small, small_meta = build(cache, rows, small_copies)
    names = targets(rows)
    commands = {"big": reads(big, rows, big_copies, names),
                "small": reads(small, rows, small_copies, names)}
    seconds: dict[str, dict[str, list[float]]] = {"big": {}, "small": {}}
    for name in commands["big"]:
        progress(f"scale: {name} ...")
        for size, db in (("big", big), ("small", small)):
            run_cli(db, *commands[size][name])  # untimed: the page cache, the doctor's position
        for _ in range(args.runs):
            for size, db in (("big", big), ("small", small)):
                seconds[size].setdefault(name, []).append(run_cli(db, *commands[size][name]))
    median = {size: {n: statistics.median(v) for n, v in by.items()} for size, by in seconds.items()}
    ratios = {n: round(median["big"][n] / median["small"][n], 2) for n in median["big"]}
    with tempfile.TemporaryDirectory(prefix="gormes-scale-") as scratch:
        whole = {"big": whole_log(big, big_meta, Path(scratch)),
                 "small": whole_log(small, small_meta, Path(scratch))}
    print(json.dumps({
        "benchmark": "scale",
        "events_big": big_meta["events"],
        "events_small": small_meta["events"],
        "mix_events": len(rows),
        "bytes_per_event": round(big.stat().st_size / big_meta["events"]),
        "target": TARGET,
        "ratios": ratios,
        "over_target": sorted(n for n, r in ratios.items() if r > TARGET),
        "seconds_big": {n: round(s, 3) for n, s in median["big"].items()},
        "seconds_small": {n: round(s, 3) for n, s in median["small"].items()},
        "whole_log": whole,
        "runs": args.runs,
    }))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
