"""Attention pair counts: how many (query, key) scores a row of tokens needs or gets.

Convention: a "pair" is one (query, key) score. Per pair and head the forward does QK^T
(2*head_dim FLOPs) and AV (2*v_head_dim FLOPs). Counts are per row; a batch sums them.

Window convention (transformers `sliding_window_overlay`): query q sees keys k with
q - window < k <= q, i.e. itself and window-1 earlier tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy loads in the functions: `tuneproof --help` reads the path table without it
    import numpy as np

# torch.nn.attention.flex_attention._DEFAULT_SPARSE_BLOCK_SIZE: the BlockMask granularity, and the
# size that flex's kernel BLOCK_M/BLOCK_N must divide.
FLEX_BLOCK = 128


def intended_pairs(length: int, window: int | None) -> int:
    """Exact causal (window None) or causal sliding-window pair count for one sequence."""
    if length <= 0:
        return 0
    if window is None or length <= window:
        return length * (length + 1) // 2
    return window * (window + 1) // 2 + (length - window) * window


def block_selected_pairs(length: int, topk: int, block: int) -> int:
    """Pairs of one sequence whose queries each keep `topk` // `block` whole blocks of `block` keys plus
    their partial block (Qwen4-Exp's QSA): a query seeing v keys keeps all v while v // block <= topk //
    block, else topk // block x block + v mod block. Summed over v = 1..length in closed form."""
    if length <= 0:
        return 0
    kept = topk // block
    whole = min(length, (kept + 1) * block - 1)  # queries that keep every key they see
    pairs = whole * (whole + 1) // 2
    rest = length - whole  # queries from v = (kept + 1) x block on: v mod block runs 0, 1, ... anew
    cycles, tail = divmod(rest, block)
    return pairs + rest * kept * block + cycles * block * (block - 1) // 2 + tail * (tail - 1) // 2


def visible_blocks(width: int, real: int, block: int) -> int:
    """Whole blocks of `block` keys summed over the `width` queries of a row of `real` real tokens, each
    query seeing the causal prefix of the real keys (pad queries see all of them): the block
    indexer's scores per index head (`BlockScores`)."""

    def upto(n: int) -> int:  # sum of v // block for v = 1..n
        m = n // block
        return block * (m - 1) * m // 2 + m * (n - m * block + 1) if m else 0

    return upto(min(width, real)) + max(width - real, 0) * (real // block)


def _blocks(width: int, block: int) -> tuple[np.ndarray, np.ndarray]:
    import numpy as np

    starts = np.arange(0, width, block, dtype=np.int64)
    return starts, np.minimum(starts + block, width) - 1  # inclusive ends


def _area(q_sizes: np.ndarray, k_sizes: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> int:
    """Sum over query blocks i of q_sizes[i] * (sum of k_sizes[lo[i]..hi[i]]), empty when lo > hi."""
    import numpy as np

    prefix = np.concatenate([[0], np.cumsum(k_sizes)])
    keys = np.where(hi >= lo, prefix[np.maximum(hi, lo - 1) + 1] - prefix[lo], 0)
    return int((q_sizes * keys).sum())


def flex_block_pairs(width: int, length: int, window: int | None, block: int = FLEX_BLOCK) -> int:
    """Pairs inside BlockMask blocks that hold at least one allowed (q, k) pair, for one sequence of
    `length` real tokens padded to `width`.

    Allowed: k <= q, q - k < window (sliding), k < length (transformers' padding mask_mod masks keys
    only, so pad query rows still attend to real keys). Blocks are counted whole within the width.
    For query block i the non-empty key blocks are one contiguous run: up to the diagonal (and the
    last block holding a real key), from the first block whose last real key is inside the window.
    """
    import numpy as np

    if length <= 0:
        return 0
    starts, ends = _blocks(width, block)
    sizes = ends - starts + 1
    last_real = np.minimum(ends, length - 1)  # non-decreasing
    hi = np.minimum(np.arange(starts.size), (length - 1) // block)
    # the first key block whose last real key is inside the window of the block's first query
    lo = np.zeros_like(hi) if window is None else np.searchsorted(last_real, starts - window + 1, side="left")
    return _area(sizes, sizes, lo, hi)


def flex_document_pairs(docs: list[int] | np.ndarray, window: int | None, block: int = FLEX_BLOCK) -> int:
    """Pairs inside BlockMask blocks that hold at least one allowed pair of a packed row (documents
    back to back, no padding): causal within a document, never across.

    Block (i, j), j <= i, is non-empty iff a document spans both blocks; that document then holds the
    pair (start of block i, end of block j), the closest the two blocks get, so the window test uses it."""
    import numpy as np

    d = np.asarray(docs, dtype=np.int64)
    width = int(d.sum())
    if width <= 0:
        return 0
    ends_doc = np.cumsum(d)
    starts_doc = ends_doc - d
    b0, b1 = _blocks(width, block)
    sizes = b1 - b0 + 1
    first = np.searchsorted(ends_doc, b0, side="right")  # first document overlapping each block
    last = np.searchsorted(starts_doc, b1, side="right") - 1  # last document overlapping each block
    lo = np.searchsorted(last, first, side="left")
    if window is not None:
        lo = np.maximum(lo, np.searchsorted(b1, b0 - window + 1, side="left"))
    return _area(sizes, sizes, lo, np.arange(b0.size))
