"""What interleaving buys on a shared machine, measured: the same widths timed two ways with a bursty
neighbour process running (bench/neighbour.py), several times each.

- sequential: torch.utils.benchmark.Timer.adaptive_autorange per width, one width after another
  (the field's tool: it repeats until its IQR is within 10 % of the median, but a burst during one
  width's turn lands on that width alone);
- interleaved: tuneproof.measure.time_interleaved (round-robin widths, outliers set aside).

Prints, per method, the quadratic share at the largest width over the runs (median, min-max) and how
often the constant test called per-step overhead present. Then the acceptance check of the trust
issue: `tuneproof probe --config tiny --widths 1024,2048,4096` under the same neighbour, its verdicts.

Run: .venv/bin/python bench/timing_under_load.py   (several minutes)
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

from tuneproof.arch import resolve
from tuneproof.measure import fit_scaling, time_interleaved
from tuneproof.measure.model import build_model

warnings.filterwarnings("ignore")
WIDTHS = (512, 1024, 2048, 4096)
RUNS = 4
HERE = Path(__file__).resolve().parent


def steps() -> dict[int, object]:
    net = build_model(resolve("tiny"), "sdpa").eval()
    gen = torch.Generator().manual_seed(0)
    out = {}
    for w in WIDTHS:
        ids = torch.randint(0, 512, (2, w), generator=gen)

        def step(ids: torch.Tensor = ids) -> None:
            with torch.no_grad():
                net(input_ids=ids)

        out[w] = step
    return out


def sequential(fns: dict[int, object]) -> tuple[np.ndarray, np.ndarray]:
    from torch.utils.benchmark import Timer

    ws, ts = [], []
    for w, fn in fns.items():
        m = Timer("fn()", globals={"fn": fn}, num_threads=torch.get_num_threads()).adaptive_autorange(
            threshold=0.1, min_run_time=1.0, max_run_time=8.0
        )
        ws += [w] * len(m.times)
        ts += list(m.times)
    return np.asarray(ws, float), np.asarray(ts)


def interleaved(fns: dict[int, object]) -> tuple[np.ndarray, np.ndarray]:
    r = time_interleaved(fns, min_repeats=6, budget_s=30.0)
    ws = np.concatenate([[w] * len(t.times_s) for w, t in r.timings.items()]).astype(float)
    return ws, np.concatenate([t.times_s for t in r.timings.values()])


def main() -> None:
    neighbour = subprocess.Popen([sys.executable, str(HERE / "neighbour.py")])
    try:
        fns = steps()
        for fn in fns.values():
            fn()  # warm
        for name, method in (
            ("sequential (adaptive_autorange)", sequential),
            ("interleaved (tuneproof)", interleaved),
        ):
            shares, present = [], 0
            for _ in range(RUNS):
                fit = fit_scaling(*method(fns))
                shares.append(100 * fit.quad_share[float(WIDTHS[-1])])
                present += fit.constant.verdict == "present"
            print(
                f"{name:32s} quadratic share at {WIDTHS[-1]}: median {statistics.median(shares):.1f} %, "
                f"range {min(shares):.1f}-{max(shares):.1f} % over {RUNS} runs; "
                f"constant 'present' in {present}"
            )
        print("\nacceptance: tuneproof probe --config tiny --widths 1024,2048,4096, under the neighbour")
        for i in range(3):
            out = subprocess.run(
                [str(Path(sys.executable).parent / "tuneproof"), "probe", "--config", "tiny", "--widths",
                 "1024,2048,4096", "--json"],
                capture_output=True, text=True, check=True,
            ).stdout  # fmt: skip
            cc = json.loads(out)["cross_check"]
            print(f"  run {i + 1}: {cc['verdict']}: {cc['reason']}")
    finally:
        neighbour.kill()


if __name__ == "__main__":
    main()
