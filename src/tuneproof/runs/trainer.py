"""A run read from a live model and a Trainer's arguments, as `TuneproofCallback` finds it at train begin:
the LoRA the PEFT wrappers really hold (never the pattern asked for: PEFT's all-linear on a MoE adds expert
and router target parameters, its rank_pattern other ranks), activation checkpointing, torch.compile, the
attention implementation in use, the dtype the weights are in, and the optimizer and accumulation of the
Trainer's arguments. `from_trainer(model, args)` gives the `Run`; what a step of it prices is `Run.step()`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from tuneproof.core.dtypes import LOW_PRECISION, short_name
from tuneproof.runs.run import Run, TokenEdits, ledger_optimizer
from tuneproof.runs.step import Precision, Training


@dataclass(kw_only=True, frozen=True, slots=True)
class Adapters:
    """The adapters a PEFT model really holds, as paths inside a layer: the most common rank, the
    nn.Linear targets, the target parameters (fused experts, 2-D weights such as a router's), the
    paths whose rank differs from the common one, and the modules saved whole (modules_to_save)."""

    rank: int | None
    targets: tuple[str, ...]
    parameters: tuple[str, ...]
    ranks: tuple[tuple[str, int], ...] = ()
    saved: tuple[str, ...] = ()


def from_trainer(model: Any, args: Any) -> Run:
    """The run of `model` (a PEFT model or a plain one) under the Trainer's `args` (TrainingArguments, or
    None); its width is set per micro-batch (`Run.step(width=...)`)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    notes: list[str] = []
    adapters = lora_of(model, notes)
    trains = any(p.requires_grad for p in model.parameters())
    mode = "lora" if adapters.targets or adapters.parameters else ("full" if trains else "forward")
    first = next(base.parameters())
    named = short_name(first.dtype)  # the dispatch rules know bf16, fp16 and fp32: else explained as fp32
    autocast = "bf16" if getattr(args, "bf16", False) else "fp16" if getattr(args, "fp16", False) else None
    dtype = named if named in LOW_PRECISION else "fp32"
    accumulation = max(int(getattr(args, "gradient_accumulation_steps", 1) or 1), 1)
    optim = getattr(args, "optim", "adamw_torch_fused")  # transformers' OptimizerNames: a str enum
    name = str(getattr(optim, "value", optim))
    optimizer, impl, unsized = ledger_optimizer(name)
    if unsized:
        notes.append(unsized)
    return Run(
        source="the Trainer's model",
        kind="trainer",
        base_model=str(getattr(base.config, "_name_or_path", "") or "the model"),
        seq_len=1,
        micro_batch=1,
        grad_accum=accumulation,
        attn=getattr(base.config, "_attn_implementation", None),
        grad_ckpt=bool(_checkpointing(base) or getattr(args, "gradient_checkpointing", False)),
        mode=mode,
        adapter="lora" if mode == "lora" else None,
        lora_r=adapters.rank or 16,
        targets=adapters.targets or (() if adapters.parameters else ("all-linear",)),
        target_parameters=adapters.parameters,
        lora_ranks=adapters.ranks if mode == "lora" else (),
        tokens=TokenEdits(modules_to_save=adapters.saved if mode == "lora" else ()),
        optimizer=name,
        torch_compile=_compiled(model, args),
        dtype=dtype,
        precision=Precision(dtype=dtype, autocast=autocast),
        training=Training(optimizer=optimizer, optimizer_impl=impl, grad_accum=accumulation),
        notes=tuple(notes),
    )


def _compiled(model: Any, args: Any) -> bool:
    """The Trainer compiles the model (`torch_compile=True`), or it arrived compiled: transformers then
    builds a mask for every SDPA layer (attention.paths MASK_SOURCES["compiled"])."""
    if getattr(args, "torch_compile", False):
        return True
    return any(hasattr(m, "_orig_mod") for m in (model, getattr(model, "base_model", None)) if m is not None)


def _checkpointing(base: Any) -> bool:
    """transformers 5 names it is_activation_checkpointing (is_gradient_checkpointing warns)."""
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(base), name):
            return bool(getattr(base, name))
    return False


def lora_of(model: Any, notes: list[str] | None = None) -> Adapters:
    """Walk the wrapped model: every LoRA module PEFT created, each with its active adapter's rank, and
    PEFT's ModulesToSaveWrapper copies."""
    try:
        from peft.tuners.lora import LoraLayer, ParamWrapper
        from peft.utils import ModulesToSaveWrapper
    except ImportError:
        return Adapters(rank=None, targets=(), parameters=())

    found: dict[str, set[int]] = {}  # path inside a layer (or outside: lm_head) -> ranks seen
    targets: set[str] = set()
    parameters: set[str] = set()
    saved: set[str] = set()
    for name, module in model.named_modules():
        if isinstance(module, ModulesToSaveWrapper):
            saved.add(_inside_layer(name) or name.rpartition(".")[2])
            continue
        if not isinstance(module, LoraLayer) or not module.r:
            continue
        active = [a for a in _active(module) if module.r.get(a)]
        path = _inside_layer(name)
        if not active or not path:
            continue
        if isinstance(module, ParamWrapper):
            path = f"{path}.{module.parameter_name}" if path else module.parameter_name
            parameters.add(path)
        else:
            targets.add(path)
        found.setdefault(path, set()).update(module.r[a] for a in active)
    if not found:
        return Adapters(rank=None, targets=(), parameters=(), saved=tuple(sorted(saved)))
    per_path = {path: max(r) for path, r in found.items()}
    counts = Counter(per_path.values())
    rank = max(counts, key=lambda r: (counts[r], r))
    uneven = sorted(path for path, r in found.items() if len(r) > 1)
    if uneven and notes is not None:
        notes.append(
            f"adapters of several ranks at the same place in different layers ({', '.join(uneven)}): FLOPs "
            "use the largest there"
        )
    ranks = tuple(sorted((path, r) for path, r in per_path.items() if r != rank))
    return Adapters(
        rank=rank,
        targets=tuple(sorted(targets)),
        parameters=tuple(sorted(parameters)),
        ranks=ranks,
        saved=tuple(sorted(saved)),
    )


def _inside_layer(name: str) -> str:
    """A module's path inside its decoder layer (`self_attn.q_proj`), PEFT's wrappers left out; a
    module outside the layers (lm_head, embed_tokens) by its last name; "" for the model itself."""
    parts = [p for p in name.split(".") if p not in ("base_layer", "modules_to_save", "original_module")]
    if "layers" in parts:
        i = parts.index("layers")
        return ".".join(parts[i + 2 :])
    return parts[-1] if parts and parts[-1] not in ("model", "base_model") else ""


def _active(module: Any) -> list[str]:
    active = getattr(module, "active_adapters", None) or getattr(module, "active_adapter", None)
    return [active] if isinstance(active, str) else list(active or module.r)
