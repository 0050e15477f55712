"""What a LoRA adapts: the one home of PEFT's target rules, read by the FLOP ledger, the memory ledger,
preflight's coverage, the merge and the callback.

`LoraTargets` is what a run asks for, in PEFT's words (LoraConfig's target_modules as a list or a
regex, "all-linear", target_parameters, rank and rank_pattern, modules_to_save), plus Axolotl's
lora_target_linear. `adaptation(shape, targets)` is what PEFT 0.21.2 makes of it on a model
(peft/tuners/tuners_utils.py BaseTuner.inject_adapter), in PEFT's order:

1. **transformers v5's fused MoE layouts** (peft/utils/transformers_weight_conversion.py
   convert_peft_config_for_transformers, `_convert_peft_config_moe`): on the model types whose
   transformers checkpoint conversion follows the mixtral or qwen2_moe pattern (`MOE_PATTERN`), the v4
   names of the experts and the router (gate_proj, up_proj, down_proj, gate; w1, w2, w3, gate) move from
   target_modules to target_parameters (gate_up_proj, down_proj, gate.weight), by name alone: a dense
   MLP's or a shared expert's gate_proj is dropped with them. Naming both halves of the fused gate_up_proj
   gives it rank 2r (and alpha 2 alpha, so the same scaling); naming one is refused. "all-linear" and a
   regex are first reduced to the leaf names they reach, all-linear with every v4 name added (so it
   adapts the experts and the router), a regex losing its layer indices.
2. **all-linear** (`_maybe_include_all_linear_layers`): every nn.Linear (subclasses included) and
   Conv1D but the output embeddings. A router that subclasses nn.Linear (Llama 4's, PhiMoE's) is wrapped
   too, and its first forward then fails (lora.Linear adds to the tuple it returns): `Linear.wrap_fails`,
   said as a finding. On Mamba models PEFT refuses out_proj and conv1d (`_check_lora_target_modules_mamba`)
   even when all-linear picked them: its all-linear raises there; tuneproof's is PEFT's with those
   excluded (`exclude_modules=["out_proj"]`), said in a note.
3. **a list** matches a module whose full path is a name or ends with "." + a name (`peft_matches`);
   **a regex** must match the whole full path (re.fullmatch). Full paths are the shape's:
   `{layers_path}.{i}.{name}` inside the layers, `{model path}.{name}` outside them, `lm_head`.
4. **target_parameters** match "{module path}.{parameter name}" the same way: a fused expert parameter
   (`mlp.experts.gate_up_proj`) or any GEMM's 2-D weight (`mlp.gate.weight`); PEFT adapts them in place.
5. **rank**: the first rank_pattern key whose `(.*\\.)?(key)$` matches the path (`get_pattern_key`),
   else r.

Where tuneproof is stricter than PEFT, it says so: a listed name that matches nothing is refused (PEFT
only warns unless nothing at all matches: a typo is a typo), and so is a rank above an adapted matrix's
smaller side.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from tuneproof.arch.shape import Linear, ModelShape
from tuneproof.core.errors import TuneproofError, field_error

ALL_LINEAR = "all-linear"

# transformers 5.24 conversion_mapping._MODEL_TO_CONVERSION_PATTERN, the model types whose pattern PEFT
# 0.21.2 converts (its _MOE_TARGET_MODULE_MAPPING has mixtral and qwen2_moe; PEFT adds mixtral itself),
# each with get_checkpoint_conversion_mapping not None (tests/arch/test_lora_targets.py compares this
# table with the installed transformers and PEFT)
MOE_PATTERN: dict[str, str] = {
    **{t: "mixtral" for t in ("minimax", "minimax_m2", "mixtral")},
    **{
        t: "qwen2_moe"
        for t in (
            "Dots3NoteTextModel", "UnlimitedOcrTextModel", "afmoe", "beam", "cohere2_moe", "deepseek_v2",
            "deepseek_v3", "deepseek_v32", "dots1", "ernie4_5_moe", "exaone_moe", "flex_olmo", "glm4_moe",
            "glm4_moe_lite", "glm4v_moe", "glm_moe_dsa", "hunyuan_v1_moe", "longcat_flash", "mellum",
            "olmoe", "qwen3_moe", "qwen3_next", "qwen3_omni_moe", "qwen3_omni_moe_text",
            "qwen3_omni_moe_thinker", "sarvam_mla", "solar_open",
        )
    },
}  # fmt: skip
# PEFT 0.21.2 _MOE_TARGET_MODULE_MAPPING (v4 name -> target parameter, in PEFT's order) and
# _MOE_FUSED_TARGETS (the v4 names fused into one parameter)
MOE_NAMES: dict[str, dict[str, str]] = {
    "mixtral": {"gate": "gate.weight", "w1": "gate_up_proj", "w3": "gate_up_proj", "w2": "down_proj"},
    "qwen2_moe": {
        "gate": "gate.weight", "gate_proj": "gate_up_proj", "up_proj": "gate_up_proj",
        "down_proj": "down_proj",
    },
}  # fmt: skip
MOE_FUSED: dict[str, dict[str, tuple[str, ...]]] = {
    "mixtral": {"gate_up_proj": ("w1", "w3")},
    "qwen2_moe": {"gate_up_proj": ("gate_proj", "up_proj")},
}
# PEFT refuses LoRA on these modules of these model types (tuners_utils._check_lora_target_modules_mamba):
# the fused Mamba kernels read their weights directly
PEFT_MAMBA_TYPES = frozenset({"falcon_h1", "mamba", "mamba2", "falcon_mamba", "nemotron_h"})
PEFT_MAMBA_REFUSED = frozenset({"out_proj", "conv1d"})


def peft_matches(name: str, targets: Iterable[str]) -> bool:
    """Whether a list of PEFT targets picks the module or parameter at path `name`: the whole path, or
    a '.'-separated suffix of it (`q_proj` picks `model.layers.0.self_attn.q_proj`, never `my_q_proj`)."""
    return any(name == t or name.endswith("." + t) for t in targets)


def pattern_rank(path: str, ranks: Iterable[tuple[str, int]], default: int) -> int:
    """PEFT's `get_pattern_key` on a rank_pattern: the first key matching `(.*\\.)?(key)$` on the path."""
    return pattern_value(path, ranks, default)


def pattern_value(path: str, patterns: Iterable[tuple[str, Any]], default: Any) -> Any:
    """PEFT's `get_pattern_key` (peft/utils/other.py): the value of the first key (a regex) matching
    `(.*\\.)?(key)$` on the path, else `default`: rank_pattern's ranks, alpha_pattern's alphas."""
    for key, value in patterns:
        if re.match(rf"(.*\.)?({key})$", path):
            return value
    return default


@dataclass(kw_only=True, frozen=True, slots=True)
class LoraTargets:
    """What a LoRA is asked to adapt, as PEFT's LoraConfig says it.

    `modules`: target_modules as a list ("all-linear" alone is the shorthand); `regex`: target_modules
    as a string (re.fullmatch on full module paths; `modules` is then ignored); `linear_leaves`: Axolotl's
    lora_target_linear, the last name of every nn.Linear but the LM head added to `modules`
    (axolotl/loaders/adapter.py find_all_linear_names); `parameters`: target_parameters; `rank`: r;
    `ranks`: rank_pattern, (key, rank) in order; `saved`: modules_to_save, trained whole."""

    modules: tuple[str, ...] = (ALL_LINEAR,)
    regex: str | None = None
    linear_leaves: bool = False
    parameters: tuple[str, ...] = ()
    rank: int = 16
    ranks: tuple[tuple[str, int], ...] = ()
    saved: tuple[str, ...] = ()

    @property
    def all_linear(self) -> bool:
        return self.regex is None and self.modules == (ALL_LINEAR,)

    def rank_of(self, path: str) -> int:
        return pattern_rank(path, self.ranks, self.rank)

    def peft_config(self) -> dict[str, Any]:
        """These targets as PEFT's LoraConfig takes them (what a LoRA built from them adapts is then
        PEFT's own resolution, which `adaptation` equals)."""
        if self.linear_leaves:
            raise TuneproofError(
                "Axolotl's lora_target_linear is Axolotl's rule, not a LoraConfig field",
                "give the module names, or all-linear",
            )
        modules: str | list[str] = (
            self.regex if self.regex is not None else ALL_LINEAR if self.all_linear else list(self.modules)
        )
        return {
            "r": self.rank, "target_modules": modules, "target_parameters": list(self.parameters) or None,
            "rank_pattern": dict(self.ranks), "modules_to_save": list(self.saved) or None,
        }  # fmt: skip

    def converted(
        self, model_type: str, linears: Iterable[str], parameters: Iterable[str]
    ) -> tuple[LoraTargets, str | None]:
        """PEFT's v4 -> v5 MoE conversion on a model of `model_type` whose nn.Linear modules (all-linear's
        picks) and parameters have these full paths; the targets it leaves, and a note saying what moved
        (None: nothing did)."""
        pattern = MOE_PATTERN.get(model_type)
        if pattern is None:
            return self, None
        mapping, fused = MOE_NAMES[pattern], MOE_FUSED[pattern]
        names = self._leaf_names(linears, parameters, mapping)
        if names is None:
            return self, None
        params, kept = list(self.parameters), []
        present: dict[str, set[str]] = {new: set() for new in fused}
        for target in names:
            old = next((o for o in mapping if target == o or target.endswith("." + o)), None)
            if old is None:
                kept.append(target)
                continue
            params.append(mapping[old])
            if mapping[old] in fused:
                present[mapping[old]].add(old)
        ranks = list(self.ranks)
        for new, olds in fused.items():
            got = present[new]
            if 0 < len(got) < len(olds):
                raise TuneproofError(
                    f"PEFT refuses target(s) {', '.join(sorted(got))} without "
                    f"{', '.join(sorted(set(olds) - got))}: they are fused into {new} on {model_type} "
                    "(peft transformers_weight_conversion._convert_peft_config_moe)",
                    f"target both {' and '.join(olds)}, or neither",
                    fields=("lora_targets",),
                )
            if len(got) == len(olds) > 1:
                ranks.append((rf".*\.{re.escape(new)}", self.rank * len(olds)))
        moved = sorted({mapping[o] for o in mapping if any(t == o or t.endswith("." + o) for t in names)})
        if not moved:  # nothing moved; a regex is still reduced to the leaf names it reached
            if self.regex is None:
                return self, None
            reduced = replace(self, modules=tuple(kept), regex=None)
            return reduced, (
                f"PEFT reduces the regex to the leaf names it reaches on {model_type} ({', '.join(kept)}: "
                "peft transformers_weight_conversion._resolve_string_target_modules), so it adapts them in "
                "every layer"
            )
        out = replace(
            self, modules=tuple(dict.fromkeys(kept)), regex=None, linear_leaves=False,
            parameters=tuple(dict.fromkeys(params)), ranks=tuple(ranks),
        )  # fmt: skip
        note = (
            f"PEFT converts the targets for transformers 5's fused {model_type} experts: "
            f"{', '.join(sorted(o for o in mapping if any(t == o or t.endswith('.' + o) for t in names)))} "
            f"become target_parameters {', '.join(moved)}"
            + (f" (gate_up_proj at rank {self.rank * 2})" if len(ranks) > len(self.ranks) else "")
            + "; an nn.Linear of those names (a dense MLP, a shared expert) gets no adapter"
        )
        return out, note

    def _leaf_names(
        self, linears: Iterable[str], parameters: Iterable[str], mapping: dict[str, str]
    ) -> list[str] | None:
        """The list the conversion remaps: target_modules as given, or the leaf names all-linear or the
        regex reach (`_resolve_string_target_modules`); None where a regex reaches nothing."""
        linears, parameters = list(linears), list(parameters)
        if self.all_linear:
            leaves = {n.rpartition(".")[2] for n in linears}
            return sorted(leaves | set(mapping))
        if self.regex is None:
            extra = sorted({n.rpartition(".")[2] for n in linears}) if self.linear_leaves else []
            return list(dict.fromkeys([*self.modules, *extra]))
        pattern = re.compile(self.regex)
        matched = {n.rpartition(".")[2] for n in (*linears, *parameters) if pattern.fullmatch(n)}
        containers: dict[str, set[str]] = {}
        for name in parameters:
            container, _, leaf = name.rpartition(".")
            containers.setdefault(leaf, set()).add(container)
        for old, new in mapping.items():
            if old not in matched and any(pattern.fullmatch(f"{c}.{old}") for c in containers.get(new, ())):
                matched.add(old)
        return sorted(matched) or None


def module_path(shape: ModelShape, layer: int | None, lin: Linear) -> str:
    """The full module path of `lin` in the model transformers builds (`lm_head` for the head)."""
    if layer is not None:
        return f"{shape.layers_path}.{layer}.{lin.name}"
    if lin.component == "lm_head":
        return lin.name
    return f"{shape.layers_path.rpartition('.')[0] or 'model'}.{lin.name}"


def parameter_path(lin: Linear) -> str:
    """The path PEFT's target_parameters names `lin`'s weight by, inside its layer: a fused expert
    parameter is a parameter itself (`mlp.experts.gate_up_proj`), a 2-D weight is its module's `.weight`
    (`mlp.gate.weight`, a router applied as a raw matmul)."""
    return lin.name if lin.num_experts > 1 else f"{lin.name}.weight"


def _wrappable(lin: Linear) -> bool:
    """An nn.Linear all-linear picks: one LoRA can wrap, or a subclass whose wrapping fails."""
    return lin.component != "lm_head" and (lin.adaptable or lin.wrap_fails)


@dataclass(frozen=True, slots=True)
class Place:
    """How one GEMM is adapted: `how` "module" (a lora.Linear beside it), "parameter" (PEFT's
    ParamWrapper, W + A@B formed in place), "whole" (modules_to_save: trained whole) or "" (frozen)."""

    how: str
    rank: int = 0


NOT_ADAPTED = Place("")


@dataclass(kw_only=True, frozen=True, slots=True)
class Adaptation:
    """What PEFT adapts in one model: each GEMM's place by (layer index or None, its name), the targets as
    PEFT applied them (after its conversion), and what is worth saying (`notes`, `findings`)."""

    targets: LoraTargets
    places: dict[tuple[int | None, str], Place] = field(default_factory=dict)
    embedding_saved: bool = False  # modules_to_save holds the input embeddings: they train whole
    notes: tuple[str, ...] = ()
    findings: tuple[str, ...] = ()

    def place(self, layer: int | None, lin: Linear) -> Place:
        """How the GEMM `lin` of layer `layer` (None: outside the layers) is adapted."""
        return self.places.get((layer, lin.name), NOT_ADAPTED)

    @property
    def any_adapted(self) -> bool:
        """Some GEMM carries an adapter (beside it or in place): what there is to train."""
        return any(p.how in ("module", "parameter") for p in self.places.values())


def _gemms(shape: ModelShape) -> list[tuple[int | None, Linear]]:
    """Every GEMM of the model with its layer index (None: outside the layers), each place once."""
    out: list[tuple[int | None, Linear]] = [(None, s) for s in shape.pre_steps if isinstance(s, Linear)]
    for layer in (*shape.layers, *shape.variants):
        out.extend((layer.index, s) for s in (*layer.outside, *layer.steps) if isinstance(s, Linear))
    out.extend((None, s) for s in shape.post_steps if isinstance(s, Linear))
    out.append((None, shape.head))
    return list(dict.fromkeys(out))


# the last adaptations found, by (id of the shape, targets): the ledger asks once per walk, and pricing
# a run's micro-batches walks many times; the shape is kept with its entry, so an id is never reused
_FOUND: dict[tuple[int, LoraTargets], tuple[ModelShape, Adaptation]] = {}
_KEPT = 64


def adaptation(shape: ModelShape, asked: LoraTargets) -> Adaptation:
    """What PEFT adapts when `asked` is applied to the model of `shape` (see the module's docstring)."""
    key = (id(shape), asked)
    hit = _FOUND.get(key)
    if hit is not None and hit[0] is shape:
        return hit[1]
    found = _adaptation(shape, asked)
    if len(_FOUND) >= _KEPT:
        _FOUND.pop(next(iter(_FOUND)))
    _FOUND[key] = (shape, found)
    return found


@dataclass(kw_only=True, frozen=True, slots=True)
class Resolved:
    """PEFT's resolution on a model given by its names: the targets as PEFT applies them (after its
    conversion), and a rule per full path. `module(path)`: a lora.Linear wraps the nn.Linear there;
    `parameter(path)`: a ParamWrapper adapts the parameter there in place; `saved(path)`: modules_to_save."""

    targets: LoraTargets
    note: str | None
    names: tuple[str, ...]
    pattern: re.Pattern[str] | None

    def module(self, path: str) -> bool:
        if self.pattern is not None:
            return self.pattern.fullmatch(path) is not None
        return ALL_LINEAR in self.names or peft_matches(path, self.names)

    def parameter(self, path: str) -> bool:
        return peft_matches(path, self.targets.parameters)

    def saved(self, path: str) -> bool:
        return peft_matches(path, self.targets.saved)


def resolve_names(
    asked: LoraTargets, model_type: str, linears: Iterable[str], parameters: Iterable[str]
) -> Resolved:
    """`asked` on a model of `model_type` whose nn.Linear modules all-linear picks (the LM head left
    out) and whose parameters have these full paths: PEFT's conversion, then Axolotl's leaf names."""
    linears, parameters = list(linears), list(parameters)
    targets, note = asked.converted(model_type, linears, parameters)
    leaves = {n.rpartition(".")[2] for n in linears} if targets.linear_leaves else set()
    pattern = re.compile(targets.regex) if targets.regex is not None else None
    return Resolved(targets=targets, note=note, names=(*targets.modules, *sorted(leaves)), pattern=pattern)


def _adaptation(shape: ModelShape, asked: LoraTargets) -> Adaptation:
    gemms = _gemms(shape)
    full = {(i, lin): module_path(shape, i, lin) for i, lin in gemms}
    params = {g: full[g].removesuffix(g[1].name) + parameter_path(g[1]) for g in gemms}
    rule = resolve_names(
        asked,
        shape.model_type,
        [full[g] for g in gemms if _wrappable(g[1])],
        [params[g] for g in gemms if g[1].component != "lm_head"],
    )
    targets = rule.targets
    notes, findings = [rule.note] if rule.note else [], []
    mamba = shape.model_type in PEFT_MAMBA_TYPES
    places: dict[tuple[int | None, str], Place] = {}
    for i, lin in gemms:
        path = full[(i, lin)]
        if rule.saved(path):
            places[(i, lin.name)] = Place("whole")
        elif lin.component != "lm_head" and rule.parameter(params[(i, lin)]):
            places[(i, lin.name)] = Place("parameter", targets.rank_of(params[(i, lin)]))
        elif _wrappable(lin) and rule.module(path):
            if mamba and lin.name.rpartition(".")[2] in PEFT_MAMBA_REFUSED and targets.all_linear:
                continue  # PEFT's all-linear raises here; tuneproof's leaves them out (the note below)
            places[(i, lin.name)] = Place("module", targets.rank_of(path))
    refused = sorted(
        {lin.name for i, lin in gemms if mamba and lin.name.rpartition(".")[2] in PEFT_MAMBA_REFUSED}
    )
    if targets.all_linear and refused:
        notes.append(
            f"PEFT's all-linear raises on {shape.model_type} ({', '.join(refused)}: "
            "tuners_utils._check_lora_target_modules_mamba): costed as all-linear with "
            "exclude_modules=['out_proj'], what runs"
        )
    broken = sorted({lin.name for i, lin in gemms if lin.wrap_fails and places.get((i, lin.name))})
    if broken:
        findings.append(
            f"LoRA wraps {', '.join(broken)}, a router that subclasses nn.Linear and returns a tuple: PEFT's "
            "lora.Linear adds its output to that tuple, so the first forward fails (AttributeError); keep "
            f"it out (exclude_modules=[{', '.join(repr(b.rpartition('.')[2]) for b in broken)}])"
        )
    return Adaptation(
        targets=targets,
        places=places,
        embedding_saved=peft_matches("embed_tokens", asked.saved),
        notes=tuple(notes),
        findings=tuple(findings),
    )


def unmatched(shape: ModelShape, asked: LoraTargets) -> tuple[str, ...]:
    """The listed target_modules names (after PEFT's conversion) that match no module LoRA can adapt:
    what `check` refuses, and what a reader of a run's config reports and leaves out."""
    found = adaptation(shape, asked)
    modules = [module_path(shape, i, lin) for i, lin in _gemms(shape) if _wrappable(lin)]
    return tuple(
        t
        for t in found.targets.modules
        if t != ALL_LINEAR and not any(peft_matches(m, (t,)) for m in modules)
    )


def check(shape: ModelShape, asked: LoraTargets, mode: str) -> Adaptation:
    """What PEFT adapts of `asked` on `shape` (`adaptation`), once checked for what PEFT would refuse and
    what tuneproof refuses beyond it, in every mode (a typo is a typo): a listed name or target parameter
    that matches nothing (PEFT only warns), a regex matching no module; under LoRA (`mode`), Mamba modules
    named explicitly (PEFT raises) and a rank above min(in_features, out_features) of every adapted matrix
    (no adapter would be low-rank)."""
    found = adaptation(shape, asked)
    gemms = _gemms(shape)
    modules = [(i, lin) for i, lin in gemms if _wrappable(lin)]
    for t in found.targets.modules:
        if t != ALL_LINEAR and not any(peft_matches(module_path(shape, i, lin), (t,)) for i, lin in modules):
            raise field_error(
                "lora_targets",
                f"{t!r} matches no nn.Linear module LoRA can adapt in this {shape.model_type} model"
                + _why_not_adaptable(shape, t),
                f"targets: all-linear or this model's module names: {_own_names(shape)}",
            )
    if found.targets.regex is not None and not any(
        p.how == "module" for (i, name), p in found.places.items()
    ):
        raise field_error(
            "lora_targets",
            f"the regex {found.targets.regex!r} matches no nn.Linear module of this {shape.model_type} model "
            f"(full paths such as {module_path(shape, *modules[0])})"
            if modules
            else f"the regex {found.targets.regex!r} matches no module",
            "re.fullmatch runs on the full module path: anchor it there",
        )
    _check_parameters(shape, asked)
    if mode != "lora":
        return found
    named = tuple(t for t in found.targets.modules if t != ALL_LINEAR)
    if shape.model_type in PEFT_MAMBA_TYPES:
        hit = sorted(
            {lin.name.rpartition(".")[2] for i, lin in modules if peft_matches(lin.name, named)}
            & PEFT_MAMBA_REFUSED
        )
        if hit:
            raise field_error(
                "lora_targets",
                f"PEFT refuses LoRA on {', '.join(hit)} of {shape.model_type} models "
                "(peft tuners_utils._check_lora_target_modules_mamba)",
                "target the other projections, e.g. in_proj",
            )
    sides = [
        min(lin.in_features, lin.out_features)
        for i, lin in gemms
        if found.place(i, lin).how in ("module", "parameter")
    ]
    widest = max(sides, default=None)
    if widest is not None and asked.rank > widest:
        raise field_error(
            "lora_rank",
            f"{asked.rank} is above {widest}, the largest min(in_features, out_features) of the "
            "modules it adapts: no adapter would be low-rank",
            f"pass a rank of at most {widest}",
        )
    return found


def _check_parameters(shape: ModelShape, asked: LoraTargets) -> None:
    """A target parameter the user named that matches no fused expert parameter or GEMM weight (the ones
    PEFT's conversion added are PEFT's, not a typo)."""
    names = sorted({parameter_path(lin) for i, lin in _gemms(shape) if lin.component != "lm_head"})
    experts = sorted({lin.name for i, lin in _gemms(shape) if lin.num_experts > 1})
    for t in asked.parameters:
        if not any(peft_matches(n, (t,)) for n in names):
            raise field_error(
                "lora_target_parameters",
                f"{t!r} matches no fused expert parameter or GEMM weight of this {shape.model_type} model",
                f"its fused expert parameters: {', '.join(experts)}"
                if experts
                else "it has none (adapt nn.Linear modules with lora_targets)",
            )


def _why_not_adaptable(shape: ModelShape, target: str) -> str:
    """Why a target naming a GEMM LoRA does not adapt gets nothing: the LM head, a routed expert's
    fused parameter, or a module whose forward reads only its weight (Mamba-1's dt_proj,
    LongCat-Flash's router classifier, RG-LRU's block-diagonal gates)."""
    if target.endswith("lm_head"):
        return " (the LM head is never adapted here)"
    hit = [lin for lin in shape.linears if not _wrappable(lin) and peft_matches(lin.name, (target,))]
    if any(lin.num_experts > 1 for lin in hit):
        return f": {target} is a routed expert's fused parameter (adapt it through lora_target_parameters)"
    if hit:
        return (
            f": transformers' forward applies {target} as a raw matmul with its weight (the module "
            "itself is never called), so an adapter there would never run"
        )
    return ""


def _own_names(shape: ModelShape) -> str:
    """The module names all-linear adapts in this model (the first ten)."""
    own = {
        lin.name.rpartition(".")[2]
        for lin in shape.linears
        if _wrappable(lin)
        and not (shape.model_type in PEFT_MAMBA_TYPES and lin.name.rpartition(".")[2] in PEFT_MAMBA_REFUSED)
    }
    return ", ".join(sorted(own)[:10]) or "none"
