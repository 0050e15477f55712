"""The benchmark gate's false-FAIL rate and power by seeded simulation, through `judge_line` as the gate
applies it (tests/gate/test_gate_power.py asserts on it; docs/gate.md shows the table it prints).

A benchmark of `docs` documents, document i solved with probability p_i ~ U(0, 1) by the base model and
p_i * (1 - drop / 0.5) by the tuned one (a mean drop of `drop` points), each arm run `runs` times (0/1
scores, sampled per run); the default hypothesis (not-worse, no margin, k = 2). FAIL is the gate calling
the drop; at drop 0 it is a false alarm, nominally 2.5 % (the lower tail of a 95 % interval).

    python tests/gate/power_grid.py      # prints the markdown table in docs/gate.md
"""

from __future__ import annotations

import numpy as np

from tuneproof.gate.bench_lineup import BenchUnit
from tuneproof.gate.benchmarks import judge_line

DOCS = (30, 300, 1319)
RUNS = (1, 2, 5)
DROPS = (0, 2, 5, 10)  # points
NULL_TRIALS, POWER_TRIALS = 400, 150
UNIT = BenchUnit(name="sim", kind="task", tasks=("sim",), rows=(("none", "acc"),), top=True)


def verdict(rng: np.random.Generator, docs: int, runs: int, drop: float) -> str | None:
    p = rng.random(docs)
    q = p * (1 - drop / 100 / 0.5)
    base = (rng.random((runs, docs)) < p).astype(float)
    tuned = (rng.random((runs, docs)) < q).astype(float)
    return judge_line(UNIT, "none", "acc", base, tuned, True, "not-worse", None, 2.0).result.verdict


def fail_rate(docs: int, runs: int, drop: float, trials: int, seed: int = 0) -> float:
    rng = np.random.default_rng([seed, docs, runs, int(drop * 10)])
    return sum(verdict(rng, docs, runs, drop) == "FAIL" for _ in range(trials)) / trials


def grid() -> dict[tuple[int, int, int], tuple[float, int]]:
    """(docs, runs, drop) -> (FAIL rate, trials)."""
    out = {}
    for docs in DOCS:
        for runs in RUNS:
            for drop in DROPS:
                trials = NULL_TRIALS if drop == 0 else POWER_TRIALS
                out[docs, runs, drop] = (fail_rate(docs, runs, drop, trials), trials)
    return out


def table(cells: dict[tuple[int, int, int], tuple[float, int]]) -> str:
    named = [f"drop {d} pts" if d else "no change (false FAIL)" for d in DROPS]
    head = "| documents | runs per arm | " + " | ".join(named) + " |"
    lines = [head, "|" + "---|" * (2 + len(DROPS))]
    for docs in DOCS:
        for runs in RUNS:
            row = [f"{100 * cells[docs, runs, d][0]:.1f} %" for d in DROPS]
            lines.append(f"| {docs:,} | {runs} | " + " | ".join(row) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(grid()))
