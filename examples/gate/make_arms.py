"""Two synthetic arms with planted differences, for trying `tuneproof gate` without a GPU or a model.

    .venv/bin/python examples/gate/make_arms.py OUT_FOLDER

The base arm repeats a stock answer more often (less diverse), leans on stock phrases ("a testament
to", "delve into") and opens 20 % of answers with a refusal; the tuned arm does each less. Both arms
have 2 runs (seeds) of 4 samples for 60 prompts, so the gate can measure its own noise.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

WORDS = (
    "river stone light harbour winter market letter garden engine signal forest ledger window "
    "thread mirror valley copper lantern orchard bridge compass meadow anchor canvas summit"
).split()
VERBS = "carries holds turns follows shapes crosses keeps finds answers opens".split()
STOCK = ["it is a testament to the craft", "let us delve into the details"]


def sentence(rng: random.Random) -> str:
    a, b = rng.sample(WORDS, 2)
    return f"The {a} {rng.choice(VERBS)} the {b}."


def answer(rng: random.Random, stock_answer: str, repeat: float, stock: float, refuse: float) -> str:
    text = stock_answer if rng.random() < repeat else " ".join(sentence(rng) for _ in range(6))
    if rng.random() < stock:
        text += " " + rng.choice(STOCK).capitalize() + "."
    if rng.random() < refuse:
        text = "I cannot help with that. " + text
    return text


def arm(seed: int, repeat: float, stock: float, refuse: float) -> list[dict]:
    rows = []
    for run in range(2):
        rng = random.Random(seed * 1000 + run)
        for p in range(60):
            stock_answer = " ".join(sentence(random.Random(p)) for _ in range(6))
            for s in range(4):
                text = answer(rng, stock_answer, repeat, stock, refuse)
                rows.append({"prompt_id": f"q{p:02d}", "run": run, "sample": s, "text": text})
    return rows


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "arms")
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("base", arm(1, 0.35, 0.40, 0.20)), ("tuned", arm(2, 0.05, 0.10, 0.05))):
        (out / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {out / 'base.jsonl'} and {out / 'tuned.jsonl'}")


if __name__ == "__main__":
    main()
