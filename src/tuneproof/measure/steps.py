"""The workloads a probe times: one step per width on a model with random weights (forward, or
forward, loss and backward), and what a whole transformers Trainer step adds beyond its bare
micro-batch. A step that runs out of memory raises `Skip`, so that its width is dropped with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from tuneproof.measure.timing import Skip

if TYPE_CHECKING:
    from tuneproof.arch import ResolvedModel
    from tuneproof.measure.probe import ProbeSetup


def _is_oom(e: BaseException) -> bool:
    """MemoryError, CUDA's "out of memory", or the CPU allocator's "can't allocate memory"."""
    text = str(e).lower()
    return isinstance(e, MemoryError) or "out of memory" in text or "can't allocate memory" in text


def probe_model(model: ResolvedModel, spec: ProbeSetup) -> Any:
    """`model` with random weights as `spec` trains it: LoRA adapters, gradient checkpointing, and
    train mode unless only the forward pass is timed."""
    from tuneproof.measure.model import apply_peft, build_model

    net = build_model(model, spec.attn, device=spec.device, dtype=spec.torch_dtype, seed=spec.seed)
    if spec.mode == "lora":  # PEFT's own resolution of the run's targets: what the ledger prices
        net = apply_peft(net, spec.step(max(spec.widths)).lora)
    if spec.grad_ckpt:  # transformers 5 renamed it (the old name warns FutureWarning)
        enable = getattr(net, "activation_checkpointing_enable", None) or net.gradient_checkpointing_enable
        enable()
    net.train(spec.mode != "forward")
    return net


def width_steps(net: Any, spec: ProbeSetup, vocab: int) -> dict[int, Callable[[], None]]:
    """One step of `net` per distinct width of `spec`, on random token ids (drawn from `spec.seed`, not
    the global generator): forward only under no_grad, or forward, loss, backward and the gradients
    freed. Out of memory becomes `Skip`; any other error propagates."""
    import torch

    gen = torch.Generator().manual_seed(spec.seed)

    def make_step(width: int) -> Callable[[], None]:
        ids = torch.randint(0, vocab, (spec.batch, width), generator=gen).to(spec.device)

        def run() -> None:
            if spec.mode == "forward":
                with torch.no_grad():
                    net(input_ids=ids)
            else:
                net(input_ids=ids, labels=ids).loss.backward()
                net.zero_grad(set_to_none=True)

        def step() -> None:
            try:
                run()
            except (RuntimeError, MemoryError) as e:
                if not _is_oom(e):
                    raise
                if spec.device == "cuda":
                    torch.cuda.empty_cache()
                raise Skip(f"out of memory: {str(e).splitlines()[0][:120]}") from None

        return step

    return {w: make_step(w) for w in sorted(set(spec.widths))}


def trainer_overhead(
    net: Any, spec: ProbeSetup, vocab: int, bare: Callable[[], None], steps: int = 14
) -> tuple[float, float]:
    """What a transformers Trainer step adds beyond its bare micro-batch (collator, gradient clipping,
    AdamW, the scheduler, zero_grad, the Trainer's bookkeeping): the median whole Trainer step on
    micro-batches of the narrowest width (after two warm-up steps), minus the median of `bare` (that
    width's bare step) timed right after, so that a load on the machine hits both alike. Returns
    (overhead seconds, floored at 0; the bare step's median)."""
    import tempfile
    import time

    import torch
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from tuneproof.data.collate import PadToLongest, RowsDataset

    width = min(spec.widths)
    gen = torch.Generator().manual_seed(spec.seed)
    rows = [{"input_ids": torch.randint(1, vocab, (width,), generator=gen).tolist()}
            for _ in range(spec.batch * steps)]  # fmt: skip
    times: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
            _sync(spec.device)
            self.t0 = time.perf_counter()

        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            _sync(spec.device)
            times.append(time.perf_counter() - self.t0)

    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(
            output_dir=tmp, per_device_train_batch_size=spec.batch, max_steps=steps, learning_rate=1e-12,
            save_strategy="no", report_to=[], disable_tqdm=True, logging_strategy="no", seed=spec.seed,
            use_cpu=spec.device == "cpu", remove_unused_columns=False, log_level="error",
        )  # fmt: skip
        data = RowsDataset(rows)
        trainer = Trainer(
            model=net, args=args, train_dataset=data, data_collator=PadToLongest(0), callbacks=[Clock()]
        )
        from transformers.trainer_callback import PrinterCallback, ProgressCallback

        trainer.remove_callback(PrinterCallback)  # stdout may carry the caller's JSON
        trainer.remove_callback(ProgressCallback)
        trainer.train()
    whole = float(np.median(times[2:]))
    bare_times = []
    for _ in range(steps):
        _sync(spec.device)
        t0 = time.perf_counter()
        bare()
        _sync(spec.device)
        bare_times.append(time.perf_counter() - t0)
    bare_s = float(np.median(bare_times[2:]))
    return max(whole - bare_s, 0.0), bare_s


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()
