"""Real lengths from a run's local datasets, and what the trainer's batching makes of them: padding
under Axolotl's collator (pad_to_sequence_len true: every row to sequence_len rounded up to 64; unset:
each batch to a multiple of 64; false: to its longest), the fill of packed rows, the distinct widths,
and the wall time of an epoch from a step-time fit.

Lengths are the base model's tokenizer on each row's text (the string fields of an instruction row, the
contents of a chat row's messages): the prompt template's own tokens are not counted, so they are a
lower bound. Hub datasets are not read (nothing is downloaded) and the section says so.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from tuneproof.core.errors import TuneproofError
from tuneproof.preflight.sections import Section
from tuneproof.runs.axolotl import AXOLOTL_PAD_MULTIPLE
from tuneproof.runs.run import DatasetRef, Run

MAX_ROWS = 200_000  # rows read per dataset: enough for the length mix


def lengths(run: Run, tokenizer: Any) -> tuple[np.ndarray | None, list[str], list[str]]:
    """Token lengths of every local dataset's rows, notes on what was skipped, and findings (a dataset
    written as a file path that is not here)."""
    notes: list[str] = []
    findings: list[str] = []
    out: list[int] = []
    for ds in run.datasets:
        if ds.local is None and ds.meant_local:
            if run.kind == "recipe":
                raise TuneproofError(
                    f"{run.source}: dataset {ds.path} not found", "give the data file's path"
                )
            findings.append(
                f"dataset {ds.path}: no such file from this folder; Axolotl would look for it on the hub, "
                "and fail"
            )
            continue
        if ds.local is None:
            notes.append(
                f"dataset {ds.path}: not a local file: a hub dataset, not read (nothing is downloaded)"
            )
            continue
        if tokenizer is None:
            notes.append(f"dataset {ds.path}: no tokenizer for the base model here, so no token lengths")
            continue
        if ds.local.is_file() and ds.local.suffix not in (".json", ".jsonl"):
            notes.append(f"dataset {ds.path}: only JSON and JSONL files are read here, so no lengths from it")
            continue
        texts = list(_texts(ds))
        if not texts:
            raise TuneproofError(f"dataset {ds.path} holds no rows with text", "check its path and fields")
        ids = tokenizer(texts, add_special_tokens=True)["input_ids"]
        out.extend(len(x) for x in ids)
        notes.append(f"dataset {ds.path}: {len(texts):,} rows tokenized (template tokens not counted)")
    if not out:
        return None, notes, findings
    return np.array(out, dtype=np.int64), notes, findings


def _texts(ds: DatasetRef) -> Any:
    p = ds.local
    assert p is not None
    files = sorted(x for x in p.rglob("*") if x.suffix in (".json", ".jsonl")) if p.is_dir() else [p]
    count = 0
    for f in files:
        for row in _rows(f):
            joined = _row_text(row, ds.field)
            if joined:
                yield joined
                count += 1
            if count >= MAX_ROWS:
                return


def _rows(f: Path) -> Any:
    """A JSON file's array (or its one object) or a JSONL file's objects, each error one line."""
    try:
        text = f.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        raise TuneproofError(
            f"dataset {f} cannot be read ({e})", "pass a readable UTF-8 JSON or JSONL file"
        ) from None
    if f.suffix == ".json" and text.lstrip()[:1] in ("[", "{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise TuneproofError(
                f"dataset {f}: not JSON ({e.msg}, line {e.lineno})", "fix the file"
            ) from None
        yield from data if isinstance(data, list) else [data]
        return
    for line_no, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                yield json.loads(line)
            except json.JSONDecodeError as e:
                raise TuneproofError(
                    f"dataset {f}, line {line_no}: not JSON ({e.msg})", "fix the line"
                ) from None


def _row_text(row: Any, field: str | None) -> str:
    if not isinstance(row, dict):
        return ""
    messages = row.get(field or "messages") or row.get("conversations")
    if isinstance(messages, list):
        parts = [m.get("content") or m.get("value") for m in messages if isinstance(m, dict)]
        return "\n".join(x for x in parts if isinstance(x, str))
    return "\n".join(v for v in row.values() if isinstance(v, str))


def batching(run: Run, lens: np.ndarray, seed: int = 0) -> tuple[Section, float, int, list[int]]:
    """Padding share, distinct widths and the widths of one epoch's micro-batches under the run's batching."""
    from tuneproof.data.packing import best_fit_decreasing

    s = Section(name="batches")
    kept = np.minimum(lens, run.seq_len)
    over = int((lens > run.seq_len).sum())
    if run.kind == "recipe":  # tuneproof train: the bucketing sampler, each batch padded to its longest
        from tuneproof.data import BucketBatchSampler

        sampler = BucketBatchSampler(
            kept, micro_batch_size=run.micro_batch, grad_accum=run.grad_accum, seed=seed
        )
        batches = sampler.global_plan()
        widths = [int(kept[b].max()) for b in batches]
        pad = 1.0 - float(kept.sum()) / sum(w * len(b) for w, b in zip(widths, batches, strict=True))
        s.lines.append(f"{len(widths):,} bucketed micro-batches of {run.micro_batch}: {pad:.1%} padding")
    elif run.packing:
        capacity = run.micro_batch * run.seq_len if run.packs_rows else run.seq_len
        bins = best_fit_decreasing(kept, capacity)
        fill = float(kept.sum()) / (len(bins) * capacity)
        pad, widths = 1.0 - fill, [capacity] * len(bins)
        s.lines.append(f"packed into {len(bins):,} rows of {capacity:,} tokens: {fill:.1%} filled")
    else:
        order = np.random.default_rng(seed).permutation(kept.size)  # the Trainer's shuffled batches
        widths = []
        for i in range(0, kept.size, run.micro_batch):
            longest = int(kept[order[i : i + run.micro_batch]].max())
            if run.pad_to_seq_len is True:
                longest = math.ceil(run.seq_len / AXOLOTL_PAD_MULTIPLE) * AXOLOTL_PAD_MULTIPLE
            elif run.pad_to_seq_len is None:
                longest = math.ceil(longest / AXOLOTL_PAD_MULTIPLE) * AXOLOTL_PAD_MULTIPLE
            widths.append(longest)
        slots = sum(w * min(run.micro_batch, kept.size - i * run.micro_batch) for i, w in enumerate(widths))
        pad = 1.0 - float(kept.sum()) / slots
        s.lines.append(
            f"{len(widths):,} micro-batches of {run.micro_batch}, shuffled: {pad:.1%} of the token slots "
            "are padding"
        )
        if pad > 0.10:  # Axolotl's shuffled batches
            s.findings.append(
                f"padding: {pad:.0%} of every epoch's token slots are padding (shuffled batches padded "
                f"{'to sequence_len' if run.pad_to_seq_len else 'per batch'}): sample_packing or tuneproof's "
                "bucketing sampler removes most of it"
            )
    if over:
        s.lines.append(f"{over:,} rows are longer than sequence_len {run.seq_len} (truncated or dropped)")
    s.data = {"rows": int(lens.size), "tokens": int(kept.sum()), "padding": pad,
              "distinct_widths": len(set(widths)),
              "longest": int(lens.max()), "over_sequence_len": over}  # fmt: skip
    return s, pad, len(set(widths)), widths


def wall_time(run: Run, widths: list[int], fit: Any) -> Section:
    """An epoch's seconds from the fit t = c + rows/batch x (a*w + b*w^2), at the widths above."""
    rows, per = (1, 1) if run.packs_rows else (run.micro_batch, run.micro_batch)
    w = np.array(widths, dtype=np.float64)
    seconds = float(fit(w, np.full(w.size, rows if run.packing else per)).sum()) * run.epochs
    s = Section(
        name="wall time", data={"seconds": seconds, "epochs": run.epochs, "micro_batches": len(widths)}
    )
    s.lines.append(
        f"{run.epochs:g} epoch(s), {len(widths):,} micro-batches: {seconds:,.1f} s ({seconds / 3600:.2f} h) "
        "on one device at the fit "
        f"(a={fit.a:.3g}, b={fit.b:.3g}, c={fit.c:.3g})"
    )
    return s


def tokenizer_for(folder: Path | None) -> Any:
    """The base's tokenizer from its local folder, or None (no folder, no tokenizer files)."""
    return read_tokenizer(folder)[0]


def read_tokenizer(folder: Path | None) -> tuple[Any, str | None]:
    """(the tokenizer in `folder`, None), or (None, why it was not read)."""
    if folder is None:
        return None, "the base is no local folder or cached snapshot"
    if not any((folder / n).exists() for n in ("tokenizer.json", "tokenizer.model")):
        return None, f"{folder} holds no tokenizer.json or tokenizer.model"
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True), None
    except Exception as e:  # a tokenizer that will not load is reported as absent, with its reason
        first = (str(e).splitlines() or [""])[0]
        return None, f"the tokenizer in {folder} does not load ({type(e).__name__}: {first})"


def step_time(run: Run, fit: Any) -> Section:
    """One micro-batch's seconds at the run's width, when no real lengths give the epoch."""
    rows, width = (1, run.micro_batch * run.seq_len) if run.packs_rows else (run.micro_batch, run.seq_len)
    seconds = float(fit(np.array([width], dtype=np.float64), np.array([rows]))[0])
    s = Section(name="wall time", data={"seconds_per_micro_batch": seconds, "width": width, "rows": rows})
    s.lines.append(
        f"{seconds:.3g} s per micro-batch of {rows} x {width} at the fit; an epoch's total needs the real "
        "lengths (a local dataset)"
    )
    return s
