"""Numerics against ground truth: each attention backend in low precision vs fp32 math.

Backend-vs-backend differences cannot say which one is right (../shared/CASE.md section 5); each is
measured against the same model in fp32 with SDPA's math backend. The truth uses the very weights the
low-precision runs use (rounded to the low dtype, then held in fp32), so the distances measure the
computation, not the weight rounding. Distances: |loss - truth|, max and mean absolute error of the
logits, and of the gradients of every parameter where the backend has a backward on this device.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tuneproof.errors import TuneproofError

BACKENDS = ("sdpa", "flex_attention", "eager")
TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


@dataclass(frozen=True, slots=True)
class Diff:
    """max and mean absolute difference of two tensors (or tensor collections), in fp32."""

    max_abs: float
    mean_abs: float

    @classmethod
    def of(cls, got: Any, want: Any) -> Diff:
        d = (got.float() - want.float()).abs()
        return cls(float(d.max()), float(d.mean()))

    @classmethod
    def of_many(cls, got: dict[str, Any], want: dict[str, Any]) -> Diff:
        total, count, worst = 0.0, 0, 0.0
        for name, w in want.items():
            d = (got[name].float() - w.float()).abs()
            total += float(d.sum())
            count += d.numel()
            worst = max(worst, float(d.max()))
        return cls(worst, total / max(count, 1))


@dataclass(slots=True)
class BackendResult:
    backend: str
    width: int
    loss_diff: float
    logits: Diff
    grads: Diff | None
    grads_note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "width": self.width,
            "loss_diff": self.loss_diff,
            "logits": {"max_abs": self.logits.max_abs, "mean_abs": self.logits.mean_abs},
            "grads": None
            if self.grads is None
            else {"max_abs": self.grads.max_abs, "mean_abs": self.grads.mean_abs},
            "grads_note": self.grads_note,
        }


@dataclass(slots=True)
class Adjudication:
    dtype: str
    device: str
    results: list[BackendResult]
    notes: list[str] = field(default_factory=list)

    def closest(self, width: int) -> BackendResult:
        """Closest to fp32 truth at this width: smallest mean |logits error| (ties: smaller loss diff)."""
        rows = [r for r in self.results if r.width == width]
        return min(rows, key=lambda r: (r.logits.mean_abs, r.loss_diff))

    @property
    def widths(self) -> list[int]:
        return sorted({r.width for r in self.results})

    def verdicts(self) -> dict[int, str]:
        return {w: self.closest(w).backend for w in self.widths}

    def to_dict(self) -> dict[str, Any]:
        return {
            "dtype": self.dtype,
            "device": self.device,
            "truth": "fp32, SDPA math backend, same (rounded) weights",
            "results": [r.to_dict() for r in self.results],
            "closest_to_fp32_truth": {str(w): b for w, b in self.verdicts().items()},
            "notes": self.notes,
        }


def _run(model: Any, ids: Any, backward: bool) -> tuple[float, Any, dict[str, Any] | None]:
    import torch

    model.zero_grad(set_to_none=True)
    if backward:
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        grads = {
            n: p.grad.detach().float().clone() for n, p in model.named_parameters() if p.grad is not None
        }
        return float(out.loss), out.logits.detach().float(), grads
    with torch.no_grad():
        out = model(input_ids=ids, labels=ids)
    return float(out.loss), out.logits.float(), None


def adjudicate(
    config: str,
    widths: list[int],
    backends: list[str],
    *,
    dtype: str = "bf16",
    grads: str = "auto",
    batch: int = 1,
    device: str = "cpu",
    seed: int = 0,
) -> Adjudication:
    """Run each backend at each width in `dtype` and measure its distance to fp32 math truth."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from tuneproof.arch import resolve_text_config, tiny_config_path
    from tuneproof.model import build_model

    unknown = [b for b in backends if b not in BACKENDS]
    if unknown or not backends:
        raise TuneproofError(
            f"--backends {','.join(backends)!s}: unknown {unknown or 'none given'}",
            "use a comma list of " + ", ".join(BACKENDS),
        )
    if dtype not in TORCH_DTYPES:
        raise TuneproofError(
            f"--dtype {dtype!r} cannot be adjudicated", "use bf16 or fp16 (fp32 is the truth)"
        )
    if grads not in ("auto", "on", "off"):
        raise TuneproofError(f"--grads {grads!r} is not known", "use auto, on or off")
    if not widths or any(w <= 1 for w in widths):
        raise TuneproofError("--widths must be integers > 1", "e.g. --widths 256,1024")
    if "flex_attention" in backends:
        from tuneproof.attention.flex import require_flex

        require_flex()
        if device == "cpu" and grads == "on":
            raise TuneproofError(
                "backward requested for flex_attention on CPU: PyTorch has no flex backward on CPU",
                "use --grads auto (forward only for flex) or a CUDA device",
            )
    text = resolve_text_config(tiny_config_path() if config == "tiny" else config)
    low = getattr(torch, TORCH_DTYPES[dtype])
    reference = build_model(text, "sdpa", device=device, dtype="fp32", seed=seed)
    state = {k: v.to(low).to(torch.float32) for k, v in reference.state_dict().items()}
    reference.load_state_dict(state)
    gen = torch.Generator().manual_seed(seed + 1)
    notes: list[str] = []
    results: list[BackendResult] = []
    models = {}
    for b in backends:
        m = build_model(text, b, device=device, dtype="fp32", seed=seed)
        m.load_state_dict(state)
        models[b] = m.to(low)
    want_grads = grads != "off"
    for width in widths:
        ids = torch.randint(0, int(text.vocab_size), (batch, width), generator=gen).to(device)
        with sdpa_kernel(SDPBackend.MATH):
            t_loss, t_logits, t_grads = _run(reference, ids, backward=want_grads)
        for b in backends:
            no_bwd = b == "flex_attention" and device == "cpu"
            loss, logits, g = _run(models[b], ids, backward=want_grads and not no_bwd)
            note = "forward only: flex_attention has no backward on CPU" if (no_bwd and want_grads) else None
            gd = Diff.of_many(g, t_grads) if g is not None and t_grads is not None else None
            results.append(BackendResult(b, width, abs(loss - t_loss), Diff.of(logits, t_logits), gd, note))
    if any(r.grads_note for r in results):
        notes.append(
            "flex_attention is adjudicated on the forward only here: PyTorch has no flex backward on CPU"
        )
    return Adjudication(dtype, device, results, notes)
