"""The performed ledger (eager attention, eager experts) against FlopCounterMode for any model_type:
a tiny config from the type's own config class (`tiny_models.shrunk_config`), built with random
weights, one step per mode.

Run as a script for the whole table: `python tests/family_parity.py [model_type ...]`.

Two adjustments, both FlopCounterMode's and both named where they apply:
- PEFT converts target_modules of some MoE families (peft/utils/transformers_weight_conversion.py
  `_convert_peft_config_moe`: a v4 expert name such as `mlp.down_proj` also targets the fused
  experts, at rank 2r on gate_up_proj); when it does, the run targets around those names.
- FlopCounterMode counts a grouped convolution's weight gradient as if it were dense (C times a
  depthwise conv's); convolution backward is left out on both sides, its forward kept.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

# v4 per-expert names PEFT's MoE conversion maps to fused target_parameters (with rank 2r on
# gate_up_proj; `gate` to the router's weight): dense MLPs of the same name trigger it; the parity
# run leaves them out.
_CONVERTED = {"gate_proj", "up_proj", "down_proj", "w1", "w2", "w3", "gate"}
MODES = (("forward", False), ("full", False), ("lora", False), ("lora", True))
TOL = 0.005
BATCH, WIDTH, RANK = 2, 37, 4


@dataclass
class Outcome:
    model_type: str
    ratios: dict[str, float]
    refused: str | None = None  # tuneproof's refusal
    skipped: dict[str, str] | None = None  # mode -> why transformers cannot run it

    @property
    def exact(self) -> bool:
        return (
            self.refused is None and bool(self.ratios) and all(abs(r - 1) < TOL for r in self.ratios.values())
        )


def _counted(model: Any, mode: str, ckpt: bool, targets: list[str]) -> tuple[float, float, tuple[str, ...]]:
    """(FlopCounterMode total without convolution backward, that backward, PEFT's target_parameters)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    params: tuple[str, ...] = ()
    if mode == "lora":
        from tuneproof.measure.model import apply_lora

        model = apply_lora(model, targets, RANK)
        params = tuple(sorted(model.peft_config["default"].target_parameters or ()))
    if ckpt:
        model.gradient_checkpointing_enable()
        model.train()
    ids = torch.randint(0, 200, (BATCH, WIDTH), generator=torch.Generator().manual_seed(1))
    counter = FlopCounterMode(display=False)
    if mode == "forward":
        # frozen too: under no_grad a view of a trainable weight requires grad with no grad_fn, and
        # torch's ModuleTracker (inside FlopCounterMode) raises on one passed to a module (DBRX's
        # experts slice their stacked weights in forward); the forward's FLOPs are the same
        model.requires_grad_(False)
        with torch.no_grad(), counter:
            model(input_ids=ids)
    else:
        with counter:
            model(input_ids=ids, labels=ids).loss.backward()
    ops = {str(k): v for k, v in counter.get_flop_counts()["Global"].items()}
    conv_back = float(ops.pop("aten.convolution_backward", 0))
    return float(sum(ops.values())), conv_back, params


def parity(model_type: str) -> Outcome:
    import warnings

    from tiny_models import shrunk_config
    from tuneproof.arch import resolve
    from tuneproof.arch.coverage import refusal
    from tuneproof.core.errors import TuneproofError
    from tuneproof.flops import Step, flop_report
    from tuneproof.measure.model import build_model, lora_targets

    warnings.filterwarnings("ignore")
    if (why := refusal(model_type)) is not None:  # refused by type, before any tiny config is built
        return Outcome(model_type, {}, refused=why)
    try:
        model = resolve(shrunk_config(model_type))
    except TuneproofError as e:
        return Outcome(model_type, {}, refused=e.message)
    targets = lora_targets(model.shape)  # without the modules PEFT refuses on Mamba models
    ratios: dict[str, float] = {}
    skipped: dict[str, str] = {}
    for mode, ckpt in MODES:
        name = mode + ("+ckpt" if ckpt else "")
        if ckpt and not model.shape.checkpointing:
            skipped[name] = "the model class does not support gradient checkpointing"
            continue
        built = build_model(model, "eager", eager_experts=True)
        counted, _, params = _counted(built, mode, ckpt, targets)
        if params:  # PEFT's MoE conversion (with its own rank_pattern): target around it
            targets = [t for t in targets if t.rpartition(".")[2] not in _CONVERTED]
            built = build_model(model, "eager", eager_experts=True)
            counted, _, params = _counted(built, mode, ckpt, targets)
        run = Step(
            seq_len=WIDTH, batch=BATCH, attn="eager", mode=mode, lora_rank=RANK, grad_ckpt=ckpt,
            lora_targets=tuple(targets) or ("all-linear",), lora_target_parameters=params,
        )  # fmt: skip
        ledger = flop_report(model.shape, run).performed
        ours = ledger.total - sum(
            r.flops for r in ledger.rows if r.component == "linear_attention.conv" and r.pass_ == "backward"
        )
        ratios[name] = ours / counted
    return Outcome(model_type, ratios, skipped=skipped or None)


# Types whose tiny build this harness cannot make, so their ledger is read but not verified here.
UNVERIFIED: dict[str, str] = {}

DOC_HEAD = """# Model families

tuneproof reads a model's shape from the module tree transformers builds for its config on the meta
device (no weights): every `nn.Linear`, fused 3-D expert parameters and their routing, embeddings and
head, and each layer's attention or mixer kind (`tuneproof.arch.construct`). A family needs no code
unless it brings a new kind of mixer. Eleven families keep hand-written readers (the family table,
`tuneproof.arch.families`).

`tests/flops/test_counter_parity.py` enumerates every causal-LM model type of the installed transformers
({version}) and checks, on a tiny build from each type's own config class, that the performed ledger
for `--attn eager` equals torch's `FlopCounterMode` (experts eager) for a forward, a full fine-tune,
LoRA, and LoRA with gradient checkpointing, within 0.5 %. This page is generated from
`tuneproof.arch.coverage` by `python tests/family_parity.py --markdown`; a test keeps it current.
"""


def markdown() -> str:
    """docs/families.md: costed types, refused types with their reasons, unverified types."""
    import transformers

    from tuneproof.arch.coverage import NOT_COSTED, OUT_OF_SCOPE

    types = causal_lm_types()
    costed = [t for t in types if t not in OUT_OF_SCOPE and t not in NOT_COSTED]
    decoders = [t for t in types if t not in OUT_OF_SCOPE]
    verified = [t for t in costed if t not in UNVERIFIED]
    lines = [DOC_HEAD.format(version=transformers.__version__)]
    lines.append(
        f"Of {len(types)} causal-LM types, {len(OUT_OF_SCOPE)} are not text decoders; of the "
        f"{len(decoders)} text decoders, {len(costed)} ({100 * len(costed) / len(decoders):.0f} %) are "
        f"costed and {len(verified)} of those verified exactly; {len(NOT_COSTED)} are refused with the "
        "reason below.\n"
    )
    lines.append("## Costed\n")
    lines.append(", ".join(f"`{t}`" for t in verified) + "\n")
    if UNVERIFIED:
        lines.append("## Costed, not verified by the parity test\n")
        lines += [f"- `{t}`: {UNVERIFIED[t]}" for t in sorted(UNVERIFIED)] + [""]
    lines.append("## Text decoders refused: a mixer or block tuneproof does not cost yet\n")
    lines += [f"- `{t}`: {NOT_COSTED[t]}" for t in sorted(NOT_COSTED)] + [""]
    lines.append("## Out of scope: not text decoders\n")
    lines += [f"- `{t}`: {OUT_OF_SCOPE[t]}" for t in sorted(OUT_OF_SCOPE)]
    return "\n".join(lines) + "\n"


def causal_lm_types() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


if __name__ == "__main__":
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    if sys.argv[1:] == ["--markdown"]:
        from pathlib import Path

        Path(__file__).resolve().parents[1].joinpath("docs", "families.md").write_text(markdown())
        sys.exit(0)
    for mt in sys.argv[1:] or causal_lm_types():
        try:
            o = parity(mt)
        except Exception as e:  # a script run lists everything; the test fails on these
            print(f"{mt:26s} HARNESS {type(e).__name__}: {str(e).splitlines()[0][:110] if str(e) else ''}")
            continue
        if o.refused:
            print(f"{mt:26s} refused: {o.refused[:120]}")
        else:
            flag = "exact" if o.exact else "DIFF "
            print(
                f"{mt:26s} {flag} " + " ".join(f"{k}={v:.4f}" for k, v in o.ratios.items()), o.skipped or ""
            )
        sys.stdout.flush()
