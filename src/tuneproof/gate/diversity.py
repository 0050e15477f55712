"""Within-prompt diversity at matched length: how different a prompt's samples in one run are from each
other, with length unable to fake it.

Tokens: lower-cased words and single punctuation marks (`\\w+|[^\\w\\s]`). For each prompt, every arm and
run contributes the same number of samples (the fewest any of them has: fewer samples repeat each other
less, so uneven counts would fake a difference), and every response is truncated to the same number
of tokens: the shortest of those responses (`matched length`). A prompt whose shortest response has
fewer than 4 tokens is left out (a 4-gram needs 4 tokens), and the count is reported.

Per prompt and run, over that prompt's samples:
- distinct-n (Li et al. 2016): distinct n-grams / all n-grams, n-grams taken inside each response;
  `distinct` is the mean of distinct-1..4. Wanted: up.
- gzip (Shaib et al. 2024, `diversity.compression_ratio`): bytes of the samples joined by spaces over
  the bytes of their gzip compression. Higher is more repetitive. Wanted: down.
- embedding (Shaib et al.'s remote-clique): mean pairwise cosine distance of the samples' embeddings,
  when an embedder is given. Needs 2 samples per prompt. Wanted: up.
"""

from __future__ import annotations

import gzip
import os
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tuneproof.gate.arms import Arm

if TYPE_CHECKING:
    from pathlib import Path

TOKEN = re.compile(r"\w+|[^\w\s]")
MIN_MATCHED_TOKENS = 4
NGRAM_ORDERS = (1, 2, 3, 4)

Embedder = Callable[[list[str]], np.ndarray]


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text.lower())


def distinct_n(responses: Sequence[Sequence[str]], n: int) -> float:
    """Distinct n-grams over all n-grams, n-grams taken inside each response; NaN when there are none."""
    grams = [tuple(r[i : i + n]) for r in responses for i in range(len(r) - n + 1)]
    return len(set(grams)) / len(grams) if grams else float("nan")


def gzip_ratio(responses: Sequence[Sequence[str]]) -> float:
    """Original bytes / gzip bytes of the responses joined by spaces (higher = more repetitive)."""
    data = " ".join(" ".join(r) for r in responses).encode()
    return len(data) / len(gzip.compress(data, mtime=0)) if data else float("nan")


def mean_cosine_distance(vectors: np.ndarray) -> float:
    """Mean over pairs i < j of 1 - cos(v_i, v_j); NaN with fewer than 2 vectors or a zero vector."""
    m = vectors.shape[0]
    if m < 2:
        return float("nan")
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    if np.any(norms == 0):
        return float("nan")
    unit = vectors / norms
    sims = unit @ unit.T
    return float(1.0 - sims[np.triu_indices(m, k=1)].mean())


PARTS = ("distinct", "distinct-1", "distinct-2", "distinct-3", "distinct-4", "gzip", "embedding")
WANTED = {"gzip": "down"}  # every other part: up


@dataclass(kw_only=True, frozen=True, slots=True)
class DiversityScores:
    """Per part: (base runs x prompts, tuned runs x prompts); plus the matched lengths used."""

    scores: dict[str, tuple[np.ndarray, np.ndarray]]
    matched_lengths: np.ndarray  # per kept prompt
    num_short: int  # prompts left out: a response shorter than MIN_MATCHED_TOKENS
    samples_per_prompt: float
    num_uneven: int  # prompts whose sample counts differ between arms or runs (compared on the fewest)


def diversity_scores(
    base: Arm, tuned: Arm, prompt_ids: list[str], embed: Embedder | None = None
) -> DiversityScores:
    tok = {
        (arm.name, run, p): [tokens(t) for t in arm.texts(run, p)]
        for arm in (base, tuned)
        for run in arm.run_names
        for p in prompt_ids
    }
    # matched samples, then matched length: every (arm, run) of a prompt gets its first `samples[p]`
    # responses, each cut to the shortest of them
    samples = {
        p: min(len(tok[arm.name, run, p]) for arm in (base, tuned) for run in arm.run_names)
        for p in prompt_ids
    }
    lengths = {}
    for p in prompt_ids:
        lengths[p] = min(
            len(r)
            for arm in (base, tuned)
            for run in arm.run_names
            for r in tok[arm.name, run, p][: samples[p]]
        )
    uneven = sum(
        1
        for p in prompt_ids
        if any(len(tok[arm.name, run, p]) != samples[p] for arm in (base, tuned) for run in arm.run_names)
    )
    kept = [p for p in prompt_ids if lengths[p] >= MIN_MATCHED_TOKENS]
    names = [n for n in PARTS if n != "embedding" or embed is not None]
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    arrays = {
        arm.name: {n: np.full((len(arm.run_names), len(prompt_ids)), np.nan) for n in names}
        for arm in (base, tuned)
    }
    counts = []
    for arm in (base, tuned):
        for i, run in enumerate(arm.run_names):
            for j, p in enumerate(prompt_ids):
                counts.append(len(tok[arm.name, run, p]))
                if lengths[p] < MIN_MATCHED_TOKENS:
                    continue
                cut = [r[: lengths[p]] for r in tok[arm.name, run, p][: samples[p]]]
                table = arrays[arm.name]
                for n in NGRAM_ORDERS:
                    table[f"distinct-{n}"][i, j] = distinct_n(cut, n)
                table["distinct"][i, j] = np.mean([table[f"distinct-{n}"][i, j] for n in NGRAM_ORDERS])
                table["gzip"][i, j] = gzip_ratio(cut)
                if embed is not None:
                    table["embedding"][i, j] = mean_cosine_distance(embed([" ".join(r) for r in cut]))
    for name in names:
        out[name] = (arrays[base.name][name], arrays[tuned.name][name])
    return DiversityScores(
        scores=out,
        matched_lengths=np.array([lengths[p] for p in kept], dtype=np.int64),
        num_short=len(prompt_ids) - len(kept),
        samples_per_prompt=float(np.mean(counts)) if counts else 0.0,
        num_uneven=uneven,
    )


@contextmanager
def hub_offline() -> Iterator[None]:
    """`HF_HUB_OFFLINE=1` while the block runs (the hub never downloads), then the variable as it was."""
    before = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = before


def load_embedder(path: str) -> Embedder:
    """A local embedding model: model2vec (a StaticModel folder: `model.safetensors` + `tokenizer.json`)
    or any sentence-transformers folder. Never downloads (the hub is offline while it loads)."""
    from pathlib import Path

    from tuneproof.core.errors import TuneproofError

    folder = Path(path)
    if not folder.is_dir():
        raise TuneproofError(f"embedder folder not found: {folder}", "pass a local model folder")
    with hub_offline():
        return _load_embedder(folder)


def _load_embedder(folder: Path) -> Embedder:
    import importlib.util

    from tuneproof.core.errors import TuneproofError

    static_layout = (folder / "tokenizer.json").is_file() and (folder / "model.safetensors").is_file()
    try:
        if static_layout and importlib.util.find_spec("model2vec") is not None:
            from model2vec import StaticModel

            model = StaticModel.from_pretrained(str(folder))
            return lambda texts: np.asarray(model.encode(texts, use_multiprocessing=False), dtype=np.float64)
        if importlib.util.find_spec("sentence_transformers") is None:
            raise TuneproofError(
                f"cannot load the embedder {folder}: model2vec and sentence-transformers are not installed",
                "pip install 'tuneproof[embed]' (model2vec) or 'tuneproof[sentence]' (sentence-transformers)",
            )
        from sentence_transformers import SentenceTransformer

        st = SentenceTransformer(str(folder), local_files_only=True)
        return lambda texts: np.asarray(st.encode(texts), dtype=np.float64)
    except TuneproofError:
        raise
    except Exception as e:  # a folder that is not a model: report it, never a traceback
        raise TuneproofError(
            f"cannot load the embedder {folder}: {type(e).__name__}: {(str(e).splitlines() or [''])[0]}",
            "pass a local model2vec or sentence-transformers folder",
        ) from None
