"""Honest FLOPs and MFU inside `transformers.Trainer`, logged next to the loss.

    trainer.add_callback(TuneproofCallback(gpu=None, peak_tflops=None))

The run is read from the model itself: its shape from `model.config`, LoRA rank and targets from the
PEFT wrappers, activation checkpointing, the attention implementation in use. A forward pre-hook,
active only in training, records every micro-batch's real shape (batch, padded width, real lengths
from the attention mask); the FLOP ledger turns them into intended FLOPs (real tokens, causal skip,
window) and performed FLOPs (what the attention path computes: padding, lost skips), summed over the
gradient-accumulation window. Step time is the wall time from `on_step_begin` to `on_step_end` (the
micro-batches, the optimizer step), with the device synchronised at those two points only.

Per logging step the Trainer's logs gain `tuneproof/tflops_intended`, `tuneproof/tflops_performed`,
`tuneproof/mfu_intended`, `tuneproof/mfu_performed`, `tuneproof/padding` (share of token slots that
are padding) and `tuneproof/recompiles` (frames dynamo compiled after the first optimizer step: new
shapes or guards failing), so every `report_to` backend gets them. The peak is the GPU table's
(datasheet) or `peak_tflops` (given); on a device the table does not know, the MFUs are left out and
the reason is warned once. At train end, on the main process: the adapter's health on stderr and,
with `record_base`, the base's fingerprint into the Trainer's output_dir.

Where the parts live: reading the run from the model `train/read_run.py`, pricing each
micro-batch `flops/microbatch.py`, the warnings' texts `train/advice.py`, health and
fingerprint `train/artefacts.py`; this module holds the Trainer hooks alone.
"""

from __future__ import annotations

import inspect
import math
import sys
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from tuneproof.core.errors import TuneproofError
from tuneproof.flops.microbatch import StepFlops, median_width, price_step, rows_of
from tuneproof.train.advice import first_step_warnings, recompile_warning
from tuneproof.train.artefacts import adapter_health, base_folder, write_base_fingerprint
from tuneproof.train.read_run import CallbackState, read_run
from tuneproof.train.say import say

PREFIX = "tuneproof/"


class TuneproofCallback(TrainerCallback):
    """Logs intended and performed TFLOP/s, both MFUs, padding and recompiles per logging step."""

    def __init__(
        self,
        gpu: str | None = None,
        peak_tflops: float | None = None,
        widths: Any = None,
        record_base: bool = True,
    ) -> None:
        """`widths`: the padded widths the batches will have (`BucketBatchSampler.widths()`), priced
        once at train begin so that no step pays for a width seen the first time. `record_base`: write
        the base's fingerprint to the Trainer's output_dir at train end (for a Trainer of your own,
        where nothing else records it); `tuneproof train` writes it into its adapter folder itself."""
        number = isinstance(peak_tflops, int | float) and not isinstance(peak_tflops, bool)
        if peak_tflops is not None and not (number and math.isfinite(peak_tflops) and peak_tflops > 0):
            raise TuneproofError(
                f"peak_tflops is {peak_tflops!r}", "pass the device's peak in TFLOP/s, e.g. 989"
            )
        self.gpu = gpu
        self.peak_tflops = peak_tflops
        self.widths = sorted({int(w) for w in widths}) if widths is not None else []
        self.record_base = record_base
        self.history: list[StepFlops] = []  # every optimizer step of the run
        self._run: CallbackState | None = None
        self._pending: list[tuple[int, int, Any]] = []  # (batch, width, row lengths on device or None)
        self._unlogged: list[StepFlops] = []
        self._t0: float | None = None
        self._sync: Any = None
        self.health: Any = None  # adapter health at train end (tuneproof.ship.health.Health), PEFT only
        self.fingerprint_path: Path | None = None  # where the base's fingerprint was written, if it was

    # --- set-up ----------------------------------------------------------------------------------------

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if model is None:
            return
        self._run = read_run(model, args, self.gpu, self.peak_tflops)
        self._run.ledger.prewarm(self.widths)
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        # hooked on the model the Trainer calls, not on PEFT's base: peft 0.20 (Axolotl 0.19's pin) runs
        # the base's `forward` directly, so a hook there never fired (0 TFLOP/s, NaN padding logged)
        self._run.hooks.append(model.register_forward_pre_hook(self._record, with_kwargs=True))
        import torch

        device = next(base.parameters()).device
        self._sync = torch.cuda.synchronize if device.type == "cuda" else None
        _log_first(self)
        if self._run.peak_tflops is None:
            say(f"tuneproof: no MFU: {self._run.peak_source}")

    def on_train_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        """Adapter health into the log and, with `record_base`, the base's fingerprint beside the
        outputs (the file `tuneproof merge` checks the base against): judged on every rank (FSDP2's
        sharded weights are gathered for it), logged and written on the main process only."""
        if self._run is not None:
            for hook in self._run.hooks:
                hook.remove()
            self._run.hooks.clear()
        if model is None:
            return
        self.health = adapter_health(model)  # on every rank: under FSDP2 reading a shard is a collective
        if not getattr(state, "is_world_process_zero", True):
            return
        if self.health is not None:
            print(f"tuneproof: adapter health: {self.health.summary()}", file=sys.stderr)
        if self.record_base and args.output_dir is not None:
            folder, source = base_folder(model)
            self.fingerprint_path = write_base_fingerprint(folder, source, Path(args.output_dir))

    def _record(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Forward pre-hook: the micro-batch's shape, no device sync (the row sums stay on the device)."""
        if not module.training:
            return
        ids = kwargs.get("input_ids")
        if ids is None:
            ids = args[0] if args else kwargs.get("inputs_embeds")
        if ids is None:
            return
        batch, width = int(ids.shape[0]), int(ids.shape[1])
        mask = kwargs.get("attention_mask")
        lengths = mask.sum(dim=1) if mask is not None and getattr(mask, "dim", lambda: 0)() == 2 else None
        self._pending.append((batch, width, lengths))

    def typical_micro_batch(self) -> Any:
        """The FLOP ledger (`FlopReport`) of one real micro-batch of the run at its median padded width
        (the first micro-batch seen at that width, its own row lengths), or None before any step."""
        if self._run is None or not self._run.widths_seen:
            return None
        seen = self._run.widths_seen
        width = median_width({w: seen[w][0] for w in seen})
        _, batch, rows = seen[width]
        return self._run.ledger.report(batch, width, rows)

    # --- timing ----------------------------------------------------------------------------------------

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._sync is not None:
            self._sync()
        self._t0 = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._run is None or self._t0 is None:
            return
        if self._sync is not None:
            self._sync()
        seconds = time.perf_counter() - self._t0
        self._t0 = None
        pending, self._pending = self._pending, []
        batches = [(batch, width, rows_of(batch, width, lengths)) for batch, width, lengths in pending]
        for batch, width, rows in batches:
            self._run.widths_seen.setdefault(width, [0, batch, rows])[0] += 1
        step = price_step(self._run.ledger, state.global_step, batches, seconds)
        self._unlogged.append(step)
        if self._run.frames_at_first_step is None:
            self._run.frames_at_first_step = _frames_compiled()
            for line in first_step_warnings(self._run, step, pending, bool(self.widths)):
                say(f"tuneproof: {line}")
        self.history.append(step)

    # --- logging ---------------------------------------------------------------------------------------

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if logs is None or self._run is None or not self._unlogged or "loss" not in logs:
            return
        steps, self._unlogged = self._unlogged, []
        seconds = sum(s.seconds for s in steps)
        intended = sum(s.intended for s in steps) / seconds / 1e12 if seconds > 0 else math.nan
        performed = sum(s.performed for s in steps) / seconds / 1e12 if seconds > 0 else math.nan
        slots = sum(s.slots for s in steps)
        recompiles = _frames_compiled() - (self._run.frames_at_first_step or 0)
        metrics = {
            f"{PREFIX}tflops_intended": intended,
            f"{PREFIX}tflops_performed": performed,
            f"{PREFIX}padding": 1 - sum(s.tokens for s in steps) / slots if slots else math.nan,
            f"{PREFIX}recompiles": recompiles,
        }
        near = recompile_warning(self._run.attn, recompiles, _recompile_limit())
        if near is not None and not self._run.warned_recompiles:
            self._run.warned_recompiles = True
            say(f"tuneproof: {near}")
        if self._run.peak_tflops:
            metrics[f"{PREFIX}mfu_intended"] = intended / self._run.peak_tflops
            metrics[f"{PREFIX}mfu_performed"] = performed / self._run.peak_tflops
        logs.update(metrics)
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update(metrics)


def _log_first(callback: TuneproofCallback) -> None:
    """Run this callback's on_log before the reporting callbacks (TensorBoard, W&B, the console), so
    they see its numbers: `add_callback` appends after them. The handler is the one dispatching this
    on_train_begin: the `self` of the `CallbackHandler.call_event` frame above us (the event's kwargs
    do not carry it). Its list is replaced, not mutated, so the dispatch in progress is undisturbed."""
    from transformers.trainer_callback import CallbackHandler

    frame = inspect.currentframe()
    try:
        while frame is not None and not isinstance(frame.f_locals.get("self"), CallbackHandler):
            frame = frame.f_back
        if frame is None:
            return  # on_train_begin called by hand, not by a Trainer: no handler to reorder
        handler = frame.f_locals["self"]
    finally:
        del frame
    handler.callbacks = [callback, *(c for c in handler.callbacks if c is not callback)]


def _recompile_limit() -> int | None:
    try:
        import torch._dynamo

        return int(
            getattr(torch._dynamo.config, "recompile_limit", None) or torch._dynamo.config.cache_size_limit
        )
    except (ImportError, AttributeError):
        return None


def _frames_compiled() -> int:
    """Frames dynamo has compiled in this process (`torch._dynamo.utils.counters`); 0 without dynamo."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return 0
    return int(counters["frames"].get("ok", 0))
