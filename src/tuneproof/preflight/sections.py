"""The pre-flight's sections, each from the library area that owns the number: the FLOP ledger at the
run's width (`tuneproof.flops`), the dispatch per layer type (`tuneproof.attention.dispatch`), flex
kernel options for the card (`attention.kernel_options`), the recompile risk from the widths the run
will produce, LoRA coverage (`preflight.coverage`), merge and quantisation notes, and, from the real
lengths of local datasets, padding and the wall-time projection (`preflight.batches`).

Every section is lines to print, a JSON-able dict and its findings (what will be slow or wrong).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tuneproof.arch.quantization import stored_quantisation
from tuneproof.attention.paths import implementation_path
from tuneproof.attention.target import DeviceTarget
from tuneproof.core.errors import TuneproofError
from tuneproof.preflight.axolotl_packing import contamination_finding, packing_isolation
from tuneproof.runs.axolotl import AXOLOTL_PAD_MULTIPLE
from tuneproof.runs.run import Run

RECOMPILE_LIMIT = 8  # torch._dynamo.config.recompile_limit's default
FLASH_ATTN_MAX_HEAD_DIM = 256  # flash-attn 2/3: csrc/flash_attn/flash_api.cpp mha_fwd


@dataclass(kw_only=True, slots=True)
class Section:
    name: str
    lines: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)


def path_of(run: Run) -> tuple[str, str | None]:
    """tuneproof's attention path for the run's implementation, and how it was mapped (None: as is)."""
    return implementation_path(run.attn)


def widths(run: Run) -> tuple[int, int]:
    """(rows, width) of one micro-batch as the trainer builds it."""
    if run.packs_rows:
        return 1, run.micro_batch * run.seq_len
    return run.micro_batch, run.seq_len


def ledger(run: Run, model: Any, padding: float | None, real_width: int | None, cov: Any) -> Section:
    """The ledger of one micro-batch: at the run's width, or with real lengths and no packing at the
    median micro-batch's width; LoRA on the leaf names the targets really adapt (`cov`)."""
    from tuneproof.flops import flop_report
    from tuneproof.flops.report import positions_notes
    from tuneproof.runs.step import RunSpec

    rows, width = widths(run)
    if real_width is not None:
        width = real_width
    attn, mapped = path_of(run)
    mode = "lora" if run.adapter else "full"
    targets: tuple[str, ...] = ("all-linear",)
    unmatched = mode == "lora" and cov is not None and not cov.families and not cov.experts_adapted
    if mode == "lora" and cov is not None and not unmatched:
        targets = tuple(sorted(cov.families))  # () with expert parameters only
    spec = RunSpec(
        seq_len=width, batch=rows, attn=attn, padding_fraction=padding or 0.0, mode=mode,
        lora_rank=run.lora_r, lora_targets=targets,
        lora_target_parameters=run.target_parameters if mode == "lora" else (), grad_ckpt=run.grad_ckpt,
    )  # fmt: skip
    report = flop_report(model.shape, spec)
    report.notes.extend(positions_notes(model, spec.seq_len))
    d = report.to_dict()
    intended, performed = d["intended"]["total"], d["performed"]["total"]
    s = Section(name="flops", data={"width": width, "rows": rows, "attn": attn, "mode": mode, **d})
    where = (
        f"the median micro-batch on the real lengths, {padding:.0%} padding"
        if real_width
        else "the run's width"
    )
    offload = "activation offloading" + ("" if run.offload in (None, "True") else f" ({run.offload})")
    extras = [x for x, on in (("checkpointing", run.grad_ckpt), (offload, run.offload)) if on]
    s.lines.append(
        f"{rows} x {width} tokens per micro-batch ({where}), {mode}{''.join(', ' + x for x in extras)}: "
        f"intended {intended / 1e12:,.1f} TFLOP, performed {performed / 1e12:,.1f} TFLOP "
        f"({performed / intended:.2f}x)"
    )
    if mapped:
        s.lines.append(mapped)
    if unmatched:
        s.lines.append("LoRA costed on all-linear: the run's targets adapt nothing (the LoRA section)")
    for ex in d["excess"]:
        share = ex["flops"] / performed
        s.lines.append(f"excess {share:.0%} of the performed FLOPs: {ex['name']}: {ex['why']}")
        if share >= 0.05 and "checkpointing" not in ex["name"]:  # recompute is a choice, not a slow path
            s.findings.append(f"FLOPs: {share:.0%} of the step is excess work: {ex['name']}: {ex['why']}")
    return s


def dispatch(run: Run, model: Any, target: DeviceTarget) -> Section:
    from tuneproof.attention.dispatch import Context, advise, explain

    rows, width = widths(run)
    attn, mapped = path_of(run)
    iso = packing_isolation(run)
    # packed documents not kept apart: transformers sees rows with one causal mask each and the padding
    # after their documents (a bin short of the width), never a per-document mask
    mixed = iso is not None and not iso.isolated
    packed = run.packing and not mixed
    padded = (not run.packing and run.pad_to_seq_len is not True and rows > 1) or mixed
    s = Section(name="dispatch")
    if mixed:
        assert iso is not None
        s.lines.append(
            "sample_packing without a packing-aware attention option (the finding below): each row gets one "
            "causal mask across its documents; the mask below is the padding after them, not per document"
        )
        s.findings.append(contamination_finding(iso))
    if mapped and "not modelled" in mapped:
        s.lines.append(f"dispatch unknown: {run.attn} is not modelled here (no per-layer backend to name)")
        s.data = {"layers": [], "advice": [], "attn": run.attn,
                  "packing": iso.to_dict() if iso else None}  # fmt: skip
        return s
    capability = target.capability
    if capability is None:
        s.lines.append(
            "no card given (gpu): the dispatch below is this machine's CPU; pass the card for its own"
        )

    def ctx(path: str) -> Context:
        return Context(seq_len=width, batch=rows, attn=path, padded=padded, packed=packed,
                       dtype=run.dtype, training=True, capability=capability, smem_limit=target.smem_limit,
                       smem_source=target.smem_source, dropout=model.attention_dropout,
                       compiled=run.torch_compile)  # fmt: skip

    sliding = any(x.attention.kind == "sliding" for x in model.shape.layers)
    if run.hybrid and not sliding:
        s.findings.append(
            "attention: gemma4_hybrid_attn_impl splits sliding from global layers, and this model has no "
            "sliding layers: every layer stays on flash_attention_2"
        )
    if run.hybrid and sliding:  # Axolotl's Gemma-4 hybrid: sliding layers on flash, the rest on SDPA
        fast, slow = explain(model.shape, ctx("flash_attention_2")), explain(model.shape, ctx("sdpa"))
        layers = [x for x in fast.layers if "sliding" in x.layer_type] + [
            x for x in slow.layers if "sliding" not in x.layer_type
        ]
        advice = advise(model.shape, ctx("sdpa"), layers)
        s.lines.append(
            "gemma4_hybrid_attn_impl: sliding layers on flash_attention_2, every other layer on SDPA "
            "(Axolotl's sdpa_global_packed; with packing it rebuilds a block-diagonal mask from position_ids)"
        )
    else:
        e = explain(model.shape, ctx(attn))
        layers, advice = e.layers, e.advice
        s.lines.extend(e.notes)
    for x in layers:
        mask = "materialised" if x.mask_materialised else "none"
        s.lines.append(
            f"{x.layer_type} layers ({x.num_layers}): head_dim {x.head_dim}, mask {mask}"
            f"{' (' + x.mask_reason + ')' if x.mask_materialised else ''}; {x.backend}: {x.kernel}"
        )
        for name, why in x.refused.items():
            s.lines.append(f"  {name} refused: {why}")
    if attn == "flash_attention_2":  # the flash-attn package, not SDPA's own flash backend
        wide = [x for x in layers if x.head_dim > FLASH_ATTN_MAX_HEAD_DIM and "flash" in x.backend]
        for x in wide:
            s.findings.append(
                f"attention: the {x.num_layers} {x.layer_type} layers have head_dim {x.head_dim}, past "
                f"flash-attn's {FLASH_ATTN_MAX_HEAD_DIM} (flash_api.cpp: 'FlashAttention forward only "
                "supports head dimension at most 256'): the run fails there; keep flash on the narrower "
                "layers (gemma4_hybrid_attn_impl) or use sdpa or flex_attention"
            )
    s.data = {"rows": rows, "width": width, "packed": packed, "layers": [x.to_dict() for x in layers],
              "advice": advice, "packing": iso.to_dict() if iso else None}  # fmt: skip
    s.findings.extend(f"attention: {a}" for a in advice)
    return s


def flex_options(model: Any, target: DeviceTarget, gpu: str | None, run: Run) -> Section:
    from tuneproof.attention.kernel_measure import best_choice

    s = Section(name="flex")
    dims = sorted(
        {
            x.attention.head_dim
            for x in model.shape.layers
            if x.attention.kind in ("full", "sliding", "chunked")
        }
    )
    capability = target.capability
    if capability is None or not dims:
        s.lines.append("no card named: flex kernel options depend on its shared memory per block")
        s.data = {"capability": None}
        return s
    for pass_ in ("fwd", "bwd"):
        try:
            choice = best_choice(dims, run.dtype, capability, pass_, smem_limit_bytes=target.smem_limit)
        except TuneproofError as e:  # no block size fits this card
            s.lines.append(f"{pass_}: flex_attention cannot run on this card: {e.message}")
            # a run on flex is a finding already: the dispatch section's advice says flex cannot run here
            s.data[pass_] = {"options": None, "reason": e.message, "smem_bytes": None,
                             "smem_limit": target.smem_limit, "source": "estimated"}  # fmt: skip
            continue
        shown = choice.options or "{} (torch's defaults)"
        s.lines.append(f"{pass_}: kernel_options {shown} ({choice.source}): {choice.reason}")
        s.data[pass_] = {"options": choice.options, "reason": choice.reason, "smem_bytes": choice.smem_bytes,
                         "smem_limit": choice.smem_limit, "source": choice.source}  # fmt: skip
    if target.limit_note:
        s.lines.insert(0, target.limit_note)
    s.data["capability"] = list(capability)
    s.data["gpu"] = gpu
    s.data["smem_limit"], s.data["smem_source"] = target.smem_limit, target.smem_source
    return s


def recompiles(run: Run, widths_seen: int | None) -> Section:
    """How many distinct widths the run will produce, against dynamo's recompile limit."""
    s = Section(name="recompile")
    attn = run.attn or ""
    if run.packing or run.pad_to_seq_len is True:
        n, why = 1, "packing or pad_to_sequence_len: every row has one width"
    elif widths_seen is not None:
        n, why = widths_seen, "distinct micro-batch widths on the real lengths"
    elif run.pad_to_seq_len is None:
        n = math.ceil(run.seq_len / AXOLOTL_PAD_MULTIPLE)
        why = f"rows padded to a multiple of {AXOLOTL_PAD_MULTIPLE} up to {run.seq_len}: up to {n} widths"
    else:
        n, why = run.seq_len, "rows padded to their longest: any width"
    compiled = run.torch_compile or attn == "flex_attention"
    s.data = {"widths": n, "why": why, "compiled": compiled, "limit": RECOMPILE_LIMIT}
    s.lines.append(f"{n} distinct width{'s' * (n != 1)} ({why})")
    if compiled and n > RECOMPILE_LIMIT:
        what = (
            "flex_attention compiles per width"
            if attn == "flex_attention"
            else "torch_compile compiles per width"
        )
        s.findings.append(
            f"recompiles: {what}; {n} widths pass dynamo's recompile_limit of {RECOMPILE_LIMIT}, after which "
            "it runs the rest uncompiled (eager flex materialises the full score matrix): pad to fewer "
            "widths or pack"
        )
    return s


def ship(run: Run, config: dict[str, Any]) -> Section:
    s = Section(name="ship")
    stored = stored_quantisation(config)
    if run.adapter == "qlora" or run.load_in_4bit:
        s.lines.append(
            "a QLoRA adapter trains against 4-bit weights: merge it into the bf16 base it was quantised from "
            "(tuneproof merge checks the base's identity), not into the 4-bit weights"
        )
    if run.load_in_8bit:
        s.lines.append("8-bit base: merge into the bf16 base, as for QLoRA")
    if stored is not None:
        s.lines.append(
            f"the base is stored quantised ({stored.method or 'no quant_method'}): check the serving "
            "recipe's coverage with tuneproof quant-audit before shipping; an adapter merges into the "
            "dequantised weights"
        )
        s.data["base_quantization"] = stored.method or "unknown"
    if run.fused_loss:
        s.lines.append(f"loss: {run.fused_loss}: the ledger's LM-head row is the plain matmul either way")
    s.data["adapter"] = run.adapter
    return s


def memory(run: Run, model: Any, gpu: str | None, target: Any, cov: Any) -> Section:
    """The memory ledger of one micro-batch at the run's width (`tuneproof memory`): the peak, where it
    falls, what a named card leaves, and a finding when it will not fit."""
    from tuneproof.memory.ledger import MemorySpec, memory_report, plan_memory
    from tuneproof.memory.report import gib
    from tuneproof.memory.step import Precision, Training
    from tuneproof.runs.step import RunSpec

    rows, width = widths(run)
    attn, _ = path_of(run)
    mode = "lora" if run.adapter else "full"
    targets = (
        tuple(sorted(cov.families))
        if mode == "lora" and cov is not None and cov.families
        else ("all-linear",)
    )
    step = RunSpec(
        seq_len=width, batch=rows, attn=attn, mode=mode, lora_rank=run.lora_r, lora_targets=targets,
        lora_target_parameters=run.target_parameters if mode == "lora" else (), grad_ckpt=run.grad_ckpt,
    )  # fmt: skip
    quant = (
        "4bit-dq" if (run.load_in_4bit or run.adapter == "qlora") else "8bit" if run.load_in_8bit else None
    )
    precision = Precision(
        dtype=run.dtype, autocast=run.dtype if run.dtype != "fp32" else None, quant=quant,
        quant_experts=run.quantize_experts and quant is not None,
    )  # fmt: skip
    optimizer, impl, unread = _optimizer(run.optimizer)
    training = Training(grad_accum=max(run.grad_accum, 1), optimizer=optimizer, optimizer_impl=impl)
    from tuneproof.attention.target import CAPABILITY_TEXT

    card = None if gpu is None or CAPABILITY_TEXT.fullmatch(gpu) else gpu  # a capability names no memory
    spec = MemorySpec(
        model=model, run=step, precision=precision, training=training, gpu=card, capability=target.capability
    )
    report = memory_report(plan_memory(spec))
    d = report.to_dict()
    s = Section(name="memory", data=d)
    s.lines.append(
        f"peak {gib(d['peak_bytes'])} at {d['peak_where']} ({rows} x {width}, {mode}, weights {run.dtype}"
        + (f" {quant}" if quant else "") + (", checkpointing" if run.grad_ckpt else "") + ")"
    )  # fmt: skip
    for e in report.excess:
        s.lines.append(f"excess {gib(e.nbytes)}: {e.name}: {e.why}")
    if unread:
        s.lines.append(unread)
    if run.fused_loss:
        s.lines.append(
            f"{run.fused_loss} never makes the B x T x V logits: the loss's share is counted as unfused"
        )
    fit = report.fit
    if fit is None and gpu is not None:
        s.lines.append(f"no fit: {gpu} is a capability, not a card with its memory (name the card)")
    if fit is not None:
        s.lines.append(f"on {fit.card.name}: headroom {gib(fit.headroom)}; largest micro-batch at this width "
                       f"{fit.largest_batch or 'none'}")  # fmt: skip
        if not fit.fits:
            better = [c for c, b in fit.options if b <= fit.card.total_bytes]
            s.findings.append(
                f"memory: the step needs {gib(d['peak_bytes'])}, the {fit.card.name} holds "
                f"{gib(fit.card.total_bytes)}: out of memory" + (f"; {better[0]} would fit" if better else "")
            )
    return s


def _optimizer(name: str | None) -> tuple[str, str, str | None]:
    """The run's optimizer as the memory ledger sizes it: (optimizer, torch implementation, a line
    when the name is not one it sizes). Transformers' names: adamw_torch_fused (its default),
    adamw_torch (foreach on CUDA), the 8-bit AdamWs of bitsandbytes and torchao, sgd."""
    if name is None or name == "adamw_torch_fused":
        return "adamw", "fused", None
    if "8bit" in name and "adam" in name:
        return "adamw_8bit", "fused", None
    if name in ("adamw_torch", "adamw_hf", "adamw"):
        return "adamw", "foreach", None
    if name == "sgd":
        return "sgd", "fused", None
    return "adamw", "fused", f"optimizer {name} is not one the ledger sizes: its states are sized as AdamW's"
