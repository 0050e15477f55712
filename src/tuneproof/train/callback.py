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
are padding), `tuneproof/recompiles` (frames dynamo compiled after the first optimizer step: new
shapes or guards failing), `tuneproof/trained_tokens` (the tokens the loss averages over, per optimizer
step, from the batches' own labels) and `tuneproof/trained_share` (their share of the real tokens), so
every `report_to` backend gets them. The first micro-batch with no token to train is warned about, as
is a first step whose every EOS is masked while the text before it trains (pad == eos under a collator
that masks the pad id); and once, the logged loss is checked against the mean over the trained tokens
of each whole accumulated step (`tuneproof.train.trained_tokens`). The peak is the GPU table's
(datasheet) or `peak_tflops` (given); on a device the table does not know, the MFUs are left out and
the reason is warned once. At train end, on the main process: the adapter's health on stderr and,
with `record_base`, the base's fingerprint into the Trainer's output_dir.

Where the parts live: reading the run from the model `train/read_run.py`, pricing each
micro-batch `flops/microbatch.py`, the warnings' texts `train/advice.py`, health and
fingerprint `train/artefacts.py`; this module holds the Trainer hooks alone.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import sys
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from tuneproof.core.errors import TuneproofError
from tuneproof.flops.microbatch import StepFlops, median_width, price_step
from tuneproof.runs.batch import BATCH_KEYS, BatchRead, read_batch
from tuneproof.runs.step import UNKNOWN_PATH
from tuneproof.train import guard
from tuneproof.train.advice import first_step_warnings, recompile_warning
from tuneproof.train.artefacts import adapter_health, base_folder, write_base_fingerprint
from tuneproof.train.guard import Guards, guarded
from tuneproof.train.read_run import CallbackState, read_run
from tuneproof.train.say import say
from tuneproof.train.trained_tokens import AccumulationCheck, eos_masked, trained

PREFIX = "tuneproof/"
ISOLATION_TOKENS = 512  # the first step's isolation check runs at most this many tokens of a packed row


class TuneproofCallback(TrainerCallback):
    """Logs intended and performed TFLOP/s, both MFUs, padding and recompiles per logging step."""

    def __init__(
        self,
        gpu: str | None = None,
        peak_tflops: float | None = None,
        widths: Any = None,
        record_base: bool = True,
        check_isolation: bool = False,
        check_accumulation: bool = True,
    ) -> None:
        """`widths`: the padded widths the batches will have (`BucketBatchSampler.widths()`), priced
        once at train begin so that no step pays for a width seen the first time. `record_base`: write
        the base's fingerprint to the Trainer's output_dir at train end (for a Trainer of your own,
        where nothing else records it); `tuneproof train` writes it into its adapter folder itself.
        `check_isolation`: after the first step, run its first packed row packed and its documents one
        by one through the model and say whether the documents stayed apart (a few forwards, once).
        `check_accumulation`: recompute the loss of the steps up to the first logged one from the model's
        logits, and say whether the logged loss is the mean over each step's trained tokens."""
        number = isinstance(peak_tflops, int | float) and not isinstance(peak_tflops, bool)
        if peak_tflops is not None and not (number and math.isfinite(peak_tflops) and peak_tflops > 0):
            raise TuneproofError(
                f"peak_tflops is {peak_tflops!r}", "pass the device's peak in TFLOP/s, e.g. 989"
            )
        self.gpu = gpu
        self.peak_tflops = peak_tflops
        self.widths = sorted({int(w) for w in widths}) if widths is not None else []
        self.record_base = record_base
        self.check_isolation = check_isolation
        self.isolation: Any = None  # the first step's isolation check (attention.isolation.Isolation)
        self._main = True  # the main process: the only one that warns
        self.history: list[StepFlops] = []  # every optimizer step of the run
        self._run: CallbackState | None = None
        self._pending: list[tuple[dict[str, Any], bool]] = []  # (the forward's batch tensors, KV cache on)
        self._unlogged: list[StepFlops] = []
        self._t0: float | None = None
        self._sync: Any = None
        self.health: Any = None  # adapter health at train end (tuneproof.ship.health.Health), PEFT only
        self.fingerprint_path: Path | None = None  # where the base's fingerprint was written, if it was
        self._predicted: tuple[int, str] | None = None  # the memory ledger's peak for the run
        self._warned_memory = False
        self.trained_history: list[int | None] = []  # per optimizer step: the tokens that trained
        self._unlogged_trained: list[tuple[int | None, int | None]] = []  # (trained, real tokens) per step
        self._warned_untrained = False
        self._stepped = False  # the first optimizer step has ended
        self._steps_since_log = 0  # optimizer steps since the last logging step
        self.accumulation: AccumulationCheck | None = AccumulationCheck() if check_accumulation else None
        self._loss_hook: Any = None  # the accumulation check's forward hook, removed once it is made
        self.parts = Guards(self._say)  # every part runs behind a guard: a failing one turns itself off

    # --- set-up ----------------------------------------------------------------------------------------

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if model is None:
            return
        self._main = bool(getattr(state, "is_world_process_zero", True))
        if self.parts.call(guard.READING, self._read, model, args, kwargs.get("processing_class")) is None:
            self._run = None  # nothing read: every part stays quiet, the run goes on
            return
        run = self._run
        assert run is not None
        self.parts.call(guard.FLOPS, self._start_flops, model)
        if self.accumulation is not None:
            self.parts.call(guard.ACCUMULATION, self._start_accumulation_check, model, args)
        self.parts.call(guard.ORDER, _log_first, self)
        for note in run.notes:
            self._say(f"tuneproof: {note}")
        if run.peak_tflops is None and run.attn != UNKNOWN_PATH:
            self._say(f"tuneproof: no MFU: {run.peak_source}")

    def _read(self, model: Any, args: Any, processing_class: Any) -> CallbackState:
        self._run = read_run(model, args, self.gpu, self.peak_tflops)
        tok = getattr(processing_class, "tokenizer", processing_class)  # a processor's tokenizer
        eos, pad = getattr(tok, "eos_token_id", None), getattr(tok, "pad_token_id", None)
        if isinstance(eos, int):
            self._run.eos_id = eos
            self._run.pad_id = pad if isinstance(pad, int) else self._run.pad_id
        return self._run

    def _start_flops(self, model: Any) -> None:
        """Price the widths given, hook the forward, and find the device to synchronise."""
        assert self._run is not None
        self._run.ledger.prewarm(self.widths)
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        import torch

        device = next(base.parameters()).device
        self._sync = torch.cuda.synchronize if device.type == "cuda" else None
        # hooked on the model the Trainer calls, not on PEFT's base: peft 0.20 (Axolotl 0.19's pin) runs
        # the base's `forward` directly, so a hook there never fired (0 TFLOP/s, NaN padding logged)
        self._run.hooks.append(model.register_forward_pre_hook(self._record, with_kwargs=True))

    def on_train_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        """Adapter health into the log and, with `record_base`, the base's fingerprint beside the
        outputs (the file `tuneproof merge` checks the base against): judged on every rank (FSDP2's
        sharded weights are gathered for it), logged and written on the main process only."""
        if self._run is not None:
            for hook in self._run.hooks:
                with contextlib.suppress(Exception):
                    hook.remove()
            self._run.hooks.clear()
        if model is None:
            return
        # on every rank: under FSDP2 reading a shard is a collective
        self.health = self.parts.call(guard.HEALTH, adapter_health, model)
        if not getattr(state, "is_world_process_zero", True):
            return
        if self.health is not None:
            print(f"tuneproof: adapter health: {self.health.summary()}", file=sys.stderr)
        if self.record_base and args.output_dir is not None:
            self.fingerprint_path = self.parts.call(guard.FINGERPRINT, _fingerprint, model, args.output_dir)

    def _start_accumulation_check(self, model: Any, args: Any) -> None:
        acc = self.accumulation
        assert acc is not None
        if getattr(args, "world_size", 1) > 1:
            acc.finish(
                "unchecked", "several processes: each sees its own micro-batches, accumulation not checked"
            )
        elif getattr(args, "label_smoothing_factor", 0):
            acc.finish("unchecked", "label smoothing changes the loss by design: not checked")
        else:
            assert self._run is not None
            self._loss_hook = model.register_forward_hook(self._loss_seen, with_kwargs=True)
            self._run.hooks.append(self._loss_hook)

    @guarded(guard.ACCUMULATION)
    def _loss_seen(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        """Forward hook, until the accumulation check is done: the micro-batch's summed loss from the
        model's own logits, and whether the Trainer passed num_items_in_batch."""
        acc = self.accumulation
        if acc is not None and acc.done and self._loss_hook is not None:
            self._loss_hook.remove()  # the check is made: no forward pays for it any more
            self._loss_hook = None
            return
        if acc is None or acc.done or not module.training:
            return
        batch = {k: kwargs.get(k) for k in ("labels", "shift_labels") if kwargs.get(k) is not None}
        acc.micro(output, batch, kwargs.get("num_items_in_batch") is not None)

    @guarded(guard.FLOPS)
    def _record(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Forward pre-hook: the micro-batch's tensors as the model receives them (BATCH_KEYS), kept by
        reference and read at the step's end (no device sync here)."""
        if not module.training:
            return
        batch = {key: kwargs[key] for key in BATCH_KEYS if kwargs.get(key) is not None}
        if "input_ids" not in batch and args:
            batch["input_ids"] = args[0]
        if "input_ids" not in batch and kwargs.get("inputs_embeds") is not None:
            embeds = kwargs["inputs_embeds"]
            batch["input_ids"] = embeds[..., 0]  # only its (B, T) shape is read
        if "input_ids" in batch and self._run is not None:
            self._pending.append((batch, self._run.caches(kwargs)))

    def typical_micro_batch(self) -> Any:
        """The FLOP ledger (`FlopReport`) of one real micro-batch of the run at its median padded width
        (the first micro-batch seen at that width, its own row lengths), or None before any step."""
        if self._run is None or not self._run.widths_seen:
            return None
        seen = self._run.widths_seen
        width = median_width({w: seen[w][0] for w in seen})
        return self._run.ledger.report(seen[width][1])

    # --- timing ----------------------------------------------------------------------------------------

    @guarded(guard.FLOPS)
    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._sync is not None:
            self._sync()
        self._t0 = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._run is None:
            return
        pending, self._pending = self._pending, []
        first = not self._stepped
        self._stepped = True
        batches = self.parts.call(guard.FLOPS, self._price, state.global_step, pending)
        tokens = sum(r.tokens for _, _, r in batches) if batches is not None else None
        self.parts.call(guard.TOKENS, self._labels_seen, state.global_step, [b for b, _ in pending], tokens)
        self._steps_since_log += 1
        if self.accumulation is not None and not self.accumulation.done:
            self.parts.call(guard.ACCUMULATION, self.accumulation.step_end)
        if first:
            self.parts.call(guard.RECOMPILES, self._first_frames)
        if first and batches is not None:
            step = self.history[-1]
            reads = [r for _, _, r in batches]
            self.parts.call(guard.ADVICE, self._advise, step, reads)
            if self.check_isolation:
                self.parts.call(guard.ISOLATION, self._check_isolation, kwargs.get("model"), batches, args)

    def _price(
        self, step_number: int, pending: list[tuple[dict[str, Any], bool]]
    ) -> list[tuple[dict[str, Any], bool, BatchRead]] | None:
        """The step's micro-batches read and priced, its wall time taken; None before any timed step."""
        if self._t0 is None:
            return None
        if self._sync is not None:
            self._sync()
        seconds = time.perf_counter() - self._t0
        self._t0 = None
        run = self._run
        assert run is not None
        batches = [
            (b, cache, r)
            for b, cache in pending
            if (r := read_batch(b, run.attn, run.pad_id, cache, run.hidden_packing)) is not None
        ]
        reads = [r for _, _, r in batches]
        for read in reads:
            run.widths_seen.setdefault(read.width, [0, read])[0] += 1
        step = price_step(run.ledger, step_number, reads, seconds)
        self._unlogged.append(step)
        self.history.append(step)
        return batches

    def _first_frames(self) -> None:
        """Frames dynamo compiled by the end of the first step: the recompile count starts there."""
        assert self._run is not None
        self._run.frames_at_first_step = _frames_compiled()

    def _advise(self, step: StepFlops, reads: list[BatchRead]) -> None:
        assert self._run is not None
        for line in first_step_warnings(self._run, step, reads, bool(self.widths)):
            self._say(f"tuneproof: {line}")

    def _labels_seen(self, step: int, batches: list[dict[str, Any]], tokens: int | None) -> None:
        """The step's trained tokens (and its real tokens, None where they were not read), the first
        micro-batch with none warned about, the first step's EOS check, and the accumulation check's
        step boundary."""
        counts = [trained(b) for b in batches]
        known = [c for c in counts if c is not None]
        total = sum(known) if known and len(known) == len(counts) else None
        self.trained_history.append(total)
        self._unlogged_trained.append((total, tokens))
        if 0 in known and not self._warned_untrained:
            self._warned_untrained = True
            whole = "nor does any of the step" if total == 0 else "other micro-batches of the step do"
            self._say(
                f"tuneproof: step {step}: a micro-batch has no token to train (every label is -100; "
                f"{whole}): its loss is 0 or NaN; `tuneproof tokens` names such examples"
            )
        if len(self.trained_history) == 1 and self._run is not None:
            self.parts.call(guard.EOS, self._eos_check, step, batches, self._run.eos_id, self._run.pad_id)

    def _eos_check(self, step: int, batches: list[dict[str, Any]], eos: int | None, pad: int | None) -> None:
        masked = [eos_masked(b, eos) for b in batches]
        if sum(m for m, _ in masked) and not sum(t for _, t in masked):
            why = " (the pad id is the EOS's, and the collator masks the pad id)" if eos == pad else ""
            self._say(
                f"tuneproof: step {step}: every EOS (id {eos}) in the batch is masked while the token before "
                f"it trains{why}: the model never learns to stop"
            )

    def _check_isolation(
        self, model: Any, batches: list[tuple[dict[str, Any], bool, BatchRead]], args: Any
    ) -> None:
        """The opt-in first-step check: the first packed row of the step, as the model received it
        (its tokens, position_ids, 2-D mask and use_cache; at most ISOLATION_TOKENS tokens of its
        documents), run packed and document by document through the model on its own backend, under
        the Trainer's autocast."""
        fp16 = "float16" if getattr(args, "fp16", False) else None
        autocast = "bfloat16" if getattr(args, "bf16", False) else fp16
        found = next(
            ((b, cache, i, row) for b, cache, r in batches for i, row in enumerate(r.docs) if len(row) > 1),
            None,
        )
        if model is None or found is None:
            self._say("tuneproof: no packed row in the first step: documents' isolation not checked")
            return
        from tuneproof.attention.isolation import check_isolation, cut_row

        batch, cache, index, row = found
        docs, tensors = cut_row(batch, index, row, ISOLATION_TOKENS)
        try:
            self.isolation = check_isolation(model, docs, row=tensors, use_cache=cache, autocast=autocast)
        except TuneproofError as e:
            self._say(f"tuneproof: documents' isolation not checked: {e.message}")
            return
        attn = self._run.attn if self._run is not None else "the model's attention"
        line = f"tuneproof: packed documents on {attn}: {self.isolation.summary()}"
        if not self.isolation.isolated:
            self._say(line)
        elif self._main:  # a proof, not a warning
            print(line, file=sys.stderr)

    # --- logging ---------------------------------------------------------------------------------------

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        # the steps since the last log, with the loss; the closing summary (train_runtime) takes the
        # steps no logging step reached
        if logs is None or self._run is None or not self._steps_since_log:
            return
        if "loss" not in logs and "train_runtime" not in logs:
            return
        steps, self._unlogged = self._unlogged, []
        window, self._steps_since_log = self._steps_since_log, 0
        metrics: dict[str, float] = {}
        metrics.update(self.parts.call(guard.FLOPS, self._flop_metrics, steps) or {})
        metrics.update(self.parts.call(guard.ACCUMULATION, self._judge_accumulation, logs, window) or {})
        metrics.update(self.parts.call(guard.TOKENS, self._trained_metrics) or {})
        metrics.update(self.parts.call(guard.RECOMPILES, self._recompiles) or {})
        metrics.update(self.parts.call(guard.MEMORY, self._memory, args) or {})
        self.parts.call(guard.LOGGING, _update_logs, logs, state, metrics)

    def _flop_metrics(self, steps: list[StepFlops]) -> dict[str, float]:
        """TFLOP/s, MFU and padding over the logged steps; nothing performed where the path is unknown."""
        run = self._run
        if not steps or run is None:
            return {}
        seconds = sum(s.seconds for s in steps)
        intended = sum(s.intended for s in steps) / seconds / 1e12 if seconds > 0 else math.nan
        performed = sum(s.performed for s in steps) / seconds / 1e12 if seconds > 0 else math.nan
        slots = sum(s.slots for s in steps)
        metrics = {
            f"{PREFIX}flops_intended": sum(s.intended for s in steps),
            f"{PREFIX}flops_performed": sum(s.performed for s in steps),
            f"{PREFIX}steps": len(steps),
            f"{PREFIX}tflops_intended": intended,
            f"{PREFIX}tflops_performed": performed,
            f"{PREFIX}padding": 1 - sum(s.tokens for s in steps) / slots if slots else math.nan,
        }
        if run.peak_tflops:
            metrics[f"{PREFIX}mfu_intended"] = intended / run.peak_tflops
            metrics[f"{PREFIX}mfu_performed"] = performed / run.peak_tflops
        if run.attn == UNKNOWN_PATH:  # what the kernel computes is unknown: no performed number
            metrics = {k: v for k, v in metrics.items() if not k.endswith("_performed")}
        return metrics

    def _recompiles(self) -> dict[str, float]:
        """Frames dynamo compiled after the first step, warned about once near its limit."""
        run = self._run
        if run is None or run.frames_at_first_step is None:
            return {}
        recompiles = _frames_compiled() - run.frames_at_first_step
        near = recompile_warning(run.attn, recompiles, _recompile_limit())
        if near is not None and not run.warned_recompiles:
            run.warned_recompiles = True
            self._say(f"tuneproof: {near}")
        return {f"{PREFIX}recompiles": recompiles}

    def _judge_accumulation(self, logs: dict[str, Any], window: int) -> dict[str, float]:
        """At the first logged loss: is it the mean over each accumulated step's trained tokens (over the
        `window` steps it averages)."""
        acc = self.accumulation
        if acc is None or acc.done or "loss" not in logs or not isinstance(logs["loss"], int | float):
            return {}
        acc.judge(float(logs["loss"]), window)
        if acc.outcome in ("changed", "differs"):
            self._say(f"tuneproof: accumulation check: {acc.line}")
        elif self._main:
            print(f"tuneproof: accumulation check: {acc.line}", file=sys.stderr)
        return {}

    def _trained_metrics(self) -> dict[str, float]:
        """Trained tokens per optimizer step over the logged steps, and their share of the real tokens
        (where the real tokens were read)."""
        seen, self._unlogged_trained = self._unlogged_trained, []
        counts = [c for c, _ in seen]
        if not counts or any(c is None for c in counts):
            return {}
        total = sum(c for c in counts if c is not None)
        metrics = {f"{PREFIX}trained_tokens": total / len(counts)}
        if all(t is not None for _, t in seen):
            tokens = sum(t for _, t in seen if t is not None)
            metrics[f"{PREFIX}trained_share"] = total / tokens if tokens else math.nan
        return metrics

    def _memory(self, args: Any) -> dict[str, float]:
        """On CUDA: the allocator's peak since the last log beside the ledger's prediction, warned
        about once when they part (`tuneproof.train.memory_check`); no prediction for an attention
        implementation tuneproof does not model."""
        if self._sync is None or self._run is None:
            return {}
        import torch

        from tuneproof.train.memory_check import memory_metrics, predicted_peak

        measured = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        if self._predicted is None and self._run.attn != UNKNOWN_PATH:
            self._predicted = predicted_peak(self._run)
        metrics, warning = memory_metrics(measured, self._predicted)
        if warning is not None and not self._warned_memory:
            self._warned_memory = True
            self._say(f"tuneproof: {warning}")
        return {f"{PREFIX}{k}": v for k, v in metrics.items()}

    def _say(self, text: str) -> None:
        """A warning, on the main process only (every rank reads the same run)."""
        if self._main:
            say(text)


def _fingerprint(model: Any, output_dir: Any) -> Path | None:
    folder, source = base_folder(model)
    return write_base_fingerprint(folder, source, Path(output_dir))


def _update_logs(logs: dict[str, Any], state: Any, metrics: dict[str, float]) -> None:
    """The metrics into the Trainer's logs, and into its log history's entry for this step."""
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
