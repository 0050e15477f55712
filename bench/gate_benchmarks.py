"""Benchmark gate speed: 10 tasks x 1,319 documents x 5 runs x 2 arms judged in under 2 s.

The runs are written in lm-eval's own layout by examples/gate/make_lm_eval.py (gsm8k-shaped generation
tasks, two filters each, so 263,800 samples rows). Measured in one process, one run:

- baseline: `json.loads` of every samples row, the least any reader of these files does;
- read: tuneproof's reader of both arms (`read_arm`), against that baseline;
- judge: lining the arms up and judging every (task, filter, metric) with its floor, paired bootstrap
  interval (2,000 resamples) and power (`check_inputs` + `measure`). GOAL: under 2 s.

Times are wall seconds on this machine: quote the ratios, not the absolute times.

    .venv/bin/python bench/gate_benchmarks.py
"""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

TASKS, DOCS, RUNS = 10, 1319, 5
GOAL_JUDGE_S = 2.0


def _generator():  # type: ignore[no-untyped-def]
    path = Path(__file__).parent.parent / "examples" / "gate" / "make_lm_eval.py"
    spec = importlib.util.spec_from_file_location("make_lm_eval", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_lm_eval"] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    from tuneproof.gate.arms import read_arm
    from tuneproof.gate.checks import check_inputs
    from tuneproof.gate.judge import measure
    from tuneproof.gate.spec import GateSpec

    gen = _generator()
    tasks = [gen.Task(f"gsm8k_{i}", DOCS, "generate", i) for i in range(TASKS)]
    base = gen.Model("org/base", {t.name: 0.3 for t in tasks})
    tuned = gen.Model("org/tuned", {t.name: 0.2 for t in tasks}, 1, tuple(t.name for t in tasks))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        folders = {
            arm: [gen.write_run(root / f"{arm}-{r}", tasks, model, r, f"2026-11-0{r + 1}T10-00-00.000000")
                  for r in range(RUNS)]
            for arm, model in (("base", base), ("tuned", tuned))
        }  # fmt: skip
        files = sorted(root.glob("*/*/samples_*.jsonl"))
        size = sum(p.stat().st_size for p in files)
        print(
            f"wrote {len(files)} samples files ({size / 2**20:.0f} MiB) in {time.perf_counter() - t0:.1f} s"
        )

        t0 = time.perf_counter()
        rows = 0
        for p in files:
            with open(p, "rb") as f:
                for line in f:
                    json.loads(line)
                    rows += 1
        parse = time.perf_counter() - t0
        print(f"baseline: json.loads of {rows:,} rows: {parse:.2f} s")

        t0 = time.perf_counter()
        arms = {arm: read_arm(paths, arm) for arm, paths in folders.items()}
        read = time.perf_counter() - t0
        print(f"read: tuneproof's reader, both arms: {read:.2f} s ({read / parse:.2f}x the baseline)")

        t0 = time.perf_counter()
        spec = GateSpec()
        pairing = check_inputs(arms["base"], arms["tuned"], spec, {}, False, [])
        report = measure(arms["base"], arms["tuned"], pairing, spec)
        judge = time.perf_counter() - t0
        assert report.benchmarks is not None
        lines = len(report.benchmarks.lines)
        shape = f"{TASKS} tasks x {DOCS:,} documents x {RUNS} runs x 2 arms"
        print(f"judge: {lines} lines ({TASKS} tasks x 2 filters) of {shape}, verdict {report.verdict}: "
              f"{judge:.2f} s ({judge / parse:.2f}x the baseline parse)")  # fmt: skip
        met = "met" if judge < GOAL_JUDGE_S else "MISSED"
        print(f"GOAL judge {shape} in < {GOAL_JUDGE_S:g} s: {judge:.2f} s -> {met}")


if __name__ == "__main__":
    main()
