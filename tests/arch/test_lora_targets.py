"""The one home of what a LoRA adapts (`tuneproof.arch.targets`) equals PEFT's own resolution:
`get_peft_model` on each config of tests/data/configs built on the meta device, for all-linear, lists,
regexes and target parameters, MoE experts, routers and PEFT's transformers-5 conversion included, rank
for rank. Where PEFT raises, tuneproof refuses too; where tuneproof is stricter (a listed name that
matches nothing), the modules it adapts are still PEFT's."""

from __future__ import annotations

import json
import re
import warnings
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tuneproof.arch import resolve
from tuneproof.arch.targets import (
    MOE_FUSED,
    MOE_NAMES,
    MOE_PATTERN,
    PEFT_MAMBA_TYPES,
    LoraTargets,
    adaptation,
    check,
    parameter_path,
)
from tuneproof.core.errors import TuneproofError

CONFIGS = Path(__file__).resolve().parent.parent / "data" / "configs"
NAMES = sorted(
    p.stem for p in CONFIGS.glob("*.json") if isinstance(json.loads(p.read_text()).get("model_type"), str)
)
R = 8
ATTN = ["q_proj", "k_proj", "v_proj", "o_proj"]
MLP = ["gate_proj", "up_proj", "down_proj"]


@cache
def _text(name: str) -> Any:
    from transformers import AutoConfig

    data = json.loads((CONFIGS / f"{name}.json").read_text())
    fields = {k: v for k, v in data.items() if k not in ("quantization_config", "model_type")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = AutoConfig.for_model(data["model_type"], **fields)
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg


def _peft(name: str, setting: dict[str, Any]) -> dict[tuple[int | None, str], int] | str:
    """{(layer index or None, path inside it): rank} PEFT adapts, or its error."""
    from peft import LoraConfig, get_peft_model
    from peft.tuners.lora import LoraLayer, ParamWrapper

    from tuneproof.arch.construct import decoder_layers, meta_model
    from tuneproof.arch.sublayers import layer_count

    model = meta_model(_text(name))
    prefix, _ = decoder_layers(model, layer_count(_text(name)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            wrapped = get_peft_model(model, LoraConfig(r=R, **setting), low_cpu_mem_usage=True)
        except Exception as e:
            return f"{type(e).__name__}: {e}"
    found: dict[tuple[int | None, str], int] = {}
    for full, module in wrapped.base_model.model.named_modules():
        if not isinstance(module, LoraLayer):
            continue
        path = full.replace(".base_layer", "")
        if isinstance(module, ParamWrapper):
            path = f"{path}.{module.parameter_name}"
        match = re.match(rf"{re.escape(prefix)}\.(\d+)\.(.+)$", path)
        key = (int(match.group(1)), match.group(2)) if match else (None, path)
        found[key] = int(module.r["default"])
    return found


def _ours(name: str, targets: LoraTargets) -> dict[tuple[int | None, str], int]:
    shape = resolve(CONFIGS / f"{name}.json").shape
    got = adaptation(shape, targets)
    out: dict[tuple[int | None, str], int] = {}
    for (index, inside), place in got.places.items():
        if place.how == "module":
            out[(index, inside)] = place.rank
        elif place.how == "parameter":
            lin = next(lin for lin in shape.linears if lin.name == inside)
            out[(index, parameter_path(lin))] = place.rank
    return out


def _experts(name: str) -> list[str]:
    """The family's own fused expert parameters, as '.'-suffixes (`experts.gate_up_proj`)."""
    shape = resolve(CONFIGS / f"{name}.json").shape
    return sorted({"experts." + lin.name.rpartition(".")[2] for lin in shape.linears if lin.num_experts > 1})


SETTINGS: dict[str, tuple[dict[str, Any], LoraTargets]] = {
    "all-linear": ({"target_modules": "all-linear"}, LoraTargets(rank=R)),
    "attention": ({"target_modules": ATTN}, LoraTargets(modules=tuple(ATTN), rank=R)),
    "attention+mlp": ({"target_modules": ATTN + MLP}, LoraTargets(modules=(*ATTN, *MLP), rank=R)),
    "regex": (
        {"target_modules": r".*\.layers\.[013]\.self_attn\.(q|v)_proj"},
        LoraTargets(modules=(), regex=r".*\.layers\.[013]\.self_attn\.(q|v)_proj", rank=R),
    ),
}


def _compare(name: str, setting: dict[str, Any], targets: LoraTargets) -> None:
    peft = _peft(name, setting)
    shape = resolve(CONFIGS / f"{name}.json").shape
    if isinstance(peft, str):  # PEFT raises: tuneproof refuses, or (Mamba's all-linear) says why not
        if shape.model_type in PEFT_MAMBA_TYPES and targets.all_linear:
            assert "out_proj" in peft
            assert any("raises" in n for n in adaptation(shape, targets).notes)
            return
        with pytest.raises(TuneproofError):
            check(shape, targets, "lora")
        return
    assert _ours(name, targets) == peft


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("name", NAMES)
def test_the_home_adapts_what_peft_adapts(name: str, setting: str) -> None:
    _compare(name, *SETTINGS[setting])


@pytest.mark.parametrize("name", [n for n in NAMES if resolve(CONFIGS / f"{n}.json").shape.has_experts])
def test_target_parameters_adapt_what_peft_adapts(name: str) -> None:
    params = _experts(name)
    _compare(
        name,
        {"target_modules": ["q_proj"], "target_parameters": params},
        LoraTargets(modules=("q_proj",), parameters=tuple(params), rank=R),
    )


def test_mamba_all_linear_is_peft_with_out_proj_excluded() -> None:
    name = "nemotron-3-nano-30b-a3b"
    excluded = _peft(name, {"target_modules": "all-linear", "exclude_modules": ["out_proj"]})
    assert _ours(name, LoraTargets(rank=R)) == excluded


def test_the_conversion_tables_are_the_installed_transformers_and_peft() -> None:
    from peft.utils import transformers_weight_conversion as conversion
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping

    live = {
        model_type: base
        for model_type, base in conversion._MODEL_TO_CONVERSION_PATTERN.items()
        if base in conversion._MOE_TARGET_MODULE_MAPPING and get_checkpoint_conversion_mapping(model_type)
    }
    assert live == MOE_PATTERN
    assert conversion._MOE_TARGET_MODULE_MAPPING == MOE_NAMES
    assert {
        k: {n: tuple(v) for n, v in d.items()} for k, d in conversion._MOE_FUSED_TARGETS.items()
    } == MOE_FUSED


def test_all_linear_on_a_converted_moe_adapts_the_experts_the_router_and_doubles_gate_up() -> None:
    """The issue's trap: PEFT's all-linear on Mixtral and Qwen3-MoE wraps the fused experts too."""
    for name in ("mixtral-8x7b", "qwen3-30b-a3b"):
        ours = _ours(name, LoraTargets(rank=R))
        assert ours[(0, "mlp.experts.gate_up_proj")] == 2 * R
        assert ours[(0, "mlp.experts.down_proj")] == R
        assert ours[(0, "mlp.gate.weight")] == R


def test_one_half_of_a_fused_pair_is_refused_as_peft_refuses_it() -> None:
    shape = resolve(CONFIGS / "qwen3-30b-a3b.json").shape
    with pytest.raises(TuneproofError, match="without up_proj"):
        adaptation(shape, LoraTargets(modules=("q_proj", "gate_proj"), rank=R))
    assert "ValueError" in str(_peft("qwen3-30b-a3b", {"target_modules": ["q_proj", "gate_proj"]}))


def test_a_router_that_subclasses_linear_is_wrapped_and_said_to_fail() -> None:
    shape = resolve(CONFIGS / "llama-4-scout.json").shape
    found = adaptation(shape, LoraTargets(rank=R))
    assert any("feed_forward.router" in f and "first forward fails" in f for f in found.findings)
