"""Synthetic arms for gate tests: a seeded text generator whose true differences are known.

Each response is `words` words drawn from a vocabulary; with probability `repeat` a response copies the
prompt's stock template instead (less diversity); with probability `attractor` it holds the phrase
"a testament to"; with probability `refusal` it holds "I cannot help with that".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

VOCAB = [f"w{i}" for i in range(400)]


@dataclass(frozen=True)
class Style:
    repeat: float = 0.3
    attractor: float = 0.3
    refusal: float = 0.2
    words: int = 40


def rows(style: Style, seed: int, prompts: int = 40, runs: int = 2, samples: int = 4) -> list[dict]:
    out = []
    for run in range(runs):
        rng = np.random.default_rng([seed, run])
        for p in range(prompts):
            template = " ".join(np.random.default_rng([999, p]).choice(VOCAB, style.words))
            for s in range(samples):
                text = template if rng.random() < style.repeat else " ".join(rng.choice(VOCAB, style.words))
                if rng.random() < style.attractor:
                    text += " it is a testament to the craft"
                if rng.random() < style.refusal:
                    text = "I cannot help with that. " + text
                out.append({"prompt_id": f"p{p:03d}", "run": run, "sample": s, "text": text})
    return out


def write_arm(path: Path, rows_: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows_))
    return path


def twin(path: Path) -> Path:
    """The arm at `path` as another run of the same model would write it: the same rows, other bytes
    (compact JSON), beside it. The gate refuses one file (or a byte copy) as both arms."""
    out = path.with_name(path.stem + "-twin" + path.suffix)
    rows_ = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    out.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows_))
    return out


def arm(style: Style, seed: int, name: str, **kw: int):
    from tuneproof.gate.arms import Arm

    a = Arm(name=name, sources=(name,))
    for r in rows(style, seed, **kw):
        a.runs.setdefault(str(r["run"]), {}).setdefault(r["prompt_id"], []).append(r["text"])
    return a
