"""Memorisation: verbatim spans of the training corpus in the model's responses.

The corpus (`.txt` files, each one document, or `.jsonl` rows with a `text` field, each one document;
either may be gzipped) becomes a sorted array of 64-bit hashes of every k-token window that stays inside
one document: 8 bytes per corpus token at most, cached on disk keyed by the corpus bytes, k and the
tokenizer. A response window is a hit when its hash is in the index (a binary search).

Tokens are whitespace-separated words (case and punctuation kept: verbatim means verbatim), or the
model's tokenizer ids when one is given; each becomes a 64-bit value (`tokens.py`). A window's hash is
sum_j v[i+j] * P^(k-1-j) mod 2^64, computed for all windows at once by doubling (log2 k array passes).
Two different windows share a hash with probability about 2^-64 per pair: for 10^8 corpus windows and
10^6 response windows, about 5e-6 false hits in all.

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
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tuneproof.core.errors import TuneproofError
from tuneproof.core.io import cache_dir, input_file
from tuneproof.gate.inputs import jsonl_objects
from tuneproof.gate.tokens import Tokens

DEFAULT_K = 32
_P = 0x9E3779B97F4A7C15  # odd multiplier of the polynomial hash (the golden-ratio constant)
_MASK = (1 << 64) - 1
_PIECE_BYTES = 4 << 20  # a .txt file is read in blocks of lines of about this size
CORPUS_HINT = "pass .txt files or .jsonl files with a 'text' field (optionally .gz)"


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


def sorted_unique(h: np.ndarray, runs: bool = False) -> np.ndarray:
    """Sorted distinct values by sort-and-compare (numpy's `unique` hashes uint64 several times slower).
    `h` is sorted in place: numpy's SIMD sort, or timsort when `runs` says it is sorted runs to merge."""
    h.sort(kind="stable" if runs else None)
    if h.size == 0:
        return h
    keep = np.empty(h.size, dtype=bool)
    keep[0] = True
    np.not_equal(h[1:], h[:-1], out=keep[1:])
    return h[keep]


def _inside(starts: np.ndarray, n: int, k: int) -> np.ndarray:
    """For windows 0..n-k of a concatenation whose documents start at `starts`: True where the window
    lies inside one document."""
    if starts.size <= 1:  # one document: every window is inside it
        return np.ones(max(n - k + 1, 0), dtype=bool)
    first = np.arange(n - k + 1)
    nxt = np.searchsorted(starts, first, side="right")  # index of the next document start after i
    limit = np.append(starts, n)[nxt]
    return first + k <= limit


def _blocks(paths: Sequence[Path], tokens: Tokens) -> Iterator[tuple[np.ndarray, np.ndarray, bool]]:
    """(values, index of each document's first token, continues the previous block's document) for the
    corpus, about 4 MB of text at a time, checked as it is read. A `.txt` file is one document, read in
    blocks of whole lines, so that a large file never sits in memory; a `.jsonl` row is one document."""
    for p in paths:
        if p.name.removesuffix(".gz").endswith(".jsonl"):
            yield from _jsonl_blocks(p, tokens)
            continue
        opener = gzip.open if p.suffix == ".gz" else open
        try:
            with opener(p, "rb") as f:
                offset = 0
                while chunk := f.read(_PIECE_BYTES):
                    chunk += f.readline()  # end the block at a line end: a word never straddles it
                    values, starts = tokens.encode([_decode_block(chunk, p, offset)])
                    yield values, starts, offset > 0
                    offset += len(chunk)
        except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as e:
            raise TuneproofError(f"cannot read the corpus file {p}: {e}", CORPUS_HINT) from None


def _jsonl_blocks(p: Path, tokens: Tokens) -> Iterator[tuple[np.ndarray, np.ndarray, bool]]:
    texts: list[str] = []
    size = 0
    for line_no, row in jsonl_objects(p, "corpus file", CORPUS_HINT):
        text = row.get("text")
        if not isinstance(text, str):
            raise TuneproofError(f"{p}, line {line_no}: no string 'text' field", CORPUS_HINT)
        texts.append(text)
        size += len(text)
        if size >= _PIECE_BYTES:
            yield (*tokens.encode(texts), False)
            texts, size = [], 0
    if texts:
        yield (*tokens.encode(texts), False)


def _decode_block(chunk: bytes, p: Path, offset: int) -> str:
    """A block of whole lines (starting at byte `offset` of the file) as text, or an error naming the
    file's bad byte."""
    try:
        return chunk.decode("utf-8-sig" if offset == 0 else "utf-8")
    except UnicodeDecodeError as e:
        raise TuneproofError(
            f"{p}: invalid UTF-8 at byte {offset + e.start}", "save the corpus as UTF-8"
        ) from None


def check_corpus(paths: Sequence[str | Path]) -> list[Path]:
    """Refuse missing or unreadable corpus files before any work starts."""
    return [input_file(path, "corpus file", CORPUS_HINT) for path in paths]


def corpus_key(paths: Sequence[Path], k: int, tokens: Tokens) -> str:
    digest = hashlib.sha256(f"k={k};tokens={tokens.key}".encode())
    for p in paths:
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                digest.update(block)
        digest.update(b"\0file\0")
    return digest.hexdigest()


@dataclass(kw_only=True, frozen=True, slots=True)
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
    cache = cache_dir() / f"kgram-{key[:24]}.npy"
    if use_cache and cache.is_file():
        loaded = _load(cache, key)
        if loaded is not None:
            hashes, num_tokens = loaded
            return KGramIndex(
                hashes=hashes,
                k=k,
                num_tokens=num_tokens,
                tokens_name=tokens.name,
                cached=f"loaded from {cache}",
            )
    num_tokens = 0
    carry = np.empty(0, dtype=np.uint64)
    # reading and tokenizing stay in this thread; hashing and sorting a block (numpy, which releases the
    # GIL) run in a worker meanwhile, at most two blocks ahead
    with ThreadPoolExecutor(max_workers=2) as pool:
        pending: list[Future[np.ndarray]] = []
        for values, starts, continues in _blocks(files, tokens):
            num_tokens += values.size
            if continues and carry.size:
                # a document read in blocks: the last k-1 tokens of the previous block open this one
                values = np.concatenate([carry, values])
                starts = np.concatenate([[0], starts[1:] + carry.size]).astype(np.int64)
            pending.append(pool.submit(_sorted_windows, values, starts, k))
            carry = values[max(0, values.size - (k - 1)) :]
            if len(pending) > 2:
                pending[-3].result()  # bound the blocks held in memory
            say(f"indexing the corpus: {num_tokens:,} tokens")
        pieces = [f.result() for f in pending]
    if num_tokens == 0:
        raise TuneproofError("the corpus holds no text", CORPUS_HINT)
    hashes = sorted_unique(np.concatenate(pieces), runs=True)
    cached = "built"
    if use_cache:
        cached = _save(cache, hashes, {"key": key, "num_tokens": num_tokens, "windows": int(hashes.size)})
    return KGramIndex(hashes=hashes, k=k, num_tokens=num_tokens, tokens_name=tokens.name, cached=cached)


def _sorted_windows(values: np.ndarray, starts: np.ndarray, k: int) -> np.ndarray:
    """The block's window hashes inside its documents, sorted (one merge and one pass for duplicates
    follow at the end)."""
    h = window_hashes(values, k)
    kept = h[_inside(starts, values.size, k)] if h.size else h
    kept.sort()
    return kept


def _load(path: Path, key: str) -> tuple[np.ndarray, int] | None:
    """A cache entry whose record names this exact corpus key and holds what it says; None otherwise
    (missing, damaged or written for another corpus: the index is rebuilt)."""
    try:
        meta = json.loads(path.with_suffix(".json").read_text())
        hashes = np.load(path, mmap_mode="r")
        ok = (
            meta.get("key") == key
            and int(meta["num_tokens"]) > 0
            and hashes.dtype == np.uint64
            and hashes.ndim == 1
            and hashes.size == int(meta["windows"])
        )
        return (hashes, int(meta["num_tokens"])) if ok else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _save(path: Path, hashes: np.ndarray, meta: dict[str, object]) -> str:
    """Write the cache entry atomically; a cache that cannot be written is reported, not an error."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".npy", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                np.save(f, hashes)
            path.with_suffix(".json").write_text(json.dumps(meta))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as e:
        return f"built (not cached: {e.strerror} in {path.parent})"
    return f"built and cached in {path}"


def query(
    index: KGramIndex, texts: Sequence[str], tokens: Tokens | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per text: (any k-gram hit, longest span in tokens (0 when no window hits))."""
    tokens = tokens or Tokens()
    k = index.k
    hit = np.zeros(len(texts), dtype=bool)
    longest = np.zeros(len(texts), dtype=np.int64)
    if not texts:
        return hit, longest
    values, starts = tokens.encode(list(texts))
    lengths = np.diff(np.append(starts, values.size))
    found = index.contains(window_hashes(values, k)) & _inside(starts, values.size, k)
    for i in np.flatnonzero(lengths >= k):
        w = found[starts[i] : starts[i] + lengths[i] - k + 1]
        if w.any():
            hit[i] = True
            longest[i] = _longest_run(w)[1] + k - 1
    return hit, longest


def _longest_run(flags: np.ndarray) -> tuple[int, int]:
    """(first index, length) of the longest run of True in `flags`; (0, 0) when there is none."""
    padded = np.concatenate([[False], flags, [False]]).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    if not edges.size:
        return 0, 0
    lengths = edges[1::2] - edges[::2]
    best = int(np.argmax(lengths))
    return int(edges[::2][best]), int(lengths[best])


def span_text(index: KGramIndex, text: str, tokens: Tokens | None = None) -> str:
    """The text of the longest run of corpus k-grams in `text` (for naming it in the report)."""
    tokens = tokens or Tokens()
    values, _ = tokens.encode([text])
    first, run = _longest_run(index.contains(window_hashes(values, index.k)))
    return tokens.span(text, first, run + index.k - 1) if run else ""
