"""Per-module mutation score from the last `mutmut run` (the mutants/ folder it leaves).

Killed counts kills by the test suite (and timeouts: a mutant that makes a test hang is caught).
Survived counts mutants every relevant test passed with, plus mutants no test reaches. The share that
survives must stay under `LIMIT` for every module; the exit code says whether it does.

Run: .venv/bin/python dev/mutation_report.py   (part of `make mutate`)
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 0.15
KILLED = {1, 3, 36, -24, 24, 152, 255, 37}  # mutmut's exit codes for killed, timeout, type-check caught
SURVIVED = {0, 5, 33}  # passed every test, or no test reaches it


def main() -> int:
    metas = sorted((ROOT / "mutants" / "src").rglob("*.py.meta"))
    if not metas:
        print("no mutation results: run `mutmut run` first", file=sys.stderr)
        return 2
    worst = 0.0
    print(f"{'module':44s} {'mutants':>8s} {'killed':>7s} {'survived':>9s} {'share':>7s}")
    totals: Counter[str] = Counter()
    for meta in metas:
        codes = json.loads(meta.read_text()).get("exit_code_by_key", {}).values()
        count = Counter("killed" if c in KILLED else "survived" if c in SURVIVED else "other" for c in codes)
        checked = count["killed"] + count["survived"]
        if not checked:
            continue
        share = count["survived"] / checked
        worst = max(worst, share)
        totals.update(count)
        module = str(meta.relative_to(ROOT / "mutants" / "src")).removesuffix(".meta")
        flag = "  > limit" if share > LIMIT else ""
        print(
            f"{module:44s} {checked:8d} {count['killed']:7d} {count['survived']:9d} {100 * share:6.1f}%{flag}"
        )
    checked = totals["killed"] + totals["survived"]
    share = totals["survived"] / checked
    print(f"{'all':44s} {checked:8d} {totals['killed']:7d} {totals['survived']:9d} {100 * share:6.1f}%")
    if totals["other"]:
        print(f"({totals['other']} mutants not checked or suspicious are left out)")
    return 0 if worst <= LIMIT else 1


if __name__ == "__main__":
    sys.exit(main())
