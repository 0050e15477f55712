"""The pre-flight's sections, each from the library area that owns the number: the FLOP ledger at the
run's width (`tuneproof.flops`), the dispatch per layer type (`tuneproof.attention.dispatch`), flex
kernel options for the card (`attention.kernel_options`), the recompile risk from the widths the run
will produce, LoRA coverage (`preflight.coverage`), merge and quantisation notes, and, from the real
lengths of local datasets, padding and the wall-time projection (`preflight.batches`).

Every section is lines to print, a JSON-able dict and its findings (what will be slow or wrong).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from tuneproof.arch.quantization import StoredQuantisation
from tuneproof.arch.targets import LoraTargets
from tuneproof.core.errors import TuneproofError
from tuneproof.hardware.card import Card
from tuneproof.runs.axolotl import AXOLOTL_PAD_MULTIPLE
from tuneproof.runs.axolotl_packing import PackingIsolation, contamination_finding, packing_isolation
from tuneproof.runs.implementations import implementation
from tuneproof.runs.run import Run
from tuneproof.runs.step import UNKNOWN_PATH, Step

UNKNOWN_MEMORY = "what {} keeps for backward is not modelled: name a path tuneproof models to size the step"
RECOMPILE_LIMIT = 8  # torch._dynamo.config.recompile_limit's default
FLASH_ATTN_MAX_HEAD_DIM = 256  # flash-attn 2/3: csrc/flash_attn/flash_api.cpp mha_fwd


@dataclass(kw_only=True, slots=True)
class Section:
    name: str
    lines: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)


@dataclass(kw_only=True, frozen=True, slots=True)
class Priced:
    """The run's steps as the sections price them, made once before the first section: the FLOP
    ledger's (`ledger`: at the median micro-batch's width on the real lengths, or the run's width), the
    memory ledger's (`memory`: the run's width), the dispatch's (`dispatch`: padded or packed as the run
    batches; what the LoRA adapts does not change dispatch, so all-linear, which any LoRA run has);
    `fallback` the line when the LoRA is costed on all-linear; `attn` tuneproof's path and `mapped` how
    the run's implementation maps to it; `asked` the LoRA the run names, for its coverage; `iso` how
    Axolotl's packing keeps documents apart; `positions` the model's notes at the ledger's width;
    `real_width` and `padding` what the datasets' real lengths gave (None: not read, or packed)."""

    ledger: Step
    memory: Step
    dispatch: Step
    fallback: str | None
    attn: str
    mapped: str | None
    asked: LoraTargets
    iso: PackingIsolation | None
    positions: tuple[str, ...]
    real_width: int | None = None
    padding: float | None = None

    @property
    def mixed(self) -> bool:
        """Packed documents not kept apart: transformers sees rows with one causal mask each and the
        padding after their documents (a bin short of the width), never a per-document mask."""
        return self.iso is not None and not self.iso.isolated


def price(run: Run, model: Any, *, real_width: int | None = None, padding: float | None = None) -> Priced:
    """The run's steps for every section (`Priced`); `real_width` and `padding`: the median micro-batch
    on the real lengths and its padding share, when the datasets were read (and not packed). Each LoRA
    step is checked as PEFT would apply it (`tuneproof.arch.targets.check`), before any section."""
    from tuneproof.arch.targets import check

    found, iso = implementation(run.attn), packing_isolation(run)
    rows, width = run.widths()
    asked = run.step().lora if run.names_targets else LoraTargets(modules=(), rank=run.lora_r)
    mixed = iso is not None and not iso.isolated
    packed = run.packing and not mixed
    padded = (not run.packing and run.pad_to_seq_len is not True and rows > 1) or mixed
    dispatch = run.step(padded=padded and width > 1, packed=packed, targets=("all-linear",))
    ledger, fallback = _priced_step(run, model, width=real_width, padding=padding or 0.0)
    memory, _ = _priced_step(run, model)
    for step in (ledger, memory):
        check(model.shape, step.lora, step.mode)
    return Priced(
        ledger=ledger, memory=memory, dispatch=dispatch, fallback=fallback, attn=found.path,
        mapped=found.note, asked=asked, iso=iso, positions=model.positions_notes(ledger.seq_len),
        real_width=real_width, padding=padding,
    )  # fmt: skip


def _priced_step(
    run: Run, model: Any, *, width: int | None = None, padding: float = 0.0
) -> tuple[Step, str | None]:
    """The run's step as preflight prices it (the ledger's and the memory ledger's alike): at the run's
    width (or `width`, the median micro-batch on the real lengths), its LoRA as PEFT resolves it, the
    target names that match nothing left out (the LoRA section names them), and all-linear where the
    targets adapt nothing at all, said in the line returned."""
    from tuneproof.arch.targets import adaptation, unmatched

    rows, own = run.widths()
    fallback = run.step(width=width or own, rows=rows, padding=padding, targets=("all-linear",))
    line = "LoRA costed on all-linear: the run's targets adapt nothing (the LoRA section)"
    if not run.names_targets:
        return fallback, line if fallback.mode == "lora" else None
    step = run.step(width=width or own, rows=rows, padding=padding)
    if step.mode != "lora":
        return step, None
    missing = set(unmatched(model.shape, step.lora))
    if missing:
        kept = tuple(t for t in step.lora_targets if t not in missing)
        if not (kept or run.target_linear or run.target_parameters):
            return fallback, line
        step = run.step(width=width or own, rows=rows, padding=padding, targets=kept)
    if adaptation(model.shape, step.lora).any_adapted:
        return step, None
    return fallback, line


def ledger(run: Run, model: Any, priced: Priced) -> Section:
    """The ledger of one micro-batch: at the run's width, or with real lengths and no packing at the
    median micro-batch's width."""
    from tuneproof.flops import flop_report

    spec = priced.ledger
    rows, width, mode = spec.batch, spec.seq_len, spec.mode
    report = flop_report(model.shape, spec)
    report.notes.extend(priced.positions)
    d = report.to_dict()
    attn, mapped, fallback, padding = priced.attn, priced.mapped, priced.fallback, priced.padding
    intended, performed = d["intended"]["total"], d["performed"]["total"]
    s = Section(name="flops", data={"width": width, "rows": rows, "attn": attn, "mode": mode, **d})
    where = (
        f"the median micro-batch on the real lengths, {padding:.0%} padding"
        if priced.real_width
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
    if fallback:
        s.lines.append(fallback)
    for ex in d["excess"]:
        share = ex["flops"] / performed
        s.lines.append(f"excess {share:.0%} of the performed FLOPs: {ex['name']}: {ex['why']}")
        if share >= 0.05 and "checkpointing" not in ex["name"]:  # recompute is a choice, not a slow path
            s.findings.append(f"FLOPs: {share:.0%} of the step is excess work: {ex['name']}: {ex['why']}")
    return s


def dispatch(run: Run, model: Any, target: Card, priced: Priced) -> Section:
    """The backend each layer type runs on the card, as torch decides it (`tuneproof.attention.dispatch`),
    with the advice that follows."""
    from tuneproof.attention.dispatch import Context, advise, explain

    step, attn, iso, mixed = priced.dispatch, priced.attn, priced.iso, priced.mixed
    rows, width, packed = step.batch, step.seq_len, step.rows.is_packed
    s = Section(name="dispatch")
    if mixed:
        assert iso is not None
        s.lines.append(
            "sample_packing without a packing-aware attention option (the finding below): each row gets one "
            "causal mask across its documents; the mask below is the padding after them, not per document"
        )
        s.findings.append(contamination_finding(iso))
    if attn == UNKNOWN_PATH:
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
        return Context(
            step=replace(step, attn=path), card=target, dtype=run.dtype, dropout=model.attention_dropout
        )

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


def flex_options(model: Any, target: Card, gpu: str | None, run: Run) -> Section:
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


def ship(run: Run, stored: StoredQuantisation | None) -> Section:
    """What merging and serving the adapter needs: the base it merges into, the stored base's recipe."""
    s = Section(name="ship")
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


def memory(run: Run, model: Any, card: Card, priced: Priced) -> Section:
    """The memory ledger of one micro-batch at the run's width (`tuneproof memory`): the peak, where it
    falls, what a named card leaves, and a finding when it will not fit."""
    from tuneproof.memory.ledger import memory_report, plan_memory
    from tuneproof.memory.report import gib

    if priced.attn == UNKNOWN_PATH:
        s = Section(name="memory", data={"peak_bytes": None, "reason": UNKNOWN_MEMORY.format(run.attn)})
        s.lines.append("not sized: " + UNKNOWN_MEMORY.format(run.attn))
        return s
    step = priced.memory
    rows, width, mode, quant = step.batch, step.seq_len, step.mode, step.precision.quant
    unread = run.optimizer_note
    report = memory_report(plan_memory(model, step, card))
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
    if fit is None and card.capability is not None and card.name is None:
        s.lines.append(
            f"no fit: {card.capability[0]}.{card.capability[1]} is a capability, not a card with its memory "
            "(name the card)"
        )
    if fit is not None:
        s.lines.append(f"on {fit.card.name}: headroom {gib(fit.headroom)}; largest micro-batch at this width "
                       f"{fit.largest_batch or 'none'}")  # fmt: skip
        if not fit.fits:
            better = [c for c, b in fit.options if b <= fit.total]
            s.findings.append(
                f"memory: the step needs {gib(d['peak_bytes'])}, the {fit.card.name} holds "
                f"{gib(fit.total)}: out of memory" + (f"; {better[0]} would fit" if better else "")
            )
    return s
