"""The four mutants the trust issue found alive, applied one at a time to a copy of the source; the
suite's relevant tests must fail on each (the mutant is "killed"). Exit 1 if any survives.

Each mutant is a text substitution that must match the source exactly once, so a refactor that moves
the code fails loudly here instead of silently testing nothing.

Run: .venv/bin/python dev/named_mutants.py   (part of `make mutate`)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (what the mutant does, file, original text, mutated text, tests that must catch it)
MUTANTS = (
    (
        "adjudicator's closest picks the largest error instead of the smallest",
        "src/tuneproof/attention/adjudicate.py",
        "ranked = sorted(means, key=lambda b: means[b])",
        "ranked = sorted(means, key=lambda b: -means[b])",
        ["tests/test_adjudicate.py"],
    ),
    (
        "the cross-check's agree and disagree swapped",
        "src/tuneproof/measure/crosscheck.py",
        'if -tolerance <= lo and hi <= tolerance:\n        return Verdict("agree"',
        'if -tolerance <= lo and hi <= tolerance:\n        return Verdict("disagree"',
        ["tests/test_probe.py"],
    ),
    (
        "warm-up runs leak into the timed repeats",
        "src/tuneproof/measure/timing.py",
        "            for _ in range(warmup):\n                fn()\n",
        "            pass\n",
        ["tests/test_timing.py"],
    ),
    (
        "the H100 SXM bf16 peak changed from 989 to 98.9 TFLOP/s",
        "src/tuneproof/hardware.py",
        '{"bf16": 989.0, "fp16": 989.0, "fp8": 1979.0},\n        "NVIDIA H100 datasheet (SXM column)',
        '{"bf16": 98.9, "fp16": 989.0, "fp8": 1979.0},\n        "NVIDIA H100 datasheet (SXM column)',
        ["tests/test_hardware.py"],
    ),
)


def run_one(name: str, rel: str, original: str, mutated: str, tests: list[str]) -> bool:
    """True if the mutant is killed (the tests fail on it)."""
    with tempfile.TemporaryDirectory(prefix="tuneproof-mutant-") as tmp:
        copy = Path(tmp)
        shutil.copytree(ROOT / "src", copy / "src")
        shutil.copytree(ROOT / "tests", copy / "tests")
        target = copy / rel
        text = target.read_text()
        if text.count(original) != 1:
            raise SystemExit(f"mutant '{name}': the original text appears {text.count(original)} times in {rel}")
        target.write_text(text.replace(original, mutated))
        env = {**os.environ, "PYTHONPATH": str(copy / "src")}
        cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:warnings", "-p", "no:cacheprovider", *tests]
        result = subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True)
        return result.returncode != 0


def main() -> int:
    survivors = 0
    for name, rel, original, mutated, tests in MUTANTS:
        killed = run_one(name, rel, original, mutated, tests)
        survivors += not killed
        print(f"{'killed  ' if killed else 'SURVIVED'} {name} ({rel}; {', '.join(tests)})")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
