"""Start-up: `gormes --help` against `python -c pass`, the interpreter alone.

Both are run as fresh processes, interleaved, many times; the figure is the
median of each and the difference between them (the target: within 250 ms).
`gormes --version` and `import gormes` are timed too, as supplementary keys.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from _common import median, progress, report

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "21"))
REPO = Path(__file__).resolve().parents[1]

COMMANDS = {
    "python_pass": [sys.executable, "-c", "pass"],
    "gormes_help": [sys.executable, "-m", "gormes", "--help"],
    "gormes_version": [sys.executable, "-m", "gormes", "--version"],
    "import_gormes": [sys.executable, "-c", "import gormes"],
}


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=REPO)
    return time.perf_counter() - start


def main() -> None:
    samples: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for argv in COMMANDS.values():  # warm the page cache and the bytecode
        timed(argv)
    for i in range(ROUNDS):
        for name, argv in COMMANDS.items():
            samples[name].append(timed(argv))
        if i % 5 == 4:
            progress(f"startup: {i + 1}/{ROUNDS} rounds")
    medians = {name: median(values) for name, values in samples.items()}
    over = medians["gormes_help"] - medians["python_pass"]
    report({
        "benchmark": "startup",
        "rounds": ROUNDS,
        "gormes_help_s": round(medians["gormes_help"], 4),
        "python_pass_s": round(medians["python_pass"], 4),
        "help_over_python_s": round(over, 4),
        "ratio": round(medians["gormes_help"] / medians["python_pass"], 2),
        "target_over_s": 0.25,
        "met": over <= 0.25,
        "gormes_version_s": round(medians["gormes_version"], 4),
        "import_gormes_s": round(medians["import_gormes"], 4),
    })


if __name__ == "__main__":
    main()
