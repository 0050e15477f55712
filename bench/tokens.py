"""The tokens-that-train check's speed goal: 100,000 examples in under 10 s on 2 cores, against
tokenising them alone.

The examples are chat rows (a system turn in every third, a user turn of 3-40 words, an answer of 2-60)
built by the tests' tiny word-level tokenizer with a Llama-3-like template with generation markers.
Three lines, medians of --runs runs in one process, each a ratio to the first:

1. tokenising alone: `tokenizer(texts)` on each example's turns joined (no template, no labels);
2. transformers' own `apply_chat_template(..., return_assistant_tokens_mask=True)` in batches of 512:
   what TRL's SFTTrainer calls (one example at a time) to build the same masks;
3. the check: `tuneproof.labels.report.check` with TRL's rules (assistant-only loss, max_length 1024),
   labels, truncation, counts and findings included; and the same with Axolotl's rules.

    .venv/bin/python bench/tokens.py [--examples N] [--runs R]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))


def median_seconds(work: Callable[[], Any], runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        work()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    import os

    import tiny_tokenizers as tt
    from tuneproof.labels.report import ModelFacts, check
    from tuneproof.labels.rules import LabelRules

    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    rows = tt.chats(a.examples, seed=1, user=(3, 40), answer=(2, 60))
    tok = tt.tokenizer("llama3", True)
    texts = ["\n".join(m["content"] for m in r["messages"]) for r in rows]
    chats = [r["messages"] for r in rows]

    def apply() -> None:
        for i in range(0, len(chats), 512):
            tok.apply_chat_template(chats[i : i + 512], tokenize=True, return_dict=True,
                                    return_assistant_tokens_mask=True)  # fmt: skip

    trl = LabelRules(assistant_only_loss=True)
    axolotl = LabelRules(trainer="axolotl", max_length=1024)
    alone = median_seconds(lambda: tok(texts), a.runs)
    lines = [
        ("tokenising alone", alone),
        ("apply_chat_template with assistant masks", median_seconds(apply, a.runs)),
        ("check, TRL's rules", median_seconds(lambda: check(rows, tok, trl, ModelFacts(), "bench"), a.runs)),
        (
            "check, Axolotl's rules",
            median_seconds(lambda: check(rows, tok, axolotl, ModelFacts(), "bench"), a.runs),
        ),
    ]
    report = check(rows, tok, trl, ModelFacts(), "bench")
    cores = os.cpu_count()
    print(f"{a.examples:,} chat examples, {report.tokens:,} tokens, {cores} cores, median of {a.runs} runs")
    for name, seconds in lines:
        print(f"  {name:<42} {seconds:7.2f} s   {seconds / alone:5.2f}x tokenising alone")
    goal = min(s for n, s in lines if n.startswith("check"))
    worst = max(s for n, s in lines if n.startswith("check"))
    met = "met" if worst < 10 else "NOT met"
    print(f"goal (< 10 s for 100,000 examples): {met} ({goal:.2f} to {worst:.2f} s)")


if __name__ == "__main__":
    main()
