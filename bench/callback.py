"""TuneproofCallback overhead goal: at most 1 % of step time on the tiny model, no sync per micro-batch.

Both batch kinds users take: bucketed padded rows, and packed rows (transformers'
DataCollatorWithFlattening: position_ids, no mask), each with its fixed start/end cost.

A Trainer trains the embedded tiny Gemma-4-style model with a LoRA on CPU (bucketed batches, gradient
accumulation 2). Two measurements, same run:
1. self time: every callback entry point (the forward pre-hook, on_step_begin/end, on_log) is timed
   from inside, and its sum is divided by the summed step time. This is the overhead itself.
2. A/B: median step time with and without the callback, runs interleaved (ABAB...), with the spread
   of each; a difference inside that spread is reported as inconclusive, not as a cost.

    .venv/bin/python bench/callback.py [--steps N] [--runs R]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from tuneproof.data.collate import RowsDataset

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))


class StepClock:
    """Step wall times measured by a plain callback (the same points TuneproofCallback uses)."""

    def __init__(self) -> None:
        from transformers import TrainerCallback

        self.times: list[float] = []
        outer = self

        class _Clock(TrainerCallback):
            def on_step_begin(self, *a: Any, **k: Any) -> None:
                outer._t = time.perf_counter()

            def on_step_end(self, *a: Any, **k: Any) -> None:
                outer.times.append(time.perf_counter() - outer._t)

        self.callback = _Clock()


def timed(callback: Any, spent: list[float]) -> Any:
    """Wrap the callback's entry points and its hook so their own time is summed into spent[0] (per
    step), spent[1] (the one-time set-up in on_train_begin) and spent[2] (on_train_end: the adapter's
    health and the base's fingerprint)."""
    for name, slot in (("on_train_begin", 1), ("on_train_end", 2)):
        once = getattr(callback, name)

        def fixed(*a: Any, _once: Any = once, _slot: int = slot, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return _once(*a, **k)
            finally:
                spent[_slot] += time.perf_counter() - t

        setattr(callback, name, fixed)
    for name in ("_record", "on_step_begin", "on_step_end", "on_log"):
        inner = getattr(callback, name)

        def wrapper(*a: Any, _inner: Any = inner, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return _inner(*a, **k)
            finally:
                spent[0] += time.perf_counter() - t

        setattr(callback, name, wrapper)
    return callback


def run(steps: int, with_callback: bool, seed: int, packed: bool = False) -> tuple[list[float], list[float]]:
    from peft import LoraConfig, get_peft_model
    from transformers import Trainer, TrainingArguments

    from tuneproof.arch import resolve
    from tuneproof.integrations.hf import TuneproofCallback, use_bucketing
    from tuneproof.measure.model import build_model, lora_targets, peft_target_regex

    resolved = resolve("tiny")
    model = build_model(resolved, "sdpa")
    model.config.pad_token_id = 0
    model = get_peft_model(
        model,
        LoraConfig(r=8, target_modules=peft_target_regex(lora_targets(resolved.shape)), lora_dropout=0.0),
    )
    rng = np.random.default_rng(seed)
    rows = [{"input_ids": rng.integers(1, 200, n).tolist()} for n in rng.integers(16, 256, 4 * steps * 2)]
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out, per_device_train_batch_size=2, gradient_accumulation_steps=2, max_steps=steps,
            learning_rate=1e-4, report_to=[], save_strategy="no", logging_steps=1, use_cpu=True, seed=seed,
            disable_tqdm=True, remove_unused_columns=False, log_level="error",
        )  # fmt: skip
        from transformers import DataCollatorWithFlattening

        collator = DataCollatorWithFlattening() if packed else None
        trainer = Trainer(model=model, args=args, train_dataset=RowsDataset(rows), data_collator=collator)
        from transformers.trainer_callback import PrinterCallback

        trainer.remove_callback(PrinterCallback)  # every step is logged (the callback's cost): not printed
        widths = None if packed else use_bucketing(trainer).widths()
        clock = StepClock()
        trainer.add_callback(clock.callback)
        spent = [0.0, 0.0, 0.0]
        if with_callback:
            trainer.add_callback(timed(TuneproofCallback(peak_tflops=1.0, widths=widths), spent))
        trainer.train()
    return clock.times[2:], spent  # the first steps warm torch's own caches in both arms alike


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--runs", type=int, default=3, help="runs per arm, interleaved")
    opts = parser.parse_args()
    met = True
    for packed in (False, True):
        met &= arm(opts.steps, opts.runs, packed)
    print("goal met" if met else "GOAL NOT MET")
    if not met:
        sys.exit(1)


def arm(steps: int, runs: int, packed: bool) -> bool:
    """One batch kind (bucketed padded rows, or DataCollatorWithFlattening's packed rows): the
    callback's self time per step and its fixed start/end cost, and the A/B step medians."""
    base: list[float] = []
    ours: list[float] = []
    self_time = step_time = begin = end = 0.0
    for r in range(runs):
        times, _ = run(steps, False, seed=r, packed=packed)
        base += times
        times, spent = run(steps, True, seed=r, packed=packed)
        ours += times
        self_time += spent[0]
        begin += spent[1]
        end += spent[2]
        step_time += sum(times)
    share = self_time / step_time
    mb, mo = statistics.median(base), statistics.median(ours)
    print(f"== {'packed (DataCollatorWithFlattening)' if packed else 'bucketed padded batches'}")
    fixed = (begin + end) / runs
    print(
        f"fixed start/end cost: {1e3 * fixed:.0f} ms/run (train begin {1e3 * begin / runs:.0f} ms: reading "
        f"the model, fitting the row ledgers; train end {1e3 * end / runs:.0f} ms: adapter health, base "
        f"fingerprint) = {100 * fixed / (30 * mb):.1f} % of a 30-step run at this step time"
    )
    per_step = 1e3 * self_time / len(ours)
    print(f"callback self time: {per_step:.3f} ms per step, {100 * share:.3f} % of step time", end=" ")
    print(f"({len(ours)} steps; goal <= 1 %)")
    spread = max(
        np.percentile(base, 75) - np.percentile(base, 25), np.percentile(ours, 75) - np.percentile(ours, 25)
    )
    verdict = "inconclusive (inside the spread)" if abs(mo - mb) < spread else "outside the spread"
    print(f"A/B median step: without {1e3 * mb:.2f} ms, with {1e3 * mo:.2f} ms, ratio {mo / mb:.4f}; "
          f"IQR {1e3 * spread:.2f} ms: {verdict}")  # fmt: skip
    return share <= 0.01


if __name__ == "__main__":
    main()
