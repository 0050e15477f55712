"""LoRA coverage before launch: which modules a run's targets adapt in the model the trainer loads
(AutoModelForCausalLM of the published config, vision and audio towers included), with what share of
the parameters, and which routed experts are left out.

Matching follows the trainer: a list of names matches a module whose full name equals one or ends with
"." + one (PEFT target_modules); a string is a regex that must match the whole name (PEFT and Axolotl:
re.fullmatch); Axolotl's lora_target_linear adds the last name part of every nn.Linear but the output
embedding (axolotl/loaders/adapter.py find_all_linear_names). target_parameters name 3-D expert
parameters the same way.

The module inventory (names, shapes, parameter counts) comes from the model built on the meta device
and is cached per config, beside the shape cache.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass
from typing import Any

from tuneproof.arch.targets import peft_matches
from tuneproof.runs.run import Run

TOWERS = (
    "vision",
    "audio",
    "visual",
    "image",
    "speech",
    "multi_modal_projector",
    "embed_vision",
    "embed_audio",
)


@dataclass(frozen=True, slots=True)
class Inventory:
    linears: tuple[tuple[str, int, int], ...]  # (full name, in_features, out_features)
    experts: tuple[tuple[str, int], ...]  # 3-D parameters (routed experts): (full name, numel)
    total_params: int


@dataclass(kw_only=True, slots=True)
class Coverage:
    adapted: list[str]
    families: dict[str, int]  # leaf name -> modules adapted
    towers: int  # adapted modules in vision/audio towers
    adapter_params: int
    total_params: int
    experts_adapted: list[str]
    experts_left: int  # expert parameters no target reaches
    expert_params: int
    findings: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "modules_adapted": len(self.adapted),
            "families": self.families,
            "tower_modules_adapted": self.towers,
            "adapter_params": self.adapter_params,
            "total_params": self.total_params,
            "adapter_share": self.adapter_params / self.total_params if self.total_params else None,
            "expert_parameters_adapted": self.experts_adapted,
            "expert_parameters_left_out": self.experts_left,
            "expert_share_of_params": self.expert_params / self.total_params if self.total_params else None,
        }


def inventory(config: dict[str, Any]) -> Inventory:
    """The model's nn.Linear modules and 3-D parameters, from the cache or a meta-device build."""
    from tuneproof.arch import cache

    key = cache.key_for(config)
    path = cache.entry_path(key).with_name(f"modules-{key[:32]}.json") if key else None
    if path is not None and path.is_file():
        try:
            raw = json.loads(path.read_text())
            return Inventory(
                tuple(map(tuple, raw["linears"])), tuple(map(tuple, raw["experts"])), raw["total"]
            )
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a damaged entry is a miss
    inv = _build(config)
    if path is not None:
        from tuneproof.core.io import atomic_write_bytes

        body = {"linears": inv.linears, "experts": inv.experts, "total": inv.total_params}
        with contextlib.suppress(Exception):  # an unwritable cache costs the next run its speed only
            atomic_write_bytes(path, json.dumps(body).encode())
    return inv


def _build(config: dict[str, Any]) -> Inventory:
    import torch
    from transformers import AutoConfig

    from tuneproof.arch.construct import meta_model

    data = {k: v for k, v in config.items() if k != "quantization_config"}  # the layout, not the storage
    cfg = AutoConfig.for_model(**data)
    model = meta_model(cfg)
    linears = tuple(
        (name, int(m.in_features), int(m.out_features))
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Linear)
    )
    experts = tuple(
        (name, int(p.numel())) for name, p in model.named_parameters() if p.dim() == 3 and "expert" in name
    )  # routed experts' fused weights (a conv1d's 3-D weight is no expert)
    total = sum(int(p.numel()) for p in model.parameters())
    return Inventory(linears, experts, total)


def _suffix(name: str, targets: tuple[str, ...]) -> bool:
    return peft_matches(name, targets)


def coverage(run: Run, inv: Inventory) -> Coverage:
    """What the run's targets adapt in `inv`, and the findings: no module adapted, towers adapted by a
    broad target, routed experts left out."""
    targets = run.targets
    if run.target_linear:
        names = {n.rpartition(".")[2] for n, _, _ in inv.linears if n.rpartition(".")[2] != "lm_head"}
        targets = (*targets, *sorted(names))
    pattern = re.compile(run.target_regex) if run.target_regex else None
    adapted = [
        (n, i, o)
        for n, i, o in inv.linears
        if n.rpartition(".")[2] != "lm_head" and (_suffix(n, targets) or (pattern and pattern.fullmatch(n)))
    ]
    families: dict[str, int] = {}
    for n, _, _ in adapted:
        families[n.rpartition(".")[2]] = families.get(n.rpartition(".")[2], 0) + 1
    towers = sum(1 for n, _, _ in adapted if any(t in n for t in TOWERS))
    experts_hit = [n for n, _ in inv.experts if _suffix(n, run.target_parameters)]
    expert_params = sum(k for _, k in inv.experts)
    params = sum(run.lora_r * (i + o) for _, i, o in adapted)
    cov = Coverage(
        adapted=[n for n, _, _ in adapted], families=families, towers=towers, adapter_params=params,
        total_params=inv.total_params, experts_adapted=experts_hit,
        experts_left=len(inv.experts) - len(experts_hit), expert_params=expert_params, findings=[],
    )  # fmt: skip
    _findings(run, inv, cov)
    return cov


def _findings(run: Run, inv: Inventory, cov: Coverage) -> None:
    names = [n for n, _, _ in inv.linears]
    missing = [t for t in run.targets if not any(peft_matches(n, (t,)) for n in names)]
    if missing and (cov.adapted or cov.experts_adapted):
        cov.findings.append(f"LoRA: target(s) {', '.join(missing)} match no module of this model")
    if not cov.adapted and not cov.experts_adapted:
        what = (
            f"the regex {run.target_regex!r}" if run.target_regex else f"the target list {list(run.targets)}"
        )
        cov.findings.append(f"LoRA: {what} adapts no module of this model: the adapter would train nothing")
    if cov.towers and (run.target_linear or not run.target_regex):
        cov.findings.append(
            f"LoRA: {cov.towers} of the {len(cov.adapted)} adapted modules sit in the vision/audio towers "
            "(a name-based target reaches them too; a regex on the text layers keeps them out)"
        )
    left = [n for n, _ in inv.experts if n not in cov.experts_adapted and not any(t in n for t in TOWERS)]
    if left and cov.expert_params and not cov.experts_adapted:
        share = cov.expert_params / inv.total_params
        cov.findings.append(
            f"LoRA: the routed experts ({share:.0%} of the parameters, {len(left)} fused expert tensors such "
            f"as {left[0].split('.')[-2]}.{left[0].split('.')[-1]}) get no adapter: give "
            f"{'lora.target_parameters' if run.kind == 'recipe' else 'lora_target_parameters'} "
            "(e.g. experts.gate_up_proj, experts.down_proj) to adapt them"
        )
