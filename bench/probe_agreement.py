"""Do the two independent measurements agree on the embedded tiny model on this CPU?

Runs `tuneproof probe` on the embedded tiny Gemma-4-style model (sdpa), three times each: the doctor's
forward pass (batch 2, widths 512-4096) and a training step (batch 1, widths 1024/2048/4096, the
trust issue's command). Prints each cross-check verdict with the gap and its interval, then the
attribution of the quadratic share.

Run: .venv/bin/python bench/probe_agreement.py   (a few minutes)
"""

from __future__ import annotations

import warnings
from dataclasses import replace

from tuneproof.arch import resolve
from tuneproof.commands import probe as probe_command
from tuneproof.commands.probe import ProbeSpec

warnings.filterwarnings("ignore")
SETUPS = {
    "forward, batch 2, 512-4096": ProbeSpec.of(
        widths=(512, 1024, 2048, 4096), batch=2, mode="forward", budget_s=30
    ),
    "training, batch 1, 1024-4096": ProbeSpec.of(
        widths=(1024, 2048, 4096), batch=1, mode="full", budget_s=60
    ),
}


def main() -> None:
    model = resolve("tiny")
    for name, spec in SETUPS.items():
        for i in range(3):
            r = probe_command.run(probe_command.prepare(replace(spec, model=model)))
            cc = r.cross
            print(f"{name} run {i + 1}: {cc.verdict.outcome}: {cc.verdict.reason}")
            for line in cc.explanation[:1] + cc.notes:
                print(f"    {line}")


if __name__ == "__main__":
    main()
