"""Text to 64-bit token values for verbatim matching, a block of documents at a time, without a Python
loop over tokens.

Words (the default): runs of bytes that are not ASCII whitespace (space, tab, CR, LF, VT, FF), case and
punctuation kept (verbatim means verbatim). A word's value is a polynomial hash of its UTF-8 bytes,
sum_j (b_j + 1) * P^(len-1-j) mod 2^64, mixed by splitmix64; it is computed for every word of a block at
once from prefix sums: with Q = P^-1 mod 2^64 (P is odd) and S_i = sum_{j<i} (b_j + 1) Q^j, a word over
bytes [s, e) has hash P^(e-1) * (S_e - S_s). Values are the same in every process (no salted hash).

Tokenizer ids (`--tokenizer`): each id's value is splitmix64(id). Long text is tokenized in blocks cut at
line ends, so a token that would straddle a cut is split there (a newline ends a token in practice).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import numpy as np

from tuneproof.core.errors import TuneproofError

_P = 0x100000001B3  # the 64-bit FNV prime (odd, so it has an inverse mod 2^64)
_Q = pow(_P, -1, 1 << 64)
_WHITESPACE = np.zeros(256, dtype=bool)
_WHITESPACE[[9, 10, 11, 12, 13, 32]] = True
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")
_WORD = re.compile(r"[^\t\n\v\f\r ]+")  # the same words, for naming a span in the report


def splitmix64(x: np.ndarray) -> np.ndarray:
    z = x + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


class _Powers:
    """P^i and Q^i mod 2^64 for i < n, grown on demand."""

    def __init__(self) -> None:
        self.p = np.ones(1, dtype=np.uint64)
        self.q = np.ones(1, dtype=np.uint64)

    def upto(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        if self.p.size < n:
            size = n + n // 8  # blocks of lines differ a little in size: room for the next few
            self.p, self.q = _powers(_P, size), _powers(_Q, size)
        return self.p[:n], self.q[:n]


def _powers(base: int, n: int) -> np.ndarray:
    """base^0 .. base^(n-1) mod 2^64 (uint64 products wrap), by doubling: log2(n) array passes."""
    out = np.empty(max(n, 1), dtype=np.uint64)
    out[0] = 1
    have = 1
    while have < n:
        step = min(have, n - have)
        out[have : have + step] = out[:step] * np.uint64(pow(base, have, 1 << 64))
        have += step
    return out[:n]


_POWERS = _Powers()


def word_values(data: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values, start byte, end byte) of every word in `data`."""
    b = np.frombuffer(data, dtype=np.uint8)
    if b.size == 0:
        empty = np.empty(0, dtype=np.int64)
        return np.empty(0, dtype=np.uint64), empty, empty
    flags = np.zeros(b.size + 2, dtype=np.int8)
    flags[1:-1] = ~_WHITESPACE[b]
    edges = np.diff(flags)
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    p, q = _POWERS.upto(b.size + 1)
    prefix = np.empty(b.size + 1, dtype=np.uint64)
    prefix[0] = 0
    np.cumsum((b.astype(np.uint64) + np.uint64(1)) * q[: b.size], out=prefix[1:])
    hashes = p[ends - 1] * (prefix[ends] - prefix[starts])
    lengths = (ends - starts).astype(np.uint64)
    return splitmix64(hashes ^ (lengths << np.uint64(56))), starts, ends


class Tokens:
    """How text becomes token values: whitespace words (default) or a tokenizer's ids."""

    def __init__(self, tokenizer: Any | None = None, tokenizer_key: str = "") -> None:
        self.tokenizer = tokenizer
        self.key = f"tokenizer:{tokenizer_key}" if tokenizer is not None else "words-v1"
        self.name = "the model's tokenizer" if tokenizer is not None else "whitespace words"

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(values of all texts in order, index of each text's first token)."""
        if self.tokenizer is not None:
            ids = self.tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
            lengths = np.array([len(x) for x in ids], dtype=np.int64)
            flat = np.fromiter((i for x in ids for i in x), dtype=np.uint64, count=int(lengths.sum()))
            return splitmix64(flat), np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        data = "\n".join(texts).encode("utf-8", "surrogatepass")
        values, starts, _ = word_values(data)
        offsets = np.zeros(len(texts), dtype=np.int64)
        if texts:
            sizes = np.array([len(t.encode("utf-8", "surrogatepass")) + 1 for t in texts], dtype=np.int64)
            offsets[1:] = np.cumsum(sizes)[:-1]
        return values, np.searchsorted(starts, offsets).astype(np.int64)

    def span(self, text: str, first: int, count: int) -> str:
        """The text of tokens [first, first + count) of `text`."""
        if self.tokenizer is not None:
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            return str(self.tokenizer.decode(ids[first : first + count]))
        words = list(_WORD.finditer(text))[first : first + count]
        return text[words[0].start() : words[-1].end()] if words else ""


def load_tokenizer(path: str) -> Tokens:
    """A local tokenizer folder (never downloaded); its cache key hashes the folder's small files."""
    folder = Path(path)
    if not folder.is_dir():
        raise TuneproofError(f"tokenizer folder not found: {folder}", "pass a local tokenizer folder")
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise TuneproofError(
            f"{folder} holds no tokenizer files ({', '.join(TOKENIZER_FILES)})",
            "pass the folder a tokenizer was saved to (save_pretrained)",
        )
    digest = hashlib.sha256()
    for f in sorted(folder.iterdir()):
        if f.is_file() and f.suffix not in (".safetensors", ".bin", ".pt", ".gguf"):
            digest.update(f.name.encode() + b"\0" + f.read_bytes())
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception as e:  # a folder that is not a tokenizer: report it, never a traceback
        first = (str(e).splitlines() or [""])[0]
        raise TuneproofError(
            f"cannot load a tokenizer from {folder}: {type(e).__name__}: {first}", "pass a tokenizer folder"
        ) from None
    return Tokens(tok, digest.hexdigest()[:16])
