"""Packing: best-fit-decreasing into rows of a token capacity, and a collator for packed rows.

A packed row concatenates documents; `position_ids` restart at 0 for each document, `seq_ids`
number them, `cu_seqlens` are their cumulative lengths. These feed flex document masks
(`tuneproof.attention.flex.document_block_mask`) and flash-attention varlen.

The traps the collator avoids: transformers detects packed sequences from `position_ids` only when
`attention_mask is None` and no cache exists (`masking_utils._preprocess_mask_arguments`).
- A 2-D all-ones attention mask next to packed position_ids silently brings back cross-document
  attention on the sdpa and eager paths. The collator emits no attention mask and refuses to add one.
- With the config's default use_cache=True, the model builds a DynamicCache even in a training
  forward (without gradient checkpointing), and detection is skipped the same way (measured on
  transformers 5.24, sdpa and eager). The collator sets use_cache=False in every batch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from torch.utils.data import Sampler

from tuneproof.core import validate
from tuneproof.core.errors import TuneproofError
from tuneproof.data.sampler import check_lengths

MASK_TRAP = (
    "a 2-D attention_mask next to packed position_ids makes transformers skip packed-sequence detection "
    "(masking_utils._preprocess_mask_arguments), so documents attend to each other"
)
CACHE_TRAP = (
    "packed position_ids with use_cache not False: the model builds a cache and transformers skips "
    "packed-sequence detection, so documents attend to each other"
)


class _BestFit:
    """Bins keyed by remaining space; `take(n)` finds the bin with the least room >= n (segment tree)."""

    def __init__(self, capacity: int) -> None:
        self.size = 1 << (capacity + 1).bit_length()
        self.count = np.zeros(capacity + 1, dtype=np.int64)
        self.tree = np.zeros(2 * self.size, dtype=bool)  # tree[node]: some bin has room in that range
        self.bins: dict[int, list[int]] = {}

    def _set(self, room: int, present: bool) -> None:
        node = room + self.size
        self.tree[node] = present
        node //= 2
        while node:
            self.tree[node] = self.tree[2 * node] or self.tree[2 * node + 1]
            node //= 2

    def add(self, room: int, bin_id: int) -> None:
        self.bins.setdefault(room, []).append(bin_id)
        self.count[room] += 1
        if self.count[room] == 1:
            self._set(room, True)

    def take(self, need: int) -> tuple[int, int] | None:
        """Remove and return (room, bin) with the smallest room >= need, or None."""
        node, lo, hi = 1, 0, self.size - 1
        if not self._any(need, node, lo, hi):
            return None
        while node < self.size:
            mid = (lo + hi) // 2
            left = 2 * node
            if need <= mid and self._any(need, left, lo, mid):
                node, hi = left, mid
            else:
                node, lo = left + 1, mid + 1
        room = node - self.size
        bin_id = self.bins[room].pop()
        self.count[room] -= 1
        if not self.count[room]:
            self._set(room, False)
        return room, bin_id

    def _any(self, need: int, node: int, lo: int, hi: int) -> bool:
        """Is there a bin with room in [max(need, lo), hi] under this node?"""
        if hi < need or not self.tree[node]:
            return False
        if lo >= need:
            return True
        mid = (lo + hi) // 2
        return self._any(need, 2 * node, lo, mid) or self._any(need, 2 * node + 1, mid + 1, hi)


def best_fit_decreasing(lengths: np.ndarray, capacity: int) -> list[np.ndarray]:
    """Pack indices into rows of at most `capacity` tokens, longest first, each into the fullest row
    that still fits it."""
    too_long = np.flatnonzero(lengths > capacity)
    if too_long.size:
        i = int(too_long[0])
        raise TuneproofError(
            f"length {int(lengths[i])} at index {i} exceeds the packing capacity {capacity}",
            "raise the capacity or truncate that example",
        )
    order = np.argsort(-lengths, kind="stable")
    rows: list[list[int]] = []
    fit = _BestFit(capacity)
    for i in order.tolist():
        n = int(lengths[i])
        got = fit.take(n)
        if got is None:
            rows.append([i])
            room = capacity - n
            bin_id = len(rows) - 1
        else:
            room, bin_id = got
            rows[bin_id].append(i)
            room -= n
        if room > 0:
            fit.add(room, bin_id)
    return [np.asarray(r, dtype=np.int64) for r in rows]


class PackedBatchSampler(Sampler[list[int]]):
    """Each item is one packed row: the indices of the documents packed into `capacity` tokens.
    Rows are shuffled per (seed, epoch); packing itself is deterministic.

    Several ranks (`num_replicas`, `rank`, from torch.distributed when left out) split the rows
    without communication, as `BucketBatchSampler` does: `rank_plan="synchronous"` (the default) runs
    rows of neighbouring cost together on the R ranks (cost: sum of squared document lengths, the
    attention part, plus capacity x tokens, the linear part), shuffling the rank-groups;
    "interleaved" deals the shuffled rows round-robin. The remainder is completed by repeating rows
    (or dropped with drop_last), so every rank runs the same number of rows."""

    def __init__(
        self,
        lengths: Sequence[int] | np.ndarray,
        capacity: int,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int | None = None,
        rank: int | None = None,
        drop_last: bool = False,
        rank_plan: str = "synchronous",
    ) -> None:
        from tuneproof.data.sampler import RANK_PLANS, world_of

        self.lengths = check_lengths(lengths)
        validate.integer("capacity", capacity, hint="a token capacity per packed row")
        validate.integer("seed", seed, low=0, high=2**63 - 1)
        validate.choice("rank_plan", rank_plan, RANK_PLANS)
        self.capacity, self.shuffle, self.seed, self.epoch = capacity, shuffle, seed, 0
        self.num_replicas, self.rank = world_of(num_replicas, rank)
        self.drop_last, self.rank_plan = drop_last, rank_plan
        self.rows = best_fit_decreasing(self.lengths, capacity)

    def global_plan(self) -> list[np.ndarray]:
        """Every row of the epoch in the order the ranks take them (rank r: positions r, r + R, ...)."""
        from tuneproof.data.sampler import rank_groups

        rng = np.random.default_rng([self.seed, self.epoch]) if self.shuffle else None
        r, n = self.num_replicas, len(self.rows)
        if r > 1 and self.rank_plan == "synchronous":
            cost = [float((self.lengths[row] ** 2).sum() + self.capacity * self.lengths[row].sum())
                    for row in self.rows]  # fmt: skip
            order = np.argsort(np.asarray(cost), kind="stable")
            return [self.rows[order[i]] for i in rank_groups(n, r, self.drop_last, rng).reshape(-1)]
        perm = rng.permutation(n) if rng is not None else np.arange(n)
        if r > 1:
            perm = perm[np.arange(n - n % r if self.drop_last else -(-n // r) * r) % max(n, 1)]
        return [self.rows[i] for i in perm]

    def plan(self) -> list[np.ndarray]:
        """This rank's rows for the epoch."""
        return self.global_plan()[self.rank :: self.num_replicas]

    def __len__(self) -> int:
        return len(self.plan())

    def __iter__(self) -> Iterator[list[int]]:
        for row in self.plan():
            yield row.tolist()

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch


class PackedCollator:
    """Concatenate a row's examples into one sequence: input_ids, labels (the first token of each
    document is -100, as in HF's DataCollatorWithFlattening), position_ids restarting per document,
    and use_cache=False. No attention_mask: see the module docstring. With `metadata`, also seq_ids
    and cu_seqlens (for flex document masks or flash varlen in your own loop; a transformers model
    does not take them as keyword arguments)."""

    def __init__(self, attention_mask: bool = False, label_pad: int = -100, metadata: bool = False) -> None:
        if attention_mask:
            raise TuneproofError(
                "refusing to add an attention_mask to packed rows: " + MASK_TRAP,
                "pass no attention mask; transformers builds the document mask from position_ids",
            )
        self.label_pad, self.metadata = label_pad, metadata

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        if not features:
            raise TuneproofError("empty packed row", "every row needs at least one example")
        ids: list[int] = []
        labels: list[int] = []
        pos: list[int] = []
        seq: list[int] = []
        cu = [0]
        for d, f in enumerate(features):
            x = list(f["input_ids"])
            y = list(f.get("labels", x))
            ids += x
            labels += [self.label_pad, *y[1:]]
            pos += range(len(x))
            seq += [d] * len(x)
            cu.append(cu[-1] + len(x))
        batch: dict[str, Any] = {
            "input_ids": torch.tensor([ids]),
            "labels": torch.tensor([labels]),
            "position_ids": torch.tensor([pos]),
            "use_cache": False,
        }
        if self.metadata:
            batch["seq_ids"] = torch.tensor([seq])
            batch["cu_seqlens"] = torch.tensor(cu, dtype=torch.int32)
        return batch


def check_packed_batch(batch: dict[str, Any]) -> None:
    """Raise if a packed batch (position_ids restarting inside a row) would let documents attend to
    each other: an attention_mask present, or use_cache not set to False."""
    pos = batch.get("position_ids")
    if pos is None or not bool((pos[..., 1:] == 0).any()):
        return
    if batch.get("attention_mask") is not None:
        raise TuneproofError(
            "packed batch with an attention_mask: " + MASK_TRAP, "drop the attention_mask from packed batches"
        )
    if batch.get("use_cache") is not False:
        raise TuneproofError(CACHE_TRAP, "put use_cache=False in packed batches (PackedCollator does)")
