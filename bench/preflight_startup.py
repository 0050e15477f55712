"""Wall time of `tuneproof preflight` on a full-size run, no dataset, interpreter start-up included
(issue 23's goal: under 5 s).

The run is Axolotl's own Gemma-4 26B-A4B QLoRA example (tests/data/axolotl/examples, the hybrid
attention version at Axolotl's HEAD) against the published config.json of google/gemma-4-26B-A4B in a
fake Hugging Face cache, with --gpu H100. Cold runs start from an empty tuneproof cache (the model's
shape and module inventory are built on the meta device); warm runs reuse it. The baseline is the
floor every such command pays: `python -c "import torch, transformers"`, measured in the same run.
Cold, warm and baseline runs alternate, REPEATS of each, so that a neighbour's burst falls on all alike.
Prints medians and ranges, the ratios to the baseline and whether the cold median meets the goal.

Run: .venv/bin/python bench/preflight_startup.py
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPEATS = 5
GOAL_S = 5.0
ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "tests" / "data" / "axolotl" / "examples" / "gemma4__26b-a4b-moe-qlora.yaml"
CONFIG = ROOT / "tests" / "data" / "configs" / "gemma-4-26b-a4b.json"
TUNEPROOF = str(Path(sys.executable).with_name("tuneproof"))


def _timed(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if done.returncode not in (0, 1):
        raise SystemExit(f"{argv[0]} failed ({done.returncode}): {done.stderr[-400:]}")
    return elapsed


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        hub = Path(tmp) / "hub" / "models--google--gemma-4-26B-A4B"
        (hub / "snapshots" / ("0" * 40)).mkdir(parents=True)
        shutil.copy(CONFIG, hub / "snapshots" / ("0" * 40) / "config.json")
        (hub / "refs").mkdir()
        (hub / "refs" / "main").write_text("0" * 40)
        env = {**os.environ, "HF_HUB_CACHE": str(Path(tmp) / "hub")}
        argv = [TUNEPROOF, "preflight", str(RUN), "--gpu", "H100", "--json"]
        base = [sys.executable, "-c", "import torch, transformers"]
        times: dict[str, list[float]] = {"cold": [], "warm": [], "baseline": []}
        for i in range(REPEATS):
            cache = Path(tmp) / f"cache{i}"
            times["cold"].append(_timed(argv, {**env, "TUNEPROOF_CACHE": str(cache)}))
            times["warm"].append(_timed(argv, {**env, "TUNEPROOF_CACHE": str(cache)}))
            times["baseline"].append(_timed(base, env))
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in times.items():
        print(f"{k:9s} median {med[k]:.2f} s (range {min(v):.2f}-{max(v):.2f} s, {REPEATS} runs)")
    ratio = {k: med[k] / med["baseline"] for k in ("cold", "warm")}
    print(f"cold / baseline {ratio['cold']:.2f}x, warm / baseline {ratio['warm']:.2f}x")
    met = "met" if med["cold"] < GOAL_S else "MISSED"
    goal = f"GOAL preflight on a full-size config, no dataset, cold, under {GOAL_S:g} s"
    print(f"{goal}: {med['cold']:.2f} s -> {met}")


if __name__ == "__main__":
    main()
