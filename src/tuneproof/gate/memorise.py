"""Memorisation: verbatim spans of the training corpus in the model's responses.

The corpus (`.txt` files, each one document, or `.jsonl` rows with a `text` field, each one document;
either may be gzipped) becomes a sorted array of 64-bit hashes of every k-token window that stays inside
one document: 8 bytes per corpus token at most, cached on disk keyed by the corpus bytes, k and the
tokenizer. A response window is a hit when its hash is in the index (a binary search).

Tokens are whitespace-separated words (case and punctuation kept: verbatim means verbatim), or the
model's tokenizer ids when one is given. Each token becomes a 64-bit value (blake2b of the word, or a
splitmix64 of the id); a window's hash is sum_j v[i+j] * P^(k-1-j) mod 2^64, computed for all windows at
once by doubling (log2 k array passes). Two different windows share a hash with probability about
2^-64 per pair: for 10^8 corpus windows and 10^6 response windows, about 5e-6 false hits in all.

Per response: whether any window hits, and the longest run of consecutive hit windows, reported as a
span of (run length + k - 1) tokens: the longest verbatim span shared with the corpus when it is at
least k tokens long (a shorter shared span is not seen: it is reported as "< k").
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import tempfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tuneproof.errors import TuneproofError

DEFAULT_K = 32
_P = 0x9E3779B97F4A7C15  # odd multiplier of the polynomial hash (the golden-ratio constant)
_MASK = (1 << 64) - 1
_BLOCK_WORDS = 2_000_000
CORPUS_HINT = "pass .txt files or .jsonl files with a 'text' field (optionally .gz)"


def cache_dir() -> Path:
    """$TUNEPROOF_CACHE, else $XDG_CACHE_HOME/tuneproof, else ~/.cache/tuneproof."""
    if os.environ.get("TUNEPROOF_CACHE"):
        return Path(os.environ["TUNEPROOF_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tuneproof"


class Tokens:
    """Text to 64-bit token values: whitespace words (default) or a tokenizer's ids."""

    def __init__(self, tokenizer: object | None = None, tokenizer_key: str = "") -> None:
        self.tokenizer = tokenizer
        self.key = f"tokenizer:{tokenizer_key}" if tokenizer is not None else "words"
        self.name = "the model's tokenizer" if tokenizer is not None else "whitespace words"
        self._words: dict[str, int] = {}

    def units(self, text: str) -> list[str] | list[int]:
        if self.tokenizer is None:
            return text.split()
        ids: list[int] = self.tokenizer(text, add_special_tokens=False)["input_ids"]  # type: ignore[operator]
        return ids

    def values(self, units: Sequence[str] | Sequence[int]) -> np.ndarray:
        if self.tokenizer is not None:
            return _splitmix64(np.asarray(units, dtype=np.uint64))
        table = self._words
        for w in set(units) - table.keys():
            digest = hashlib.blake2b(str(w).encode("utf-8", "surrogatepass"), digest_size=8).digest()
            table[str(w)] = int.from_bytes(digest, "little")
        return np.fromiter(map(table.__getitem__, units), dtype=np.uint64, count=len(units))  # type: ignore[arg-type]

    def text_of(self, units: Sequence[str] | Sequence[int]) -> str:
        if self.tokenizer is None:
            return " ".join(str(u) for u in units)
        return str(self.tokenizer.decode(list(units)))  # type: ignore[attr-defined]


def load_tokenizer(path: str) -> Tokens:
    """A local tokenizer folder (never downloaded); its cache key hashes its files."""
    folder = Path(path)
    if not folder.is_dir():
        raise TuneproofError(f"tokenizer folder not found: {folder}", "pass a local tokenizer folder")
    digest = hashlib.sha256()
    for f in sorted(folder.iterdir()):
        if f.is_file() and f.suffix not in (".safetensors", ".bin", ".pt", ".gguf"):
            digest.update(f.name.encode() + b"\0" + f.read_bytes())
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception as e:  # a folder that is not a tokenizer: report it, never a traceback
        first = str(e).splitlines()[0] if str(e) else ""
        raise TuneproofError(
            f"cannot load a tokenizer from {folder}: {type(e).__name__}: {first}", "pass a tokenizer folder"
        ) from None
    return Tokens(tok, digest.hexdigest()[:16])


def _splitmix64(x: np.ndarray) -> np.ndarray:
    z = x + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def window_hashes(values: np.ndarray, k: int) -> np.ndarray:
    """h[i] = sum_{j<k} values[i+j] * P^(k-1-j) mod 2^64 for i in 0..n-k (doubling: O(n log k))."""
    n = values.size
    if n < k:
        return np.empty(0, dtype=np.uint64)
    acc: np.ndarray | None = None
    acc_len = 0
    block, block_len, rem = values.astype(np.uint64, copy=False), 1, k
    while True:
        if rem & 1:
            if acc is None:
                acc, acc_len = block, block_len
            else:
                m = n - (acc_len + block_len) + 1
                acc = acc[:m] * np.uint64(pow(_P, block_len, 1 << 64)) + block[acc_len : acc_len + m]
                acc_len += block_len
        rem >>= 1
        if not rem:
            break
        m = n - 2 * block_len + 1
        block = block[:m] * np.uint64(pow(_P, block_len, 1 << 64)) + block[block_len : block_len + m]
        block_len *= 2
    assert acc is not None and acc_len == k
    return acc[: n - k + 1]


def _inside(starts: np.ndarray, n: int, k: int) -> np.ndarray:
    """For windows 0..n-k of a concatenation whose documents start at `starts`: True where the window
    lies inside one document."""
    first = np.arange(n - k + 1)
    nxt = np.searchsorted(starts, first, side="right")  # index of the next document start after i
    limit = np.append(starts, n)[nxt]
    return first + k <= limit


def _documents(paths: Sequence[Path]) -> Iterator[str]:
    """Each corpus document's text, checked as it is read."""
    for p in paths:
        opener = gzip.open if p.suffix == ".gz" else open
        jsonl = p.name.removesuffix(".gz").endswith(".jsonl")
        try:
            with opener(p, "rb") as f:
                if not jsonl:
                    yield _decode(f.read(), p, None)
                    continue
                for line_no, raw in enumerate(f, start=1):
                    line = _decode(raw, p, line_no).strip()
                    if not line:
                        continue
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise TuneproofError(
                            f"{p}, line {line_no}: not JSON ({e.msg})", CORPUS_HINT
                        ) from None
                    if not isinstance(row, dict) or not isinstance(row.get("text"), str):
                        raise TuneproofError(f"{p}, line {line_no}: no string 'text' field", CORPUS_HINT)
                    yield row["text"]
        except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as e:
            raise TuneproofError(f"cannot read the corpus file {p}: {e}", CORPUS_HINT) from None


def _decode(raw: bytes, p: Path, line_no: int | None) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        where = f"{p}, line {line_no}" if line_no else str(p)
        raise TuneproofError(
            f"{where}: invalid UTF-8 at byte {e.start}", "save the corpus as UTF-8"
        ) from None


def check_corpus(paths: Sequence[str | Path]) -> list[Path]:
    """Refuse missing or unreadable corpus files before any work starts."""
    out = []
    for path in paths:
        p = Path(path)
        if not p.is_file():
            raise TuneproofError(f"corpus file not found: {p}", CORPUS_HINT)
        if not os.access(p, os.R_OK):
            raise TuneproofError(f"corpus file {p} cannot be read (permission denied)", CORPUS_HINT)
        out.append(p)
    return out


def corpus_key(paths: Sequence[Path], k: int, tokens: Tokens) -> str:
    digest = hashlib.sha256(f"k={k};tokens={tokens.key}".encode())
    for p in paths:
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                digest.update(block)
        digest.update(b"\0file\0")
    return digest.hexdigest()[:24]


@dataclass(frozen=True, slots=True)
class KGramIndex:
    """Sorted unique hashes of the corpus's k-token windows."""

    hashes: np.ndarray
    k: int
    num_tokens: int
    tokens_name: str
    cached: str  # "built", "loaded from <path>", or "built (not cached: <why>)"

    def contains(self, queries: np.ndarray) -> np.ndarray:
        if self.hashes.size == 0 or queries.size == 0:
            return np.zeros(queries.size, dtype=bool)
        pos = np.searchsorted(self.hashes, queries)
        pos[pos == self.hashes.size] = 0
        return np.asarray(self.hashes[pos] == queries)


def build_index(
    paths: Sequence[str | Path],
    k: int = DEFAULT_K,
    tokens: Tokens | None = None,
    use_cache: bool = True,
    progress: Callable[[str], None] | None = None,
) -> KGramIndex:
    """The corpus's k-gram index, loaded from the cache when the same corpus, k and tokens were indexed."""
    tokens = tokens or Tokens()
    files = check_corpus(paths)
    say = progress or (lambda _msg: None)
    key = corpus_key(files, k, tokens)
    cache = cache_dir() / f"kgram-{key}.npy"
    if use_cache and cache.is_file():
        try:
            hashes = np.load(cache, mmap_mode="r")
            meta = json.loads(cache.with_suffix(".json").read_text())
            return KGramIndex(hashes, k, int(meta["num_tokens"]), tokens.name, f"loaded from {cache}")
        except (OSError, ValueError, KeyError):
            pass  # a damaged cache entry is rebuilt below
    pieces: list[np.ndarray] = []
    buffer: list[np.ndarray] = []
    starts: list[int] = []
    held = 0
    num_tokens = 0

    def flush() -> None:
        nonlocal held
        if not buffer:
            return
        values = np.concatenate(buffer)
        s = np.asarray(starts, dtype=np.int64)
        h = window_hashes(values, k)
        if h.size:
            pieces.append(np.unique(h[_inside(s, values.size, k)]))
        buffer.clear()
        starts.clear()
        held = 0

    for doc in _documents(files):
        units = tokens.units(doc)
        if len(units) < k:
            num_tokens += len(units)
            continue
        for lo in range(0, len(units), _BLOCK_WORDS):
            # documents longer than a block are cut with k-1 tokens of overlap, so no window is lost
            part = units[max(0, lo - (k - 1)) : lo + _BLOCK_WORDS]
            starts.append(held)
            buffer.append(tokens.values(part))
            held += len(part)
            if held >= _BLOCK_WORDS:
                flush()
        num_tokens += len(units)
        say(f"indexing the corpus: {num_tokens:,} tokens")
    flush()
    if num_tokens == 0:
        raise TuneproofError("the corpus holds no text", CORPUS_HINT)
    hashes = np.unique(np.concatenate(pieces)) if pieces else np.empty(0, dtype=np.uint64)
    cached = "built"
    if use_cache:
        cached = _save(cache, hashes, num_tokens)
    return KGramIndex(hashes, k, num_tokens, tokens.name, cached)


def _save(path: Path, hashes: np.ndarray, num_tokens: int) -> str:
    """Write the cache entry atomically; a cache that cannot be written is reported, not an error."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".npy", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                np.save(f, hashes)
            path.with_suffix(".json").write_text(json.dumps({"num_tokens": num_tokens}))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as e:
        return f"built (not cached: {e.strerror} in {path.parent})"
    return f"built and cached in {path}"


@dataclass(frozen=True, slots=True)
class Span:
    """The longest verbatim run of corpus k-grams in one response."""

    tokens: int
    text: str
    prompt_id: str
    run: str
    sample: int


def query(
    index: KGramIndex, texts: Sequence[str], tokens: Tokens | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per text: (any k-gram hit, longest span in tokens (0 when no window hits))."""
    tokens = tokens or Tokens()
    k = index.k
    units = [tokens.units(t) for t in texts]
    lengths = np.array([len(u) for u in units], dtype=np.int64)
    hit = np.zeros(len(texts), dtype=bool)
    longest = np.zeros(len(texts), dtype=np.int64)
    if not len(texts) or lengths.max() < k:
        return hit, longest
    flat: Any = [x for u in units for x in u]
    values = tokens.values(flat)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    h = window_hashes(values, k)
    found = index.contains(h) & _inside(starts[lengths > 0], values.size, k)
    for i, (s, n) in enumerate(zip(starts, lengths, strict=True)):
        if n < k:
            continue
        w = found[s : s + n - k + 1]
        if w.any():
            hit[i] = True
            longest[i] = _longest_run(w) + k - 1
    return hit, longest


def _longest_run(flags: np.ndarray) -> int:
    padded = np.concatenate([[False], flags, [False]]).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return int((edges[1::2] - edges[::2]).max()) if edges.size else 0


def span_text(index: KGramIndex, text: str, tokens: Tokens | None = None) -> str:
    """The text of the longest run of corpus k-grams in `text` (for naming it in the report)."""
    tokens = tokens or Tokens()
    units = tokens.units(text)
    k = index.k
    found = index.contains(window_hashes(tokens.values(units), k))
    padded = np.concatenate([[False], found, [False]]).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    if not edges.size:
        return ""
    lengths = edges[1::2] - edges[::2]
    best = int(np.argmax(lengths))
    lo = int(edges[::2][best])
    return tokens.text_of(units[lo : lo + int(lengths[best]) + k - 1])
