"""`tuneproof plan` against real training runs (issue: time is the budget).

On the embedded tiny model on this CPU: the probe times the LoRA training step (micro-batch 2) at
three widths up to the longest of the embedded corpus, plus what a Trainer step adds; the plan
projects one epoch (160 optimizer steps, grad-accum 1) for our bucketing sampler and for a random
one. Then the same two runs train for real with transformers' Trainer (bucketed: `use_bucketing`;
random: the Trainer's own random sampler, padded per batch) and their wall time (`trainer.train()`)
is compared with the projection. Goal: within 10 % for each.

    .venv/bin/python bench/plan_vs_run.py [--budget 20] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from typing import Any

import numpy as np


def corpus_rows() -> tuple[list[dict[str, list[int]]], Any]:
    from tuneproof.runs.recipe import Recipe
    from tuneproof.train.base import base_tokenizer
    from tuneproof.train.data import read_records, tokenise

    recipe = Recipe()
    tokenizer, _ = base_tokenizer(recipe)
    return tokenise(read_records(recipe), recipe, tokenizer), tokenizer


def real_run(
    rows: list[dict[str, list[int]]], pad_id: int, bucketed: bool, folder: str
) -> tuple[float, float]:
    """(seconds of the training loop: first step's start to the end of training; seconds of the whole
    trainer.train() call, set-up included): one epoch, micro-batch 2, grad-accum 1, LoRA."""
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from tuneproof.data.collate import PadToLongest, RowsDataset
    from tuneproof.integrations.hf import use_bucketing
    from tuneproof.runs.recipe import Recipe
    from tuneproof.train.base import attach_lora, load_base

    recipe = Recipe()
    model, _, _ = load_base(recipe, "sdpa")
    model = attach_lora(model, recipe)
    args = TrainingArguments(
        output_dir=folder, per_device_train_batch_size=2, gradient_accumulation_steps=1, num_train_epochs=1,
        learning_rate=2e-4, save_strategy="no", logging_strategy="no", report_to=[], use_cpu=True,
        disable_tqdm=True, remove_unused_columns=False, seed=0,
    )  # fmt: skip
    marks: list[float] = []

    class Loop(TrainerCallback):
        def on_step_begin(self, *a: Any, **k: Any) -> None:
            if not marks:
                marks.append(time.perf_counter())

        def on_train_end(self, *a: Any, **k: Any) -> None:
            marks.append(time.perf_counter())

    data = RowsDataset(rows)
    trainer = Trainer(
        model=model, args=args, train_dataset=data, data_collator=PadToLongest(pad_id), callbacks=[Loop()]
    )
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    if bucketed:
        use_bucketing(trainer)
    t0 = time.perf_counter()
    trainer.train()
    return marks[-1] - marks[0], time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", type=float, default=20.0, help="seconds of probe timing")
    parser.add_argument("--runs", type=int, default=3, help="real runs per sampler (median)")
    opts = parser.parse_args()
    warnings.simplefilter("ignore")
    from tuneproof.arch import resolve
    from tuneproof.measure.projection import project
    from tuneproof.measure.step_model import probe_step_model

    rows, tokenizer = corpus_rows()
    lengths = np.array([len(r["input_ids"]) for r in rows])
    model, overhead = probe_step_model(resolve("tiny"), "sdpa", "lora", 2, opts.budget, 0, lengths)
    projected = {p.sampler: p for p in project(lengths, 2, 1, model, 1, 1.0, ("ours", "random"), 0, overhead)}
    print(f"probe: {model.source}; a Trainer step adds {1000 * overhead:.1f} ms")
    runs: dict[str, list[tuple[float, float]]] = {"ours": [], "random": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(opts.runs):  # interleaved, so that drift hits both alike
            for name in ("ours", "random"):
                runs[name].append(real_run(rows, tokenizer.pad_token_id, name == "ours", tmp))
    measured = {name: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs))
                for name, rs in runs.items()}  # fmt: skip
    for name in ("ours", "random"):
        p = projected[name]
        ci = f" (95 % interval {p.wall_s_ci95[0]:.1f}-{p.wall_s_ci95[1]:.1f} s)" if p.wall_s_ci95 else ""
        loop, whole = measured[name]
        spread = f"{min(r[0] for r in runs[name]):.1f}-{max(r[0] for r in runs[name]):.1f}"
        error = p.wall_s / loop - 1
        verdict = "within 10 %" if abs(error) <= 0.10 else "OUTSIDE 10 %"
        print(
            f"{name:>6}: {p.steps} steps, projected {p.wall_s:.1f} s{ci}, measured loop {loop:.1f} s (median "
            f"of {opts.runs}, {spread}): error {100 * error:+.1f} % ({verdict}); the whole train() call with "
            f"its set-up {whole:.1f} s ({100 * (p.wall_s / whole - 1):+.1f} %)"
        )
    ratio = measured["random"][0] / measured["ours"][0]
    print(
        f"measured random / ours: {ratio:.2f}x; "
        f"projected: {projected['random'].wall_s / projected['ours'].wall_s:.2f}x"
    )


if __name__ == "__main__":
    main()
