"""The four mutants the trust issue found alive, applied one at a time to a copy of the source; the
suite's relevant tests must fail on each (the mutant is "killed"). Exit 1 if any survives.

Each mutant is a set of regex substitutions that must each match the source exactly once, so a
refactor that moves the code fails loudly here instead of silently testing nothing. The mutated copy
is imported ahead of the installed package (PYTHONPATH).

Run: .venv/bin/python dev/named_mutants.py   (part of `make mutate`)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (what the mutant does, file, [(regex, replacement), ...] each matching exactly once, tests that
# must catch it). Regexes tolerate the formatter's line breaks.
MUTANTS: tuple[tuple[str, str, list[tuple[str, str]], list[str]], ...] = (
    (
        "adjudicator's closest picks the largest error instead of the smallest",
        "src/tuneproof/commands/adjudicate.py",
        [(r"sorted\(means, key=lambda b: means\[b\]\)", "sorted(means, key=lambda b: -means[b])")],
        ["tests/commands/test_adjudicate.py"],
    ),
    (
        "the cross-check's agree and disagree swapped",
        "src/tuneproof/measure/crosscheck.py",
        [
            (r'Agreement\(\s*outcome="agree"', 'Agreement(outcome="SWAPPED"'),
            (r'Agreement\(\s*outcome="disagree"', 'Agreement(outcome="agree"'),
            (r'Agreement\(outcome="SWAPPED"', 'Agreement(outcome="disagree"'),
        ],
        ["tests/measure/test_probe.py"],
    ),
    (
        "warm-up runs leak into the timed repeats",
        "src/tuneproof/measure/timing.py",
        [(r"for _ in range\(warmup\):\s*fn\(\)", "pass")],
        ["tests/measure/test_timing.py"],
    ),
    (
        "the H100 SXM bf16 peak changed from 989 to 98.9 TFLOP/s",
        "src/tuneproof/hardware/gpus.py",
        [
            (
                r'name="H100 SXM",(\s*aliases=\("h100 sxm", "h100 80gb hbm3", "h100"\),'
                r"\s*capability=\(9, 0\),\s*smem_per_block_optin=SMEM_SM90_100,\s*)"
                r'peak_tflops=\{"bf16": 989\.0',
                r'name="H100 SXM",\1peak_tflops={"bf16": 98.9',
            )
        ],
        ["tests/hardware/test_hardware.py"],
    ),
)


def mutate(text: str, steps: list[tuple[str, str]], name: str) -> str:
    for pattern, replacement in steps:
        text, count = re.subn(pattern, replacement, text)
        if count != 1:
            raise SystemExit(
                f"mutant '{name}': {pattern!r} matched {count} times; update the mutant to the code"
            )
    return text


def run_one(name: str, rel: str, steps: list[tuple[str, str]], tests: list[str]) -> bool:
    """True if the mutant is killed (the tests fail on it)."""
    with tempfile.TemporaryDirectory(prefix="tuneproof-mutant-") as tmp:
        copy = Path(tmp)
        shutil.copytree(ROOT / "src", copy / "src")
        shutil.copytree(ROOT / "tests", copy / "tests")
        shutil.copytree(ROOT / "examples", copy / "examples")
        target = copy / rel
        target.write_text(mutate(target.read_text(), steps, name))
        env = {**os.environ, "PYTHONPATH": str(copy / "src")}
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-x",
            "-p",
            "no:warnings",
            "-p",
            "no:cacheprovider",
            *tests,
        ]
        result = subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True)
        return result.returncode != 0


def main() -> int:
    survivors = 0
    for name, rel, steps, tests in MUTANTS:
        killed = run_one(name, rel, steps, tests)
        survivors += not killed
        print(f"{'killed  ' if killed else 'SURVIVED'} {name} ({rel}; {', '.join(tests)})")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
