"""Micro-batch pricing: the FLOP ledger's (intended, performed) FLOPs of every real micro-batch of a
training run, cheaply enough to price each one as it runs (what `TuneproofCallback` logs).

Conventions are the ledger's (`flop_report`): intended FLOPs count each row at its own length (real
tokens, causal skip, window); performed FLOPs count what the attention path computes (every row at
the micro-batch's padded width, skips lost to padding or dense masks), LoRA's missing weight-gradient
GEMMs and recompute as `Step` describes them. Both are exact copies of the ledger (tested), never
an approximation of it: a fit is used only where it reproduces the ledger to 1e-9.

A micro-batch here is a `tuneproof.runs.batch.BatchRead`: its real documents per row (intended) and
the rows as the kernel runs them (performed).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tuneproof.runs.batch import BatchRead
from tuneproof.runs.step import Rows, Step

# paths whose performed FLOPs depend on the batch only through (B, T, any row padded): the ledger
# is then B x one row's (checked against the ledger itself in tests/train/test_callback.py)
ROW_UNIFORM_PATHS = ("eager", "sdpa")


@dataclass(kw_only=True, frozen=True, slots=True)
class StepFlops:
    """One optimizer step: FLOPs summed over its micro-batches, and its wall time."""

    step: int
    intended: float
    performed: float
    seconds: float
    tokens: int  # real tokens
    slots: int  # token slots (batch x padded width)
    micro_batches: int


class RowFit:
    """FLOPs of one row as a function of its length, from the ledger, made cheap: the ledger is fitted
    on sample lengths to a x L + b x L^2 + sum_w c_w x pairs_w(L) (pairs_w(L): query-key pairs of a
    causal window w), and the fit is used only if it reproduces the ledger exactly (relative 1e-9) at
    lengths it was not fitted on; otherwise every length goes to the ledger, memoised. Intended FLOPs
    always fit (linear layers per token, attention per causal pair); performed ones fit for paths
    without width-dependent dispatch or blocks (eager)."""

    def __init__(self, ledger: Any, windows: list[int], seed: int = 0) -> None:
        import numpy as np

        self.ledger = ledger
        self.windows = windows
        self.memo: dict[int, float] = {}
        # twice the basis' size on each side of every window, then held-out lengths: the fit is
        # exact or unused, so a few points suffice (each costs one ledger walk at train begin)
        sample = sorted({2, 3, 5, 13, 89, 610}
                        | {w + d for w in windows for d in (-1, 0, 1, w)} - {0, 1})  # fmt: skip
        basis = np.array([self._basis(n) for n in sample])
        values = np.array([self._exact(n) for n in sample])
        self.coef: Any = np.linalg.lstsq(basis, values, rcond=None)[0]
        rng = np.random.default_rng(seed)
        held_out = [int(n) for n in rng.integers(2, 4 * max([610, *windows]), 3)]
        if any(abs(self._fitted(n) - self._exact(n)) > 1e-9 * abs(self._exact(n)) for n in held_out):
            self.coef = None

    def _basis(self, n: int) -> list[float]:
        x = float(n)
        pairs = [x * (x + 1) / 2 if n <= w else w * (w + 1) / 2 + (x - w) * w for w in self.windows]
        return [x, x * x, *pairs]

    def _fitted(self, n: int) -> float:
        return float(sum(c * b for c, b in zip(self.coef, self._basis(n), strict=True)))

    def _exact(self, n: int) -> float:
        if n not in self.memo:
            self.memo[n] = float(self.ledger(n))
        return self.memo[n]

    @property
    def fitted(self) -> bool:
        return self.coef is not None

    def __call__(self, n: int) -> float:
        if n <= 0:
            return 0.0
        return self._fitted(n) if self.coef is not None and n > 1 else self._exact(n)


class MicroBatchLedger:
    """(intended, performed) FLOPs of micro-batches of one run, equal to `flop_report` on each
    micro-batch (tested) at a small fraction of its cost. Intended is a sum over rows (each row's own
    length, `RowFit`); performed is B x one row's for the paths that compute every row alike (eager,
    sdpa: each row at the padded width, the causal skip lost when any row is padded), else the ledger
    on the whole micro-batch, memoised. Work that costs the same whatever the tokens (PEFT's expert
    merges) is priced once per micro-batch, outside the per-row fits."""

    def __init__(self, shape: Any, step: Step) -> None:
        """`step`: the run's step (its attention path, mode, adapters, checkpointing) at any width."""
        self.shape = shape
        self.step = step
        attn = step.attn
        windows = sorted({layer.attention.window for layer in shape.layers if layer.attention.window})
        self.per_micro_batch = self._token_free()
        intended_free = self.per_micro_batch[0]
        self.intended = RowFit(lambda n: self._totals(n)[0] - intended_free, windows)
        # performed per row at a padded width, padded or not: fitted on first use (a packed run, or a
        # run never padded, never pays for the other)
        self.row_uniform = attn in ROW_UNIFORM_PATHS
        self.performed: dict[bool, RowFit] = {}
        self._windows = windows
        self._batch: dict[tuple[int, tuple[tuple[int, ...], ...]], float] = {}
        self._packed_rule: str | None = None  # how a full packed row is priced: decided on first use
        self._per_document: RowFit | None = None

    def _totals(
        self, width: int, batch: int = 1, lengths: tuple[int, ...] | None = None
    ) -> tuple[float, float]:
        from tuneproof.flops.report import step_totals

        return step_totals(self.shape, replace(self.step, seq_len=width, batch=batch, lengths=lengths))

    def spec_of(self, rows: Rows) -> Step:
        """The run's step on these rows: packed rows as documents, others as their lengths."""
        if rows.is_packed:
            return replace(
                self.step, seq_len=rows.width, batch=rows.num_rows, documents=rows.docs, lengths=None
            )
        lengths = tuple(sum(row) for row in rows.docs)
        return replace(self.step, seq_len=rows.width, batch=rows.num_rows, lengths=lengths, documents=None)

    def _token_free(self) -> tuple[float, float]:
        """(intended, performed) FLOPs a micro-batch costs whatever its tokens (the ledger's
        TOKEN_FREE_COMPONENTS rows: PEFT's expert merges), counted once per micro-batch, not per row."""
        from tuneproof.flops import flop_report
        from tuneproof.flops.ledger import TOKEN_FREE_COMPONENTS

        report = flop_report(self.shape, replace(self.step, seq_len=1, batch=1, lengths=None))
        intended, performed = (
            sum(ledger.where(component_prefix=c) for c in TOKEN_FREE_COMPONENTS)
            for ledger in (report.intended, report.performed)
        )
        return intended, performed

    def performed_fit(self, padded: bool) -> RowFit:
        """Performed FLOPs of one row at a padded width (any row of the micro-batch padded or none),
        for the paths that compute every row alike."""
        if padded not in self.performed:
            free = self.per_micro_batch[1]
            self.performed[padded] = RowFit(
                lambda n: self._totals(n, 1, (n - 1,) if padded else None)[1] - free, self._windows
            )
        return self.performed[padded]

    def prewarm(self, widths: list[int]) -> None:
        """Price these widths now (padded and not) where performed FLOPs are memoised per width."""
        if not self.row_uniform:
            return
        for padded in (False, True):
            fit = self.performed_fit(padded)
            for width in widths:
                if width > 1:
                    fit(width)

    def micro_batch(self, read: BatchRead) -> tuple[float, float]:
        """(intended, performed) FLOPs of one micro-batch: intended over its real documents, each on
        its own; performed over the rows as the kernel runs them (`BatchRead.seen`)."""
        intended_free, performed_free = self.per_micro_batch
        intended = sum(self.intended(n) for row in read.docs for n in row) + intended_free
        seen = read.seen
        if self.row_uniform and not seen.is_packed:
            fit = self.performed_fit(seen.is_padded)
            return intended, seen.num_rows * fit(seen.width) + performed_free
        full = all(sum(row) == seen.width for row in seen.docs)
        rule = self.packed_rule() if seen.is_packed and full else "ledger"
        if rule == "square":  # a packed row costs what a padded row of its width does
            return intended, seen.num_rows * self.performed_fit(True)(seen.width) + performed_free
        if rule == "documents" and self._per_document is not None:  # each document on its own
            per_doc = sum(self._per_document(n) for row in seen.docs for n in row)
            return intended, per_doc + performed_free
        key = (seen.width, seen.docs)
        if key not in self._batch:
            from tuneproof.flops.report import step_totals

            self._batch[key] = step_totals(self.shape, self.spec_of(seen))[1]
        return intended, self._batch[key]

    def packed_rule(self) -> str:
        """How this run's full packed rows are priced, each rule kept only where it reproduces the whole
        ledger (relative 1e-9) on sample layouts: "square" (the path computes the row's full square
        and every slot, as a padded row of that width: eager, SDPA with its block mask), "documents"
        (the row costs the sum of its documents run alone: flash varlen), else "ledger" (the whole
        ledger per layout, memoised: flex's blocks depend on where the documents fall)."""
        if self._packed_rule is not None:
            return self._packed_rule
        from tuneproof.flops.report import step_totals

        free = self.per_micro_batch[1]
        layouts = [(5, 9, 3), (40, 24), (1, 30, 2, 97)]
        exact = [step_totals(self.shape, self.spec_of(Rows(sum(d), (d,))))[1] - free for d in layouts]

        def agrees(priced: list[float]) -> bool:
            return all(abs(p - e) <= 1e-9 * abs(e) for p, e in zip(priced, exact, strict=True))

        self._packed_rule = "ledger"
        if self.row_uniform and agrees([self.performed_fit(True)(sum(d)) for d in layouts]):
            self._packed_rule = "square"
        elif not self.row_uniform:
            alone = RowFit(lambda n: self._totals(n)[1] - free, self._windows)
            if agrees([sum(alone(n) for n in d) for d in layouts]):
                self._packed_rule, self._per_document = "documents", alone
        return self._packed_rule

    def report(self, read: BatchRead) -> Any:
        """The whole ledger (`FlopReport`, excess lines named) of one micro-batch of this run, on its
        rows as the kernel runs them."""
        from tuneproof.flops import flop_report

        return flop_report(self.shape, self.spec_of(read.seen))


def price_step(ledger: MicroBatchLedger, step: int, reads: list[BatchRead], seconds: float) -> StepFlops:
    """One optimizer step's FLOPs: its micro-batches priced and summed, with the step's wall time."""
    intended = performed = 0.0
    tokens = slots = 0
    for read in reads:
        i, p = ledger.micro_batch(read)
        intended += i
        performed += p
        tokens += read.tokens
        slots += read.slots
    return StepFlops(
        step=step,
        intended=intended,
        performed=performed,
        seconds=seconds,
        tokens=tokens,
        slots=slots,
        micro_batches=len(reads),
    )


def median_width(counts: dict[int, int]) -> int:
    """The padded width at which half the micro-batches (counted per width) are reached."""
    order = sorted(counts)
    half, total = sum(counts.values()) / 2, 0
    for width in order:
        total += counts[width]
        if total >= half:
            return width
    return order[-1]
