"""A micro-batch read as the model receives it: the documents of each row, the padding, and whether the
attention path keeps the documents apart. The one reader every batch goes through: padded batches
(transformers' collators, the project's bucketing), transformers' `DataCollatorWithFlattening`, TRL's
packing (`bfd`: padding-free rows with `position_ids`, `cu_seq_lens_*`, `seq_idx`; `wrapped`: full
rows with an all-ones mask) and `padding_free`, Axolotl's multipack collator (a 2-D mask of sequence
ids 1, 2, 3 ..., 0 for padding), a 4-D block mask, and collators that send no mask at all.

Documents, first found wins: `cu_seq_lens_q` (batch of one row), the mask's sequence ids, a 4-D block
mask's diagonal blocks, `seq_idx`, `position_ids` restarts (transformers' own rule,
`masking_utils.find_packed_sequence_indices`: a new document wherever a position is not the previous
one plus 1). Padding: the 2-D mask's zeros; without a mask, the slots after the last trained label
(labels == -100) that hold the pad id, saying which rule found it.

Two readings come out: `docs`, what the architecture specifies (each real document on its own: the
intended FLOPs), and `seen`, what the kernel really runs (`Rows`): the documents only where the path
keeps them apart in transformers 5.x, each row as one sequence where it does not (a 2-D mask turns off
packed detection; a KV cache too; flash's position_ids route needs a batch of one row), and padding
only where a mask tells the kernel of it (without one every slot is a real token to it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from tuneproof.runs.step import UNKNOWN_PATH, Rows

# the keys a forward pre-hook keeps from the model's kwargs to read the batch at the step's end
BATCH_KEYS = (
    "input_ids", "attention_mask", "position_ids", "labels", "shift_labels", "cu_seq_lens_q", "seq_idx",
)  # fmt: skip

SOURCES = {
    "cu_seq_lens": "cu_seq_lens_q (flash varlen boundaries)",
    "mask_ids": "the attention mask's sequence ids (Axolotl multipack)",
    "block_mask": "the 4-D attention mask's diagonal blocks",
    "seq_idx": "seq_idx",
    "position_ids": "position_ids restarts",
}


@dataclass(kw_only=True, frozen=True, slots=True)
class BatchRead:
    """One micro-batch: `docs` (per row, its real documents), `seen` (what the kernel runs),
    `documents_from` (the key the documents were read from; None: one document per row), `padding_from`
    (how the padding was found; None: no padding), `apart` (the kernel keeps the documents apart; None
    when no row is packed) and why not."""

    batch: int
    width: int
    docs: tuple[tuple[int, ...], ...]
    seen: Rows
    documents_from: str | None = None
    padding_from: str | None = None
    apart: bool | None = None
    why_not_apart: str = ""

    @property
    def rows(self) -> Rows:
        """The intended reading: every real document on its own."""
        return Rows(self.width, self.docs)

    @property
    def tokens(self) -> int:
        return sum(sum(row) for row in self.docs)

    @property
    def slots(self) -> int:
        return self.batch * self.width

    @property
    def lengths(self) -> tuple[int, ...]:
        """Real tokens per row."""
        return tuple(sum(row) for row in self.docs)

    @classmethod
    def padded(cls, batch: int, width: int, lengths: tuple[int, ...] | None = None) -> BatchRead:
        """A padded micro-batch told by its row lengths (every row full when None), the mask known."""
        rows = lengths if lengths is not None else (width,) * batch
        docs = tuple((int(n),) for n in rows)
        padded = any(n < width for n in rows)
        return cls(
            batch=batch,
            width=width,
            docs=docs,
            seen=Rows(width, docs),
            documents_from=None,
            padding_from="attention mask" if padded else None,
        )


def read_batch(
    batch: dict[str, Any],
    attn: str,
    pad_id: int | None = None,
    cache: bool = False,
    hidden: Callable[[], str] | None = None,
) -> BatchRead | None:
    """Read one micro-batch's tensors (the model's kwargs: BATCH_KEYS) under attention path `attn`;
    `cache`: the forward builds a KV cache (use_cache on), which turns off packed detection; `hidden`:
    asked on a packed batch, why the model's own forward hides packed rows from transformers on `attn`
    ("" where it does not; `tuneproof.attention.packed_detection`). None when the batch has no
    `input_ids` (embeddings given)."""
    ids = batch.get("input_ids")
    if ids is None or getattr(ids, "dim", lambda: 0)() != 2:
        return None
    rows, width = int(ids.shape[0]), int(ids.shape[1])
    mask = batch.get("attention_mask")
    mask = mask if hasattr(mask, "dim") else None  # a flex BlockMask is not read: see below
    mask2d = mask if mask is not None and mask.dim() == 2 else None
    mask4d = mask if mask is not None and mask.dim() == 4 else None
    lengths, padding_from = _real_lengths(batch, rows, width, mask2d, pad_id)
    starts, source = _starts(batch, rows, width, mask2d, mask4d)
    docs = tuple(_split(starts[r], lengths[r]) for r in range(rows))
    packed = any(len(row) > 1 for row in docs)
    if not packed:
        seen_docs = docs if mask is not None else tuple((width,) for _ in range(rows))
        return BatchRead(
            batch=rows,
            width=width,
            docs=docs,
            seen=Rows(width, seen_docs),
            documents_from=None,
            padding_from=padding_from,
        )
    if attn == UNKNOWN_PATH:  # whether its kernel keeps the documents apart is unknown
        return BatchRead(
            batch=rows,
            width=width,
            docs=docs,
            seen=Rows(width, docs),
            documents_from=SOURCES[source],
            padding_from=padding_from,
            apart=None,
        )
    why = _why_not_apart(attn, source, rows, mask2d, cache, batch, hidden)
    apart = not why
    if apart:  # the kernel sees the documents, and padding only where a mask or position 0s tell it
        seen = Rows(width, docs if mask is not None else tuple(_split(starts[r], width) for r in range(rows)))
    else:
        seen_rows = lengths if mask is not None else [width] * rows
        seen = Rows(width, tuple((n,) for n in seen_rows))
    return BatchRead(
        batch=rows,
        width=width,
        docs=docs,
        seen=seen,
        documents_from=SOURCES[source],
        padding_from=padding_from,
        apart=apart,
        why_not_apart=why,
    )


def _real_lengths(
    batch: dict[str, Any], rows: int, width: int, mask2d: Any, pad_id: int | None
) -> tuple[list[int], str | None]:
    """Each row's real tokens (right padding) and how the padding was found."""
    if mask2d is not None:
        real = (mask2d != 0).sum(dim=1).tolist()
        return [int(n) for n in real], ("attention mask" if any(n < width for n in real) else None)
    labels, ids = batch.get("labels"), batch["input_ids"]
    pad = None
    if labels is not None and getattr(labels, "shape", None) == ids.shape:
        pad = labels == -100
        rule = "labels == -100"
        if pad_id is not None:
            pad = pad & (ids == pad_id)
            rule = f"labels == -100 and pad id {pad_id}"
    elif pad_id is not None:
        pad, rule = ids == pad_id, f"pad id {pad_id}"
    if pad is None:
        return [width] * rows, None
    # trailing padding: the slots after the last slot that is not padding
    real = (~pad).int().flip(dims=[1]).cummax(dim=1).values.flip(dims=[1]).sum(dim=1).tolist()
    real = [max(int(n), 1) for n in real]
    return real, (f"{rule} (no attention mask)" if any(n < width for n in real) else None)


def _starts(
    batch: dict[str, Any], rows: int, width: int, mask2d: Any, mask4d: Any
) -> tuple[list[list[int]], str]:
    """Per row, the slots where a document starts (0 first), and the key they came from."""
    cu = batch.get("cu_seq_lens_q")
    if cu is not None and rows == 1 and hasattr(cu, "tolist"):
        bounds = [int(x) for x in cu.tolist()]
        return [[b for b in bounds[:-1] if b < width]], "cu_seq_lens"
    if mask2d is not None and int(mask2d.max()) > 1:  # sequence ids 1, 2, 3 ...: Axolotl's multipack
        return _changes(mask2d), "mask_ids"
    if mask4d is not None:
        return _block_starts(mask4d, rows, width), "block_mask"
    seq_idx = batch.get("seq_idx")
    if seq_idx is not None and hasattr(seq_idx, "dim") and seq_idx.dim() == 2 and seq_idx.shape[0] == rows:
        return _changes(seq_idx), "seq_idx"
    positions = batch.get("position_ids")
    if positions is not None and hasattr(positions, "dim") and positions.dim() == 2:
        positions = positions.expand(rows, -1) if positions.shape[0] != rows else positions
        import torch

        first = positions[:, :1] - 1
        new = torch.diff(positions, prepend=first, dim=-1) != 1
        return [[int(i) for i in row.nonzero().flatten().tolist()] or [0] for row in new], "position_ids"
    return [[0] for _ in range(rows)], "position_ids"


def _changes(ids: Any) -> list[list[int]]:
    """Per row, the slots where the id differs from the slot before (0 first)."""
    import torch

    new = torch.ones_like(ids, dtype=torch.bool)
    new[:, 1:] = ids[:, 1:] != ids[:, :-1]
    return [[int(i) for i in row.nonzero().flatten().tolist()] for row in new]


def _block_starts(mask4d: Any, rows: int, width: int) -> list[list[int]]:
    """A 4-D mask (B, 1|H, T, T), boolean or additive: a document starts at q where q may not see q-1."""
    sees = mask4d[:, 0] if mask4d.dtype == _bool() else mask4d[:, 0] == 0
    if sees.shape[0] != rows:
        sees = sees.expand(rows, -1, -1)
    diag = sees[:, 1:, :-1].diagonal(dim1=1, dim2=2)  # (B, T-1): may q see q-1
    return [[0, *(int(i) + 1 for i in (~row).nonzero().flatten().tolist())] for row in diag]


def _bool() -> Any:
    import torch

    return torch.bool


def _split(starts: list[int], length: int) -> tuple[int, ...]:
    """Document lengths from their start slots, cut at the row's real length."""
    inside = sorted({s for s in starts if 0 < s < length})
    bounds = [0, *inside, length]
    return tuple(b - a for a, b in pairwise(bounds))


def _why_not_apart(
    attn: str,
    source: str,
    rows: int,
    mask2d: Any,
    cache: bool,
    batch: dict[str, Any],
    hidden: Callable[[], str] | None = None,
) -> str:
    """Why the kernel of `attn` lets the packed documents of this batch attend to each other in
    transformers 5.x, or "" when it keeps them apart."""
    if source == "block_mask":
        return ""  # the mask given keeps them apart itself
    varlen = attn == "flash_attention_2" and source == "cu_seq_lens"  # the kwargs reach the kernel as sent
    if source != "mask_ids" and not varlen and hidden is not None and (why := hidden()):
        return why
    if source == "mask_ids":
        if attn == "flash_attention_2":
            return ""  # Axolotl's multipack patch reads the ids into varlen boundaries
        return (
            f"{attn} reads the mask's sequence ids as a plain padding mask (only Axolotl's patched flash "
            "attention reads them as boundaries)"
        )
    if mask2d is not None:
        return (
            "a 2-D attention_mask is sent with the packed rows: transformers then skips packed-sequence "
            "detection (masking_utils._preprocess_mask_arguments; flash unpads by the mask)"
        )
    if attn == "flash_attention_2":
        if source == "cu_seq_lens" or rows == 1:
            return ""
        return "flash attention reads packed position_ids only in a batch of one row (_is_packed_sequence)"
    if cache:
        return (
            "use_cache is on: transformers detects packed position_ids only without a cache "
            "(masking_utils._preprocess_mask_arguments); pass use_cache=False"
        )
    if source in ("cu_seq_lens", "seq_idx") and batch.get("position_ids") is None:
        return f"{attn} reads documents from position_ids only, and none were sent"
    return ""
