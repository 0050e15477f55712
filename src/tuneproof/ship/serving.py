"""What a serving engine will do with an adapter, as rules with their sources (references/
gate-and-serving.md section 5). Each rule reads facts about the adapter and base; the first line of
advice for MoE experts is always the same: merge, then serve the merged weights."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(kw_only=True, frozen=True, slots=True)
class Facts:
    model_type: str | None  # None: no base config given
    moe: bool
    fused_expert_lora: bool
    dora: bool
    modules_to_save: bool
    patterns: bool  # rank_pattern or alpha_pattern used
    embedding_lora: bool


@dataclass(kw_only=True, frozen=True, slots=True)
class Rule:
    name: str
    applies: Callable[[Facts], bool]
    note: str
    source: str


RULES: tuple[Rule, ...] = (
    Rule(
        name="fused-experts",
        applies=lambda f: f.fused_expert_lora,
        note="LoRA on fused experts (target_parameters): merge before serving. vLLM before 0.11.2 cannot "
        "apply it, and later builds have loaded such adapters and applied them to nothing, without a word",
        source="PEFT docs package_reference/lora.md; vllm #41754, PR #41384, #55193",
    ),
    Rule(
        name="gemma4-moe",
        applies=lambda f: f.moe and (f.model_type or "").startswith("gemma4"),
        note="Gemma 4 MoE: vLLM 0.19.1 refused LoRA on Gemma 4 (fixed by PR #39291), needed "
        "get_expert_mapping for its experts (0.25.0), and some builds wire expert deltas nowhere; merge "
        "before serving, or run a parity probe against PEFT",
        source="vllm #40693, #53470, #41754",
    ),
    Rule(
        name="gemma3n",
        applies=lambda f: (f.model_type or "").startswith("gemma3n"),
        note="vLLM: Gemma3nForConditionalGeneration does not support LoRA; merge before serving",
        source="vllm #21746",
    ),
    Rule(
        name="dora",
        applies=lambda f: f.dora,
        note="DoRA: vLLM does not load DoRA adapters (and tuneproof merge refuses them); merge with PEFT",
        source="vllm/lora/peft_helper.py 'vLLM does not yet support DoRA'",
    ),
    Rule(
        name="modules-to-save",
        applies=lambda f: f.modules_to_save,
        note="modules_to_save: vLLM only serves adapters without them ('vLLM only supports modules_to_save "
        "being None'); merge before serving",
        source="vllm/lora/peft_helper.py; vllm #9280",
    ),
    Rule(
        name="patterns",
        applies=lambda f: f.patterns,
        note="rank_pattern / alpha_pattern: the vLLM PEFTHelper versions on record scale every module by the "
        "global r, which mis-scales the patterned ones; merge, or run a parity probe",
        source="vllm/lora/peft_helper.py (archived versions; current behaviour unverified)",
    ),
)


def notes(facts: Facts) -> list[tuple[str, str]]:
    """(note, source) for every rule that applies."""
    return [(r.note, r.source) for r in RULES if r.applies(facts)]
