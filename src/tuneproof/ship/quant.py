"""Quantisation coverage: what a recipe will touch before quantising, what a checkpoint holds after.

Before: the model's module tree is built from its config on the meta device and the recipe is matched
with compressed-tensors' own `is_match` (exact name, `re:` prefix matched with `re.match`, or a class
name anywhere in the module's MRO: references/gate-and-serving.md section 6.1), so the audit predicts
what llm-compressor will do. The answer depends on the engine's view of fused experts:
- ModelOpt, and llm-compressor before 0.12.0, see the model as transformers defines it: fused experts
  are 3-D `nn.Parameter`s on a module that is no `nn.Linear`, so `targets="Linear"` skips them without
  a word (ModelOpt #1173, llm-compressor #2939);
- llm-compressor 0.12.0 and later linearise every fused experts class that has `down_proj` and
  `gate_up_proj`/`up_proj` parameters and carries transformers' `@use_experts_implementation`
  decorator (`modeling/moe/helpers.py::FusedExpertsProtocol`, `linear_experts.py`) into per-expert
  `nn.Linear`s named `experts.<e>.gate_proj` / `up_proj` / `down_proj`, which "Linear" then matches.

After: only safetensors headers are read (no weights): a weight is stored quantised when it is packed
(`weight_packed`, or a uint8 / fp8 `weight` with a `weight_scale`), left in bf16/fp16/fp32 otherwise.
"""

from __future__ import annotations

import ast
import fnmatch
import inspect
import re
import textwrap
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from tuneproof.core.dtypes import BY_SHORT, MODEL_DTYPES
from tuneproof.core.errors import TuneproofError
from tuneproof.core.extras import require
from tuneproof.ship.layout import FAMILIES, family_of, matrices, parameters
from tuneproof.ship.recipe import QuantRecipe
from tuneproof.ship.tensors import FLOAT_DTYPES, Checkpoint

LINEARIZE_SINCE = (0, 12, 0)  # llm-compressor a71ae2344bc6 "Transformers v5 (#2647)", first tagged in 0.12.0
FINDING_SHARE = 0.01  # a family left unquantised is a finding from 1 % of the parameters (or bytes) up
QUANTISED_FAMILIES = (
    "attention",
    "dense MLP",
    "experts",
)  # GEMM weights a Linear-targeting recipe means to cover
# Bytes per weight of common schemes, scales included (NVFP4: 4 bits + one fp8 scale per 16).
BYTES_PER_WEIGHT = {
    "NVFP4": 0.5625, "NVFP4A16": 0.5625, "MXFP4": 0.53125, "W4A16": 0.5 + 2 / 128, "W4A8": 0.5 + 2 / 128,
    "FP8": 1.0, "FP8_DYNAMIC": 1.0, "W8A8": 1.0, "W8A16": 1.0,
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Engine:
    name: str
    linearizes: bool
    reason: str


FUSED_VIEW = Engine(
    "ModelOpt / llm-compressor < 0.12",
    False,
    "sees fused experts as transformers defines them: 3-D parameters",
)
LINEAR_VIEW = Engine("llm-compressor >= 0.12", True, "linearises fused experts into per-expert Linears")


def other_view(e: Engine) -> Engine:
    """The view of fused experts the other kind of engine takes (to show when the answers differ)."""
    return FUSED_VIEW if e.linearizes else LINEAR_VIEW


def engine(spec: str | None, recipe: QuantRecipe | None = None) -> Engine:
    """The engine whose view of the model the audit takes: `modelopt`, `llm-compressor`,
    `llm-compressor==0.11.0`, or None (the installed llm-compressor, else the fused view)."""
    if (recipe is not None and recipe.kind == "modelopt" and spec is None) or spec == "modelopt":
        return Engine("modelopt", False, "ModelOpt quantises nn.Linear modules; fused experts need a plugin")
    if spec is None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            spec = f"llm-compressor=={version('llmcompressor')}"
        except PackageNotFoundError:
            return Engine(f"{FUSED_VIEW.name} (no llm-compressor installed)", False, FUSED_VIEW.reason)
    m = re.fullmatch(r"llm-?compressor(?:\s*(?:==|@|=)\s*(\d+(?:\.\d+)*)\S*)?", spec.strip(), re.IGNORECASE)
    if m is None:
        raise TuneproofError(
            f"{{engine}} {spec!r} is not an engine",
            "use modelopt, llm-compressor or llm-compressor==X.Y.Z",
            fields=("engine",),
        )
    if m.group(1) is None:
        return LINEAR_VIEW
    ver = tuple(int(p) for p in m.group(1).split(".")[:3])
    ver = ver + (0,) * (3 - len(ver))
    name = f"llm-compressor {m.group(1)}"
    if ver >= LINEARIZE_SINCE:
        return Engine(name, True, "linearises fused experts into per-expert Linears (since 0.12.0)")
    return Engine(name, False, "before 0.12.0: fused experts stay 3-D parameters")


# --- the module tree an engine sees ----------------------------------------------------------------------


@cache
def _decorated(cls: Any) -> bool:
    """llm-compressor's own test (`get_use_experts_implementation_args`): the class source carries a
    decorator named use_experts_implementation."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return False
    node = tree.body[0]
    for dec in getattr(node, "decorator_list", []):
        target = dec.func if isinstance(dec, ast.Call) else dec
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name == "use_experts_implementation":
            return True
    return False


def _fused_experts(module: Any) -> bool:
    import torch

    params = dict(module.named_parameters(recurse=False))
    has_up = isinstance(params.get("gate_up_proj"), torch.nn.Parameter) or isinstance(
        params.get("up_proj"), torch.nn.Parameter
    )
    return isinstance(params.get("down_proj"), torch.nn.Parameter) and has_up and _decorated(module.__class__)


def linearize(model: Any) -> int:
    """Replace every fused experts module the way llm-compressor does (meta device, shapes only);
    returns how many were replaced."""
    import torch

    replaced = 0
    for name, module in list(model.named_modules()):
        if not name or not _fused_experts(module):
            continue
        down = module.down_proj
        gate_up = getattr(module, "gate_up_proj", None)
        transposed = bool(getattr(module, "is_transposed", False))
        num_experts = down.shape[0]
        experts = torch.nn.ModuleList()
        for _ in range(num_experts):
            expert = torch.nn.Module()
            d_in, d_out = (down.shape[1], down.shape[2]) if transposed else (down.shape[2], down.shape[1])
            expert.down_proj = torch.nn.Linear(d_in, d_out, bias=False, device="meta")
            up = gate_up if gate_up is not None else module.up_proj
            u_in, u_out = (up.shape[1], up.shape[2]) if transposed else (up.shape[2], up.shape[1])
            if gate_up is not None:
                expert.gate_proj = torch.nn.Linear(u_in, u_out // 2, bias=False, device="meta")
                expert.up_proj = torch.nn.Linear(u_in, u_out // 2, bias=False, device="meta")
            else:
                expert.up_proj = torch.nn.Linear(u_in, u_out, bias=False, device="meta")
            experts.append(expert)
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, experts)
        replaced += 1
    return replaced


# --- before quantising -----------------------------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class QuantCoverage:
    family: str
    matrices: int = 0
    numel: int = 0
    covered_matrices: int = 0
    covered_numel: int = 0
    ignored_matrices: int = 0
    ignored_numel: int = 0
    matched_no_weight: int = (
        0  # matrices on a matched module that has no `weight` (fused experts matched by name)
    )

    @property
    def uncovered_numel(self) -> int:
        return self.numel - self.covered_numel - self.ignored_numel


CONFIG_DTYPE_BYTES = {BY_SHORT[s].config: BY_SHORT[s].bytes for s in MODEL_DTYPES}


def config_dtype(config: dict[str, Any]) -> str | None:
    """The weights' dtype a config.json names (`dtype`, or the older `torch_dtype`; a multimodal config's
    text_config first), or None when it names none."""
    for cfg in (config.get("text_config"), config):
        if isinstance(cfg, dict):
            for key in ("dtype", "torch_dtype"):
                if isinstance(cfg.get(key), str):
                    return str(cfg[key])
    return None


@dataclass(kw_only=True, slots=True)
class RecipeAudit:
    engine: Engine
    families: dict[str, QuantCoverage]
    total_numel: int
    findings: list[str] = field(default_factory=list)
    linearized_modules: int = 0
    unmatched_targets: list[str] = field(default_factory=list)
    dtype: str | None = None  # the config's dtype: bytes are numel x its size; None: bytes unknown

    @property
    def bytes_per_param(self) -> int | None:
        return CONFIG_DTYPE_BYTES.get(self.dtype or "")

    def family(self, name: str) -> QuantCoverage:
        return self.families.get(name) or QuantCoverage(family=name)


def audit_recipe(recipe: QuantRecipe, config: dict[str, Any], eng: Engine) -> RecipeAudit:
    require("quant", "auditing a recipe (compressed-tensors' matching rules)", ("compressed_tensors",))
    from compressed_tensors.utils.match import is_match

    from tuneproof.ship.layout import meta_model

    model = meta_model(config)
    linearized = linearize(model) if eng.linearizes else 0
    targets = [t for g in recipe.groups for t in g.targets]
    modules = dict(model.named_modules())

    def ignored(name: str, module: Any) -> bool:
        if recipe.kind == "modelopt":
            return any(name == p or fnmatch.fnmatchcase(name, p) for p in recipe.ignore)
        return bool(recipe.ignore) and is_match(name, module, list(recipe.ignore))

    def targeted(name: str, module: Any) -> bool:
        if recipe.kind == "modelopt":
            import torch

            return isinstance(module, torch.nn.Linear)
        return is_match(name, module, targets)

    families = {f: QuantCoverage(family=f) for f in FAMILIES}
    params = parameters(model)
    total = sum(p.numel for p in params)
    used: set[str] = set()
    for p in params:
        if not p.matrices:
            continue
        owner, _, leaf = p.name.rpartition(".")
        fam = families[p.family]
        fam.matrices += p.matrices
        fam.numel += p.numel
        module = modules[owner]
        if ignored(owner, module):
            fam.ignored_matrices += p.matrices
            fam.ignored_numel += p.numel
        elif targeted(owner, module):
            if leaf == "weight":
                fam.covered_matrices += p.matrices
                fam.covered_numel += p.numel
            else:
                fam.matched_no_weight += p.matrices
    if recipe.kind != "modelopt":
        for t in targets:
            if any(is_match(name, m, [t]) for name, m in modules.items()):
                used.add(t)
    result = RecipeAudit(
        engine=eng, families={k: v for k, v in families.items() if v.matrices}, total_numel=total,
        linearized_modules=linearized, dtype=config_dtype(config),
    )  # fmt: skip
    result.unmatched_targets = [t for t in targets if recipe.kind != "modelopt" and t not in used]
    for fam in result.families.values():
        if fam.family in QUANTISED_FAMILIES and fam.uncovered_numel >= FINDING_SHARE * total:
            why = ""
            if fam.family == "experts" and not eng.linearizes and "Linear" in targets:
                why = ": targets='Linear' cannot match fused 3-D expert parameters"
            elif fam.matched_no_weight:
                why = ": matched by name, but the module holds 3-D parameters, not a Linear weight"
            result.findings.append(
                f"{fam.family}: {fam.covered_matrices:,} of {fam.matrices:,} tensors covered "
                f"({100 * fam.uncovered_numel / total:.0f} % of parameters left unquantised){why}"
            )
    return result


# --- after quantising ------------------------------------------------------------------------------------

_QUANT_SUFFIX = re.compile(
    r"\.(gate_up_proj|gate_proj|up_proj|down_proj)_(packed|scale|shape|zero_point|global_scale)$"
)
_PACKED_LEAVES = ("weight_packed",)


@dataclass(kw_only=True, slots=True)
class StoredFamily:
    family: str
    quantised_tensors: int = 0
    quantised_bytes: int = 0
    plain_tensors: int = 0
    plain_bytes: int = 0
    plain_params: int = 0
    ignored_bytes: int = 0


def _stored_quantised(name: str, leaf: str, owner: str, dtype: str, tensors: Any) -> bool:
    """A tensor stored quantised: packed (compressed-tensors' weight_packed; Mxfp4's <name>_blocks with
    its <name>_scales), or a low-bit weight beside its scale (weight_scale; FineGrainedFP8's
    weight_scale_inv)."""
    if leaf in _PACKED_LEAVES or (leaf.endswith("_blocks") and name[: -len("blocks")] + "scales" in tensors):
        return True
    scaled = f"{owner}.weight_scale" in tensors or f"{owner}.weight_scale_inv" in tensors
    return leaf == "weight" and dtype not in FLOAT_DTYPES and scaled


@dataclass(kw_only=True, slots=True)
class CheckpointAudit:
    method: str  # what the config says: compressed-tensors format, ModelOpt algo, or "none found"
    scheme: str | None
    families: dict[str, StoredFamily]
    total_bytes: int
    expected_bytes: int | None
    expected_why: str
    suffixed: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    audited: str = ""  # what the headers audit reads for the declared format, and what it does not


def audit_checkpoint(
    checkpoint: Checkpoint, config: dict[str, Any] | None, modelopt: dict[str, Any] | None
) -> CheckpointAudit:
    method, scheme, ignore, kind = _declared(config, modelopt)
    tensors = checkpoint.tensors
    families = {f: StoredFamily(family=f) for f in FAMILIES}
    suffixed = sorted(n for n in tensors if _QUANT_SUFFIX.search(n))
    plain_quantisable = 0
    for name, info in tensors.items():
        leaf = name.rsplit(".", 1)[-1]
        owner = name.rsplit(".", 1)[0]
        if _stored_quantised(name, leaf, owner, info.dtype, tensors):
            fam = families[family_of(name, 2)]
            fam.quantised_tensors += matrices(name, info.shape) or 1
            fam.quantised_bytes += info.nbytes
            continue
        if len(info.shape) < 2 or info.dtype not in FLOAT_DTYPES or "scale" in leaf or name in suffixed:
            continue
        fam = families[family_of(name, len(info.shape))]
        fam.plain_tensors += matrices(name, info.shape)
        fam.plain_bytes += info.nbytes
        fam.plain_params += info.numel
        if _is_ignored(owner, ignore, kind):
            fam.ignored_bytes += info.nbytes
        elif fam.family in QUANTISED_FAMILIES:
            plain_quantisable += info.numel
    total = checkpoint.nbytes
    kept = {k: v for k, v in families.items() if v.quantised_tensors or v.plain_tensors}
    result = CheckpointAudit(
        method=method,
        scheme=scheme,
        families=kept,
        total_bytes=total,
        expected_bytes=None,
        expected_why="",
        suffixed=suffixed,
        audited=_audited(kind, method),
    )
    per = BYTES_PER_WEIGHT.get((scheme or "").upper())
    if per is not None:
        result.expected_bytes = int(
            total
            - sum(
                0 if f.family not in QUANTISED_FAMILIES else f.plain_bytes - f.ignored_bytes
                for f in families.values()
            )
            + plain_quantisable * per
        )
        result.expected_why = (
            f"every attention, MLP and expert weight not ignored at {per:g} B/weight ({scheme})"
        )
    else:
        result.expected_why = f"unknown: no bytes-per-weight on record for scheme {scheme!r}"
    for fam in result.families.values():
        left = fam.plain_bytes - fam.ignored_bytes
        if fam.family in QUANTISED_FAMILIES and left >= FINDING_SHARE * total and method != "none found":
            result.findings.append(
                f"{fam.family}: {fam.plain_tensors:,} tensors ({left / 2**30:.2f} GiB, "
                f"{100 * left / total:.0f} % "
                f"of the checkpoint) stored unquantised and not in the ignore list"
            )
    if suffixed:
        result.findings.append(
            f"{len(suffixed)} fused-parameter names carry quantisation suffixes ({suffixed[0]}): "
            "neither vLLM "
            "nor transformers maps them, a known corrupted-output case (llm-compressor #2939)"
        )
    if method == "none found":
        result.findings.append(
            "no quantization_config in config.json and no hf_quant_config.json: nothing says how "
            "it was quantised"
        )
    return result


# What the headers audit reads for each declared format: (how a stored quantised weight is recognised,
# how the exclusions are matched, what is not checked). Keyed by tuneproof.arch.quantization's method.
AUDITED = {
    "compressed-tensors": (
        "a weight_packed tensor, or a low-bit weight with its weight_scale, counts as quantised; the ignore "
        "list is matched as compressed-tensors matches it (exact name or re:)"
    ),
    "modelopt": (
        "a low-bit weight with its weight_scale counts as quantised; exclude_modules are matched as "
        "fnmatch patterns"
    ),
    "fp8": (
        "an fp8 weight with its weight_scale_inv (transformers' FineGrainedFP8 layout) counts as quantised; "
        "modules_to_not_convert are matched as transformers matches them (should_convert_module); not "
        "audited: the scales' shapes against weight_block_size, or activation_scheme"
    ),
    "mxfp4": (
        "a <name>_blocks tensor with its <name>_scales (transformers' Mxfp4 layout) counts as quantised; "
        "modules_to_not_convert are matched as transformers matches them (should_convert_module); not "
        "audited: the blocks' shapes"
    ),
}


def _declared(
    config: dict[str, Any] | None, modelopt: dict[str, Any] | None
) -> tuple[str, str | None, tuple[str, ...], str]:
    """(what the checkpoint declares, its scheme, its exclusions, the kind of matching and audit)."""
    from tuneproof.arch.quantization import stored_quantisation

    if modelopt is not None:
        q = modelopt.get("quantization") or {}
        return "ModelOpt", q.get("quant_algo"), tuple(q.get("exclude_modules") or ()), "modelopt"
    stored = stored_quantisation(config)
    if stored is not None and stored.method is None and set(stored.fields) == {"type"}:
        raise TuneproofError(
            f"the checkpoint's quantization_config is a {stored.fields['type']}, not an object",
            "fix the config.json",
        )
    if stored is None:
        return "none found", None, (), "none"
    assert config is not None  # stored_quantisation found one in it
    q = (
        config["quantization_config"]
        if stored.where == "quantization_config"
        else config["text_config"]["quantization_config"]
    )
    if stored.method == "compressed-tensors" or "config_groups" in q:
        scheme = q.get("format")
        groups = q.get("config_groups") or {}
        if isinstance(groups, dict) and groups:
            w = next(iter(groups.values()))
            w = w.get("weights") if isinstance(w, dict) else None
            if isinstance(w, dict) and (w.get("num_bits"), w.get("type"), w.get("group_size")) == (
                4,
                "float",
                16,
            ):
                scheme = "NVFP4"
        method = f"{stored.method} ({q.get('format', '?')})"
        return method, scheme, tuple(q.get("ignore") or ()), "compressed-tensors"
    if stored.method in ("fp8", "mxfp4"):
        scheme = "FP8" if stored.method == "fp8" else "MXFP4"
        return stored.describe(), scheme, tuple(q.get("modules_to_not_convert") or ()), stored.method
    algo = stored.fields.get("quant_algo")
    return stored.describe(), str(algo) if algo else None, (), "unread"


def _audited(kind: str, method: str) -> str:
    if kind == "none":
        return "nothing declared: stored tensors counted, no exclusions read"
    return AUDITED.get(kind) or (
        f"{method}: a format whose storage layout quant-audit does not read: its quantised weights are "
        "not recognised (not counted), no exclusion list is read, and every float weight matrix is "
        "reported as stored unquantised"
    )


def _is_ignored(owner: str, patterns: tuple[str, ...], kind: str) -> bool:
    if kind in ("fp8", "mxfp4"):  # transformers' quantizers_utils.should_convert_module, 5.24
        boundary = r"(?:(?<=\.)|(?=\.|$))"
        return any(re.match(rf"(?:{p}){boundary}", owner) or owner.endswith(p) for p in patterns)
    for p in patterns:
        if kind == "modelopt" and (owner == p or fnmatch.fnmatchcase(owner, p)):
            return True
        if kind != "modelopt" and (owner == p or (p.startswith("re:") and re.match(p[3:], owner))):
            return True
    return False


def read_modelopt(folder: Path) -> dict[str, Any] | None:
    import json

    path = Path(folder) / "hf_quant_config.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        raise TuneproofError(f"{path} is not JSON", "fix or remove it") from None
    if not isinstance(data, dict):
        raise TuneproofError(f"{path} is not a JSON object", "fix or remove it")
    return data
