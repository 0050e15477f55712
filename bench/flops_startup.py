"""Wall time of `tuneproof flops` on a full-size config, interpreter start-up included: today's path
(TUNEPROOF_NO_CACHE=1: the config read through transformers, which imports torch) against a warm
run (the resolved model read from the on-disk cache, tuneproof.arch.cache), in the same run.

The config is Qwen3-30B-A3B's published config.json (tests/data/configs) with 60 layers and hidden
size 4096 (128 experts, top-8), written to a temporary folder; the cache lives in that folder too,
never in yours. One warm-up run fills the cache (its time is printed, not counted); then cold and
warm runs alternate, REPEATS of each, so that a neighbour's burst falls on both alike. Prints each
path's median and range, the ratio of the medians and whether the warm median meets the goal of
issue 20 (under 2 s). Each run's JSON must equal the first cold run's.

Run: .venv/bin/python bench/flops_startup.py
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPEATS = 5
GOAL_S = 2.0
CONFIG = Path(__file__).resolve().parent.parent / "tests" / "data" / "configs" / "qwen3-30b-a3b.json"
FLAGS = ("--seq-len", "4096", "--json")
FULL_SIZE = {"num_hidden_layers": 60, "hidden_size": 4096, "num_experts": 128}


def timed(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = subprocess.run(args, env=env, capture_output=True, text=True, check=True).stdout
    return time.perf_counter() - t0, out


def spread(times: list[float]) -> str:
    return f"median {statistics.median(times):.3f} s  (min {min(times):.3f}, max {max(times):.3f})"


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="tuneproof-flops-startup-") as tmp:
        config = Path(tmp) / "config.json"
        config.write_text(json.dumps({**json.loads(CONFIG.read_text()), **FULL_SIZE}))
        args = [sys.executable, "-m", "tuneproof", "flops", "--config", str(config), *FLAGS]
        base = {k: v for k, v in os.environ.items() if k != "TUNEPROOF_NO_CACHE"}
        base["TUNEPROOF_CACHE"] = str(Path(tmp) / "cache")
        cold_env = {**base, "TUNEPROOF_NO_CACHE": "1"}
        envs = {"cold (TUNEPROOF_NO_CACHE=1, today's path)": cold_env, "warm": base}
        bare, _ = timed([sys.executable, "-c", "pass"], base)
        first, expected = timed(args, base)  # fills the cache: warm-up, not counted
        print(f"== tuneproof flops, {FULL_SIZE} from {CONFIG.name}, {' '.join(FLAGS)}")
        print(f"python start-up alone {bare:.3f} s; first run (cold, writes the cache) {first:.3f} s")
        times: dict[str, list[float]] = {name: [] for name in envs}
        for _ in range(REPEATS):
            for name, env in envs.items():
                seconds, out = timed(args, env)
                if json.loads(out) != json.loads(expected):
                    print(f"error: the {name} run printed another report", file=sys.stderr)
                    return 1
                times[name].append(seconds)
        print(f"{REPEATS} runs each, alternating:")
        for name, ts in times.items():
            print(f"  {name:44s} {spread(ts)}")
        cold, warm = (statistics.median(ts) for ts in times.values())
        print(f"cold / warm: {cold / warm:.1f}x")
        verdict = "met" if warm < GOAL_S else "NOT met"
        print(f"goal (warm under {GOAL_S:.0f} s, start-up included): {verdict}, {warm:.3f} s")
        return 0 if warm < GOAL_S else 1


if __name__ == "__main__":
    sys.exit(main())
