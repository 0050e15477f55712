"""`BucketBatchSampler`: bucket-to-pair, shuffle-to-mix (docs/reference-run.md section 4).

- bucket-to-pair: sequences are ordered by length (random order among equal keys) and neighbours
  form the micro-batches, so a micro-batch holds (nearly) one length and pads (nearly) nothing. The
  default bucket is the tightest (exact length); `bucket_width` (tokens) or `boundaries` make
  coarser buckets, inside which the order is random.
- shuffle-to-mix: the micro-batches are then shuffled globally, so every gradient-accumulation
  window still mixes lengths and documents. (HF's LengthGroupedSampler instead makes every
  optimizer step length-homogeneous, which its users see as a sawtooth loss.)

Deterministic for (seed, epoch). Distributed without communication: every rank computes the same
global plan from (seed, epoch) and takes micro-batches rank, rank + R, rank + 2R, ...
- `rank_plan="synchronous"` (the default with R > 1): the same two halves one level up. The R
  micro-batches that run at the same step on the R ranks are R neighbours in length order (a
  rank-group: adjacent widths, so no rank waits on another's longer batch), their order inside the
  group is random, and the rank-groups are what the global shuffle mixes. A rank's accumulation
  window then holds one member of each of G shuffled groups: its widths still mix, and its sum
  matches every other rank's. Remainder: the (num_batches mod R) shortest micro-batches form a short
  group, dropped with drop_last, else completed by repeating their nearest longer neighbours.
- `rank_plan="interleaved"`: the plan of one rank dealt round-robin (the earlier behaviour): ranks
  hold micro-batches of unrelated widths at each step. With drop_last the last (num_batches mod R)
  micro-batches of the shuffled plan are dropped; without it the first R - (num_batches mod R) are
  repeated.
Either way every rank runs the same number of steps.
Resumable: `state_dict()` holds (seed, epoch, position); `load_state_dict` restarts at that exact
micro-batch. Position counts micro-batches handed out by this sampler: a DataLoader that prefetches
may have taken more than the model consumed, so pass `consumed=` when saving.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from torch.utils.data import Sampler

from tuneproof.core import validate
from tuneproof.core.errors import TuneproofError, field_error
from tuneproof.data.batch_plan import Plan


def check_lengths(lengths: Any) -> np.ndarray:
    try:
        arr = np.asarray(lengths)
    except (ValueError, TypeError):
        raise field_error("lengths", "must be a list of integers", "pass one length per example") from None
    if arr.ndim != 1 or arr.size == 0:
        raise field_error("lengths", "must be a non-empty list of integers", "pass one length per example")
    if arr.dtype == bool or not (
        np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    ):
        raise field_error("lengths", f"must be integers, got {arr.dtype} values", "lengths are token counts")
    if not np.issubdtype(arr.dtype, np.integer):
        bad = np.flatnonzero(~np.isfinite(arr) | (np.mod(arr, 1) != 0))
        if bad.size:
            i = int(bad[0])
            raise field_error(
                "lengths", f"at index {i} is not an integer: {arr[i]!r}", "lengths are token counts"
            )
    if (arr <= 0).any() or (arr > validate.MAX_TOKENS).any():
        i = int(np.flatnonzero((arr <= 0) | (arr > validate.MAX_TOKENS))[0])
        raise field_error(
            "lengths",
            f"at index {i} is {int(arr[i])}: lengths must be in [1, {validate.MAX_TOKENS:,}]",
            "drop empty sequences before batching",
        )
    return arr.astype(np.int64)


def sort_key_order(keys: np.ndarray, rng: np.random.Generator | None) -> np.ndarray:
    """Indices ordered by key, random among equal keys (radix sort when keys fit 16 bits)."""
    perm = rng.permutation(keys.size) if rng is not None else np.arange(keys.size)
    k = keys[perm]
    if k.size and int(k.max()) < 65536 and int(k.min()) >= 0:
        k = k.astype(np.uint16)
    return perm[np.argsort(k, kind="stable")]


def token_budget_chunks(order: np.ndarray, lengths: np.ndarray, max_tokens: int, max_items: int) -> Plan:
    """Neighbours in length order, as many per micro-batch as fit count * longest <= max_tokens."""
    ls = lengths[order]
    cuts = [order.size]
    end = order.size
    while end > 0:  # from the longest end: the longest member fixes the budget
        end -= max(1, min(max_items, max_tokens // int(ls[end - 1]), end))
        cuts.append(end)
    return Plan(order, np.asarray(cuts[::-1], dtype=np.int64))


RANK_PLANS = ("synchronous", "interleaved")


def rank_groups(n: int, ranks: int, drop_last: bool, rng: np.random.Generator | None) -> np.ndarray:
    """(groups, ranks) positions into a plan of `n` micro-batches in length order: each row R
    neighbours, counted from the longest end; the short remainder dropped (drop_last) or completed with
    its nearest longer neighbours. Rows are shuffled, and so is each row's order, when `rng` is given."""
    short = n % ranks
    full = np.arange(short, n).reshape(-1, ranks)
    if short and not drop_last:
        partial = np.arange(ranks) % n  # the short ones, then their neighbours (cycled when n < R)
        full = np.concatenate([partial[None, :], full])
    if rng is not None and full.size:
        full = rng.permuted(full, axis=1)[rng.permutation(full.shape[0])]
    return full


class BucketBatchSampler(Sampler[list[int]]):
    """Micro-batches of same-length neighbours, shuffled globally. For DataLoader(batch_sampler=...)."""

    def __init__(
        self,
        lengths: Sequence[int] | np.ndarray,
        micro_batch_size: int,
        grad_accum: int = 1,
        bucket_width: int | None = None,
        boundaries: Sequence[int] | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        num_replicas: int | None = None,
        rank: int | None = None,
        roots: Sequence[int] | np.ndarray | None = None,
        max_tokens: int | None = None,
        rank_plan: str = "synchronous",
    ) -> None:
        self.lengths = check_lengths(lengths)
        validate.integer("micro_batch_size", micro_batch_size, high=1 << 20)
        validate.integer("grad_accum", grad_accum, high=1 << 20)
        validate.integer("seed", seed, low=0, high=2**63 - 1)
        if bucket_width is not None and boundaries is not None:
            raise TuneproofError(
                "{bucket_width} and {boundaries} together",
                "give one of them (or neither: tightest)",
                fields=("bucket_width", "boundaries"),
            )
        if bucket_width is not None:
            validate.integer("bucket_width", bucket_width, hint="a width in tokens")
        if boundaries is not None:
            validate.integers("boundaries", boundaries)
            if list(boundaries) != sorted(set(boundaries)):
                raise field_error("boundaries", "must be strictly increasing", "e.g. [512, 1024, 2048]")
        if roots is not None and len(roots) != self.lengths.size:
            raise field_error(
                "roots",
                f"has {len(roots)} ids for {self.lengths.size} lengths",
                "give one root id per length",
            )
        if max_tokens is not None:
            validate.integer("max_tokens", max_tokens, hint="a token budget per micro-batch")
            too_long = np.flatnonzero(self.lengths > max_tokens)
            if too_long.size:
                i = int(too_long[0])
                raise field_error(
                    "max_tokens",
                    f"{max_tokens} is below length {int(self.lengths[i])} at index {i}",
                    "raise it or truncate that example",
                )
        validate.choice("rank_plan", rank_plan, RANK_PLANS)
        num_replicas, rank = world_of(num_replicas, rank)
        self.micro_batch_size, self.grad_accum = micro_batch_size, grad_accum
        self.bucket_width = bucket_width
        self.boundaries = np.asarray(boundaries) if boundaries is not None else None
        self.shuffle, self.seed, self.drop_last = shuffle, seed, drop_last
        self.num_replicas, self.rank = num_replicas, rank
        self.roots = None if roots is None else np.asarray(roots)
        self.max_tokens = max_tokens
        self.rank_plan = rank_plan
        self.epoch = 0
        self.position = 0

    # ---- planning ----
    def bucket_keys(self) -> np.ndarray:
        if self.boundaries is not None:
            return np.searchsorted(self.boundaries, self.lengths, side="right")
        if self.bucket_width is not None:
            return self.lengths // self.bucket_width
        return self.lengths

    def global_plan(self, epoch: int | None = None) -> Plan:
        """Every micro-batch of the epoch, in the order ranks take them (all ranks compute the same)."""
        e = self.epoch if epoch is None else epoch
        rng = np.random.default_rng([self.seed, e]) if self.shuffle else None
        order = sort_key_order(self.bucket_keys(), rng)
        if self.max_tokens is not None:
            plan = token_budget_chunks(order, self.lengths, self.max_tokens, self.micro_batch_size)
        else:
            plan = Plan.fixed(order, self.micro_batch_size, self.drop_last)
        if self.num_replicas > 1 and self.rank_plan == "synchronous":
            return plan.select(rank_groups(len(plan), self.num_replicas, self.drop_last, rng).reshape(-1))
        return plan if rng is None else plan.select(rng.permutation(len(plan)))

    def plan(self, epoch: int | None = None) -> Plan:
        """This rank's micro-batches for the epoch (equal count on every rank)."""
        batches = self.global_plan(epoch)
        r, n = self.num_replicas, len(batches)
        if r == 1:
            return batches
        ids = np.arange(n - n % r if self.drop_last else -(-n // r) * r) % max(n, 1)
        return batches.select(ids[self.rank :: r])

    def widths(self, pad_to_multiple_of: int = 1) -> list[int]:
        """Distinct padded widths the epoch's micro-batches will have: size the recompile guard with these."""
        m = pad_to_multiple_of
        return sorted({-(-int(self.lengths[b].max()) // m) * m for b in self.global_plan()})

    # ---- Sampler protocol ----
    def __len__(self) -> int:
        return len(self.plan())

    def __iter__(self) -> Iterator[list[int]]:
        batches = self.plan()
        start = self.position
        for i in range(start, len(batches)):
            self.position = i + 1
            yield batches[i].tolist()
        self.position = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.position = 0

    def state_dict(self, consumed: int | None = None) -> dict[str, int]:
        return {
            "seed": self.seed,
            "epoch": self.epoch,
            "position": self.position if consumed is None else consumed,
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        if state.get("seed") != self.seed:
            raise TuneproofError(
                f"state was saved with seed {state.get('seed')}, this sampler has {self.seed}",
                "build the sampler with the same seed to resume",
            )
        self.epoch, self.position = int(state["epoch"]), int(state["position"])


def world_of(num_replicas: int | None, rank: int | None) -> tuple[int, int]:
    if num_replicas is None or rank is None:
        import torch.distributed as dist

        ready = dist.is_available() and dist.is_initialized()
        num_replicas = num_replicas if num_replicas is not None else (dist.get_world_size() if ready else 1)
        rank = rank if rank is not None else (dist.get_rank() if ready else 0)
    validate.integer("num_replicas", num_replicas, high=1 << 20)
    validate.integer("rank", rank, low=0, high=num_replicas - 1, hint="rank must be in [0, num_replicas)")
    return num_replicas, rank
