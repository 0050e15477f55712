"""`tuneproof quant-audit`: what a quantisation recipe will cover before quantising, or what a quantised
checkpoint really stores (the audits themselves are `quant.audit_recipe` and `quant.audit_checkpoint`).

A recipe is audited under the engine assumed (`quant.engine`) and, unless it is ModelOpt's, under the
other view of fused experts too: when the two views cover a different number of expert tensors, both
are reported (the engines disagree on this model). Only the assumed engine's findings decide the
verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuneproof.core.errors import TuneproofError
from tuneproof.core.progress import Progress
from tuneproof.core.terminal import gib
from tuneproof.core.verdict import FINDING, Verdict
from tuneproof.ship import quant
from tuneproof.ship.recipe import QuantRecipe, read_quant_recipe
from tuneproof.ship.tensors import Checkpoint

RECIPE_CLEAN = "every large parameter is covered or ignored"
CHECKPOINT_CLEAN = "the large weights are stored quantised or ignored on purpose"


@dataclass(kw_only=True, frozen=True, slots=True)
class AuditSpec:
    """A recipe with the model's config (and the engine to assume), or a quantised checkpoint alone."""

    recipe: Path | None = None  # llm-compressor .yaml/.py, quantization_config JSON, hf_quant_config.json
    config: Path | None = None  # the model's config.json (or its folder), for a recipe
    checkpoint: Path | None = None  # a quantised checkpoint folder
    engine: str | None = None  # quant.engine's spec; None: the installed llm-compressor, else the fused view


@dataclass(kw_only=True, frozen=True, slots=True)
class RecipePlan:
    recipe: QuantRecipe
    model_config: dict[str, Any]
    config: str  # the config's path, as given
    engine: quant.Engine


@dataclass(kw_only=True, frozen=True, slots=True)
class CheckpointPlan:
    folder: Path
    checkpoint: Checkpoint
    model_config: dict[str, Any] | None  # only its quantization_config is read
    modelopt: dict[str, Any] | None  # hf_quant_config.json, when there is one


def _verdict(findings: list[str], clean: str) -> Verdict:
    if findings:
        return Verdict(outcome="FINDING", reason="; ".join(findings), exit_code=FINDING)
    return Verdict(outcome="CLEAN", reason=clean)


@dataclass(kw_only=True, frozen=True, slots=True)
class RecipeReport:
    recipe: QuantRecipe
    audits: list[quant.RecipeAudit]  # the assumed engine's first; the other view's when they disagree
    config: str
    warnings: list[str] = field(default_factory=list)

    @property
    def engines_disagree(self) -> bool:
        return len(self.audits) > 1

    @property
    def verdict(self) -> Verdict:
        """CLEAN (exit 0), or FINDING (1: a large family neither covered nor ignored, as the assumed
        engine sees the model)."""
        return _verdict(self.audits[0].findings, RECIPE_CLEAN)

    def to_dict(self) -> dict[str, Any]:
        """Exactly what `tuneproof quant-audit --recipe R --config C --json` prints."""
        return recipe_json(self)

    def render(self, console: Any) -> None:
        from tuneproof.ship.render import print_lines

        print_lines(console, recipe_lines(self))


@dataclass(frozen=True, slots=True)
class CheckpointReport:
    folder: Path
    audit: quant.CheckpointAudit
    warnings: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> Verdict:
        """CLEAN (exit 0), or FINDING (1: large weights stored unquantised and not ignored, names no
        engine maps, or nothing that says how it was quantised)."""
        return _verdict(self.audit.findings, CHECKPOINT_CLEAN)

    def to_dict(self) -> dict[str, Any]:
        """Exactly what `tuneproof quant-audit --checkpoint DIR --json` prints."""
        return checkpoint_json(self)

    def render(self, console: Any) -> None:
        from tuneproof.ship.render import print_lines

        print_lines(console, checkpoint_lines(self))


def prepare(spec: AuditSpec) -> RecipePlan | CheckpointPlan:
    """The files read and checked (headers only for a checkpoint), a bad engine named before any."""
    if spec.checkpoint is not None:
        return _prepare_checkpoint(spec)
    from tuneproof.core.extras import require
    from tuneproof.ship.layout import read_config

    if spec.recipe is not None:  # the extra is named before any file is read or torch loads
        require("quant", "auditing a recipe (compressed-tensors' matching rules)", ("compressed_tensors",))
    quant.engine(spec.engine)  # a bad engine is named before any file is read
    recipe = read_quant_recipe(spec.recipe) if spec.recipe is not None else None
    model_config = read_config(spec.config, "config") if spec.config is not None else None
    if recipe is None or model_config is None or spec.config is None:
        raise TuneproofError(
            "nothing to audit",
            "pass {recipe} FILE {config} CONFIG, or {checkpoint} DIR",
            fields=("recipe", "config", "checkpoint"),
        )
    from tuneproof.arch.quantization import stored_quantisation

    if (stored := stored_quantisation(model_config)) is not None:  # a recipe is for an unquantised base
        raise TuneproofError(
            f"{{config}} {spec.config} describes a checkpoint already stored quantised, {stored.describe()}: "
            "a recipe quantises an unquantised base, and this one's large weights are not bf16 to cover",
            "pass the unquantised base's config.json, or audit this checkpoint with {checkpoint} DIR",
            fields=("config", "checkpoint"),
        )
    return RecipePlan(
        recipe=recipe,
        model_config=model_config,
        config=str(spec.config),
        engine=quant.engine(spec.engine, recipe),
    )


def _prepare_checkpoint(spec: AuditSpec) -> CheckpointPlan:
    from tuneproof.arch import load_config_dict
    from tuneproof.ship.tensors import open_checkpoint

    folder = spec.checkpoint
    assert folder is not None
    if spec.recipe is not None or spec.config is not None:
        raise TuneproofError(
            "{checkpoint} audits a quantised model alone",
            "drop {recipe}/{config}, or drop {checkpoint}",
            fields=("recipe", "config", "checkpoint"),
        )
    checkpoint = open_checkpoint(folder, "checkpoint")
    # only its quantization_config is read: a checkpoint's sizes are in its headers
    model_config = load_config_dict(folder) if (folder / "config.json").is_file() else None
    return CheckpointPlan(
        folder=folder, checkpoint=checkpoint, model_config=model_config, modelopt=quant.read_modelopt(folder)
    )


def run(
    plan: RecipePlan | CheckpointPlan, progress: Progress | None = None
) -> RecipeReport | CheckpointReport:
    """The audit the plan asks for (quick: no progress is reported)."""
    if isinstance(plan, CheckpointPlan):
        audit = quant.audit_checkpoint(plan.checkpoint, plan.model_config, plan.modelopt)
        return CheckpointReport(plan.folder, audit)
    audits = [quant.audit_recipe(plan.recipe, plan.model_config, plan.engine)]
    if plan.recipe.kind != "modelopt":
        other = quant.audit_recipe(plan.recipe, plan.model_config, quant.other_view(plan.engine))
        if other.family("experts").covered_matrices != audits[0].family("experts").covered_matrices:
            audits.append(other)
    return RecipeReport(recipe=plan.recipe, audits=audits, config=plan.config)


def recipe_lines(r: RecipeReport) -> list[str]:
    recipe, audits, config = r.recipe, r.audits, r.config
    lines = [
        f"recipe    {recipe.source} ({recipe.kind}): scheme {recipe.scheme}; targets "
        + ", ".join(repr(t) for g in recipe.groups for t in g.targets)
        + f"; ignore {list(recipe.ignore)[:6]}{' ...' if len(recipe.ignore) > 6 else ''}",
        f"model     {config}, module tree built on the meta device; matched with "
        "compressed-tensors' is_match",
    ]
    for i, a in enumerate(audits):
        tag = "assumed" if i == 0 else "other  "
        lines.append(f"engine    {tag} {a.engine.name}: {a.engine.reason}")
        size = f"size ({a.dtype})" if a.bytes_per_param else "size"
        header = f"{'family':<12} {'covered of tensors':<21}{'ignored':>7}   {'share':>7}  {size:>14}"
        lines.append(f"          {header}")  # every row fits 80 columns
        for f in a.families.values():
            if f.family == "other":
                continue
            nbytes = gib(f.numel * a.bytes_per_param) if a.bytes_per_param else "unknown"
            lines.append(
                f"          {f.family:<12} {f.covered_matrices:>8,} of {f.matrices:<9,}"
                f"{f.ignored_matrices:>7,}   {100 * f.numel / a.total_numel:5.1f} %  {nbytes:>14}"
            )
        if not a.bytes_per_param:
            lines.append("          (bytes unknown: the config names no dtype)")
        for t in a.unmatched_targets:
            lines.append(f"          target {t!r} matches no module")
        clean = "none: every large parameter is covered or ignored" + (" under this engine" if i else "")
        for finding in a.findings or [clean]:
            lines.append(f"finding   {finding}")
    if len(audits) > 1:
        lines.append(
            "engines   DISAGREE on this model: the expert tensors are "
            + " vs ".join(
                f"{a.family('experts').covered_matrices:,} covered ({a.engine.name})" for a in audits
            )
        )
    # the exit code is the assumed engine's view: said last, so that a clean second view above is not
    # read as the result
    v = r.verdict
    lines.append(f"verdict   {v.outcome} (exit {v.exit_code}, as the assumed engine sees it): {v.reason}")
    return lines


def recipe_json(r: RecipeReport) -> dict[str, Any]:
    recipe, audits, config = r.recipe, r.audits, r.config
    return {
        "recipe": str(recipe.source),
        "kind": recipe.kind,
        "scheme": recipe.scheme,
        "targets": [t for g in recipe.groups for t in g.targets],
        "ignore": list(recipe.ignore),
        "config": config,
        "engines": [
            {
                "engine": a.engine.name,
                "linearizes": a.engine.linearizes,
                "reason": a.engine.reason,
                "total_parameters": a.total_numel,
                "dtype": a.dtype,
                "families": {
                    k: {
                        "tensors": f.matrices,
                        "covered": f.covered_matrices,
                        "ignored": f.ignored_matrices,
                        "parameters": f.numel,
                        "uncovered_parameters": f.uncovered_numel,
                        "bytes": f.numel * a.bytes_per_param if a.bytes_per_param else None,
                        "uncovered_bytes": f.uncovered_numel * a.bytes_per_param
                        if a.bytes_per_param
                        else None,
                    }
                    for k, f in a.families.items()
                },
                "unmatched_targets": a.unmatched_targets,
                "findings": a.findings,
            }
            for a in audits
        ],
        "engines_disagree": len(audits) > 1,
    }


def checkpoint_lines(r: CheckpointReport) -> list[str]:
    folder, a = r.folder, r.audit
    lines = [
        f"checkpoint {folder} (headers only)",
        f"declared  {a.method}; scheme {a.scheme or 'unknown'}",
        f"audited   {a.audited}",
        "          family        quantised tensors        unquantised tensors (ignored)",
    ]
    for f in a.families.values():
        if f.family == "other":
            continue
        lines.append(
            f"          {f.family:<12} {f.quantised_tensors:>8,} {gib(f.quantised_bytes):>12}"
            f"   {f.plain_tensors:>8,} {gib(f.plain_bytes):>12} ({gib(f.ignored_bytes)})"
        )
    size = f"size      {gib(a.total_bytes)} stored"
    size += (
        f"; expected {gib(a.expected_bytes)} if {a.expected_why}"
        if a.expected_bytes is not None
        else f"; expected {a.expected_why}"
    )
    lines.append(size)
    for finding in a.findings or ["none: the large weights are stored quantised or ignored on purpose"]:
        lines.append(f"finding   {finding}")
    return lines


def checkpoint_json(r: CheckpointReport) -> dict[str, Any]:
    folder, a = r.folder, r.audit
    return {
        "checkpoint": str(folder),
        "declared": a.method,
        "scheme": a.scheme,
        "audited": a.audited,
        "total_bytes": a.total_bytes,
        "expected_bytes": a.expected_bytes,
        "expected_why": a.expected_why,
        "families": {
            k: {
                "quantised_tensors": f.quantised_tensors,
                "quantised_bytes": f.quantised_bytes,
                "unquantised_tensors": f.plain_tensors,
                "unquantised_bytes": f.plain_bytes,
                "ignored_bytes": f.ignored_bytes,
            }
            for k, f in a.families.items()
        },
        "suffixed_fused_names": a.suffixed,
        "findings": a.findings,
    }
