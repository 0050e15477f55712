"""Quantisation recipes read without running them: what each quantising modifier targets and ignores.

Accepted:
- llm-compressor YAML recipes (`*_stage: *_modifiers: QuantizationModifier: {targets, ignore, scheme,
  config_groups}`), walked for every `...Modifier` key that quantises;
- llm-compressor Python scripts, parsed with `ast` (never executed): every call to a
  `QuantizationModifier` / `GPTQModifier` / ... with literal `targets`, `ignore`, `scheme`, `config_groups`;
- a compressed-tensors `quantization_config` (a JSON file of it, or a config.json holding one);
- a ModelOpt `hf_quant_config.json` (`quantization.quant_algo`, `exclude_modules` fnmatch patterns).
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuneproof.arch.quantization import stored_quantisation
from tuneproof.core.errors import TuneproofError
from tuneproof.core.extras import require

# Modifiers that quantise weights (llm-compressor `modifiers/quantization`, `modifiers/gptq`, `modifiers/awq`
# applies scales only and takes no scheme of its own).
QUANTISING = ("QuantizationModifier", "GPTQModifier", "QuantizationMixin", "AutoRoundModifier")


@dataclass(frozen=True, slots=True)
class Group:
    targets: tuple[str, ...]
    scheme: str  # preset name ("NVFP4") or a short description of the weights' args


@dataclass(kw_only=True, frozen=True, slots=True)
class QuantRecipe:
    source: Path
    kind: str  # "llm-compressor" | "compressed-tensors" | "modelopt"
    groups: tuple[Group, ...]
    ignore: tuple[
        str, ...
    ]  # compressed-tensors rules (exact name, "re:" prefix, class name); ModelOpt: fnmatch

    @property
    def scheme(self) -> str:
        return ", ".join(sorted({g.scheme for g in self.groups}))


def read_quant_recipe(path: Path) -> QuantRecipe:
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise TuneproofError(
            f"cannot read recipe {path}: {getattr(e, 'strerror', None) or 'not text'}", "pass a recipe file"
        ) from None
    if path.suffix == ".py":
        return _from_python(path, text)
    if path.suffix in (".yaml", ".yml"):
        require("quant", "reading a YAML recipe", ("yaml",))
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise TuneproofError(f"{path} is not YAML: {str(e).splitlines()[0]}", "fix the recipe") from None
        return _from_mapping(path, data, "llm-compressor")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise TuneproofError(
            f"{path} is neither YAML, Python nor JSON by its name and content",
            "pass a .yaml/.py llm-compressor recipe, a quantization_config JSON or an hf_quant_config.json",
        ) from None
    if isinstance(data, dict) and isinstance(data.get("quantization"), dict) and "producer" in data:
        return _from_modelopt(path, data)
    if isinstance(data, dict) and stored_quantisation(data) is not None:  # a config.json holding one
        inner = data.get("text_config")
        data = data.get("quantization_config") or (
            inner.get("quantization_config") if isinstance(inner, dict) else None
        )
    if isinstance(data, dict) and "config_groups" in data:
        return _from_config_groups(path, data, data.get("ignore"), "compressed-tensors")
    if isinstance(data, dict) and "quant_method" in data:
        raise _unaudited_format(path, data)
    raise TuneproofError(
        f"{path} holds no quantisation recipe (no config_groups, quantization_config or ModelOpt "
        "quantization)",
        "pass a recipe file",
    )


def _unaudited_format(path: Path, q: dict[str, Any]) -> TuneproofError:
    """A quantization_config in a format whose targets are not written in it (fp8, mxfp4, gptq, ...):
    named with its key fields, and what quant-audit does audit for it."""
    stored = stored_quantisation({"quantization_config": q})
    assert stored is not None
    what = f" ({stored.format.what})" if stored.format is not None else ""
    return TuneproofError(
        f"{path} holds a quantization_config in a format quant-audit does not audit as a recipe, "
        f"{stored.describe()}{what}: transformers' quantizer for the format decides which modules it "
        "quantises (the config does not write them), so there are no targets to match against the model "
        "(audited as recipes: llm-compressor recipes, compressed-tensors config_groups, ModelOpt "
        "hf_quant_config.json)",
        "to audit what a checkpoint in this format stores, pass its folder as {checkpoint}",
        fields=("checkpoint",),
    )


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise TuneproofError(f"{where} is {value!r}, not a string or a list of strings", "fix the recipe")


def _from_mapping(path: Path, data: Any, kind: str) -> QuantRecipe:
    modifiers: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if isinstance(key, str) and key.startswith(QUANTISING) and isinstance(value, dict):
                    modifiers.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(data)
    return _from_modifiers(path, modifiers, kind)


def _from_modifiers(path: Path, modifiers: list[dict[str, Any]], kind: str) -> QuantRecipe:
    for mod in modifiers:
        _check_modifier(path, mod)
    if not modifiers:
        raise TuneproofError(
            f"{path} has no quantising modifier ({', '.join(QUANTISING[:2])}, ...)",
            "pass a quantisation recipe",
        )
    groups: list[Group] = []
    ignore: list[str] = []
    for mod in modifiers:
        ignore += _strings(mod.get("ignore"), f"{path}: ignore")
        if mod.get("config_groups"):
            groups += _from_config_groups(path, mod, None, kind).groups
        else:
            targets = _strings(mod.get("targets", "Linear"), f"{path}: targets")
            scheme = mod.get("scheme")
            if isinstance(scheme, dict):  # {"NVFP4": ["Linear"]}: scheme name -> targets
                groups += [Group(_strings(t, f"{path}: scheme {s}"), str(s)) for s, t in scheme.items()]
            else:
                groups.append(Group(targets, str(scheme) if scheme else "?"))
    return _check_patterns(QuantRecipe(source=path, kind=kind, groups=tuple(groups), ignore=tuple(ignore)))


def _check_modifier(path: Path, mod: dict[str, Any]) -> None:
    """A preset scheme must be one compressed-tensors knows; `re:` patterns must compile."""
    scheme = mod.get("scheme")
    names = list(scheme) if isinstance(scheme, dict) else [scheme] if scheme is not None else []
    presets = _presets()
    for name in names:
        if not isinstance(name, str) or (presets and name.upper() not in presets):
            raise TuneproofError(
                f"{path}: scheme {name!r} is not a compressed-tensors preset",
                f"use one of {', '.join(sorted(presets)[:12])}, ... or write config_groups",
            )


def _presets() -> set[str]:
    try:
        from compressed_tensors.quantization.quant_scheme import PRESET_SCHEMES
    except ImportError:
        return set()
    return {str(k).upper() for k in PRESET_SCHEMES}


def _check_patterns(recipe: QuantRecipe) -> QuantRecipe:
    for pattern in [t for g in recipe.groups for t in g.targets] + list(recipe.ignore):
        if recipe.kind != "modelopt" and pattern.startswith("re:"):
            try:
                re.compile(pattern[3:])
            except re.error as e:
                raise TuneproofError(
                    f"{recipe.source}: {pattern!r} is not a valid regex ({e})", "fix the pattern"
                ) from None
    return recipe


def _from_config_groups(path: Path, data: dict[str, Any], ignore: Any, kind: str) -> QuantRecipe:
    groups = []
    cg = data.get("config_groups")
    if not isinstance(cg, dict) or not cg:
        raise TuneproofError(f"{path}: config_groups is {cg!r}, not a mapping of groups", "fix the recipe")
    for name, group in cg.items():
        if isinstance(group, list):
            groups.append(Group(_strings(group, f"{path}: {name}"), str(name)))
            continue
        if not isinstance(group, dict):
            raise TuneproofError(f"{path}: config group {name!r} is not a mapping", "fix the recipe")
        weights = group.get("weights") or {}
        bits = weights.get("num_bits") if isinstance(weights, dict) else None
        if bits is not None and (isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= 32):
            raise TuneproofError(
                f"{path}: {name}.weights.num_bits is {bits!r}", "num_bits is an integer, 1 to 32"
            )
        desc = (
            f"w{weights.get('num_bits', '?')}-{weights.get('type', 'int')}"
            + (f"-g{weights['group_size']}" if weights.get("group_size") else "")
            if isinstance(weights, dict)
            else str(name)
        )
        groups.append(Group(_strings(group.get("targets"), f"{path}: {name}.targets"), desc))
    return _check_patterns(
        QuantRecipe(source=path, kind=kind, groups=tuple(groups), ignore=_strings(ignore, f"{path}: ignore"))
    )


def _from_modelopt(path: Path, data: dict[str, Any]) -> QuantRecipe:
    q = data["quantization"]
    algo = q.get("quant_algo")
    if not isinstance(algo, str):
        raise TuneproofError(
            f"{path}: quantization.quant_algo is {algo!r}", "pass a ModelOpt hf_quant_config.json"
        )
    # ModelOpt's quantizers attach to nn.Linear modules (without a per-architecture plugin)
    return QuantRecipe(
        source=path,
        kind="modelopt",
        groups=(Group(("Linear",), algo),),
        ignore=_strings(q.get("exclude_modules"), f"{path}: exclude_modules"),
    )


def _from_python(path: Path, text: str) -> QuantRecipe:
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as e:
        raise TuneproofError(
            f"{path} is not valid Python (line {e.lineno})", "fix the recipe script"
        ) from None
    modifiers = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if not name.startswith(QUANTISING):
            continue
        fields: dict[str, Any] = {}
        for kw in node.keywords:
            if kw.arg in ("targets", "ignore", "scheme", "config_groups"):
                try:
                    fields[kw.arg] = ast.literal_eval(kw.value)
                except ValueError:
                    raise TuneproofError(
                        f"{path} line {kw.value.lineno}: {name}({kw.arg}=...) is computed, not written out",
                        "write the value as a literal so it can be read without running the script",
                    ) from None
        modifiers.append(fields)
    return _from_modifiers(path, modifiers, "llm-compressor")
