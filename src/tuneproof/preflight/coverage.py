"""LoRA coverage before launch: which modules a run's targets adapt in the model the trainer loads
(AutoModelForCausalLM of the published config, vision and audio towers included), with what share of
the parameters, and which routed experts are left out.

Matching is PEFT's own, from the one home of what a LoRA adapts (`tuneproof.arch.targets`: lists by
name or '.'-suffix, a regex by re.fullmatch, all-linear, PEFT's conversion of v4 expert names on
transformers 5's fused MoE models), with Axolotl's lora_target_linear adding the last name part of every
nn.Linear but the output embedding (axolotl/loaders/adapter.py find_all_linear_names).

The module inventory (names, shapes, parameter counts) is `tuneproof.arch.inventory`'s: the model built
on the meta device, cached per config.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tuneproof.arch.inventory import Inventory
from tuneproof.arch.targets import LoraTargets, peft_matches
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


def coverage(run: Run, inv: Inventory, model_type: str, asked: LoraTargets) -> Coverage:
    """What the run's targets (`asked`, in PEFT's words) adapt in `inv` (PEFT's own resolution,
    `tuneproof.arch.targets`, on the model the trainer loads, towers included), and the findings: no
    module adapted, towers adapted by a broad target, routed experts left out."""
    from tuneproof.arch.targets import resolve_names

    linears = [n for n, _, _ in inv.linears if n.rpartition(".")[2] != "lm_head"]
    rule = resolve_names(
        asked, model_type, linears, [f"{n}.weight" for n in linears] + [n for n, _ in inv.experts]
    )
    adapted = [(n, i, o) for n, i, o in inv.linears if n.rpartition(".")[2] != "lm_head" and rule.module(n)]
    families: dict[str, int] = {}
    for n, _, _ in adapted:
        families[n.rpartition(".")[2]] = families.get(n.rpartition(".")[2], 0) + 1
    towers = sum(1 for n, _, _ in adapted if any(t in n for t in TOWERS))
    experts_hit = [n for n, _ in inv.experts if rule.parameter(n)]
    expert_params = sum(k for _, k in inv.experts)
    params = sum(rule.targets.rank_of(n) * (i + o) for n, i, o in adapted)
    cov = Coverage(
        adapted=[n for n, _, _ in adapted], families=families, towers=towers, adapter_params=params,
        total_params=inv.total_params, experts_adapted=experts_hit,
        experts_left=len(inv.experts) - len(experts_hit), expert_params=expert_params, findings=[],
    )  # fmt: skip
    _findings(run, inv, cov, rule.targets.modules)
    return cov


def _findings(run: Run, inv: Inventory, cov: Coverage, applied: tuple[str, ...]) -> None:
    """`applied`: the target_modules names as PEFT applies them (after its conversion)."""
    names = [n for n, _, _ in inv.linears]
    missing = [t for t in run.targets if t in applied and not any(peft_matches(n, (t,)) for n in names)]
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
