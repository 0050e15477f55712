"""A batch plan stored flat: indices grouped by micro-batch, the offset where each micro-batch starts,
and the order in which the micro-batches run.

Ten million lengths make five million micro-batches: a list of five million small arrays alone costs
seconds, and so does physically reordering them. A plan therefore keeps the micro-batches where
planning put them and records their run order; micro-batches are handed out on demand."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np


class Plan(Sequence[np.ndarray]):
    def __init__(self, flat: np.ndarray, starts: np.ndarray, run_order: np.ndarray | None = None) -> None:
        self.flat = flat
        self.starts = starts  # stored micro-batch b is flat[starts[b]:starts[b + 1]]
        self.run_order = run_order  # run position i holds stored micro-batch run_order[i] (None: identity)

    @classmethod
    def from_batches(cls, batches: Sequence[np.ndarray]) -> Plan:
        if isinstance(batches, Plan):
            return batches
        sizes = np.fromiter((len(b) for b in batches), dtype=np.int64, count=len(batches))
        flat = np.concatenate(batches).astype(np.int64) if len(batches) else np.zeros(0, dtype=np.int64)
        return cls(flat, np.concatenate([[0], np.cumsum(sizes)]))

    @classmethod
    def fixed(cls, order: np.ndarray, size: int, drop_last: bool) -> Plan:
        """Consecutive chunks of `size`; the short tail is kept unless drop_last."""
        n = order.size - (order.size % size if drop_last else 0)
        starts = np.arange(0, n, size, dtype=np.int64)
        return cls(order[:n], np.append(starts, n))

    @property
    def stored_sizes(self) -> np.ndarray:
        return np.diff(self.starts)

    @property
    def sizes(self) -> np.ndarray:
        """Micro-batch sizes in run order."""
        s = self.stored_sizes
        return s if self.run_order is None else s[self.run_order]

    def __len__(self) -> int:
        return self.starts.size - 1 if self.run_order is None else self.run_order.size

    def _stored(self, i: int) -> np.ndarray:
        b = i if self.run_order is None else int(self.run_order[i])
        return self.flat[self.starts[b] : self.starts[b + 1]]

    def __getitem__(self, i):  # type: ignore[no-untyped-def]
        if isinstance(i, slice):
            return [self._stored(j) for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self._stored(i)

    def __iter__(self) -> Iterator[np.ndarray]:
        for i in range(len(self)):
            yield self._stored(i)

    def select(self, positions: np.ndarray) -> Plan:
        """The micro-batches at these run positions, in that order (no data is moved)."""
        ids = positions if self.run_order is None else self.run_order[positions]
        return Plan(self.flat, self.starts, np.asarray(ids, dtype=np.int64))
