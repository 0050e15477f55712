"""A base already stored quantised (the published DeepSeek-V3 fp8 and gpt-oss-20b mxfp4 configs in
tests/data/configs) loaded for QLoRA: transformers 5.24 refuses the load, and preflight says so before
launch, naming the stored format."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import test_preflight
from test_preflight import DATA, _findings

from tuneproof.arch.quantization import stored_quantisation
from tuneproof.preflight.base_quant import base_quantisation
from tuneproof.preflight.sections import Section
from tuneproof.runs.run import Run


def _section(run: Run, config: dict[str, Any]) -> Section | None:
    """The quantised-base section as preflight builds it: none for a base stored unquantised."""
    stored = stored_quantisation(config)
    return None if stored is None else base_quantisation(run, stored)


hub = test_preflight.hub  # the fake Hugging Face cache of the bases' published config.json

QLORA = Run(source="r.yml", kind="axolotl", base_model="b", seq_len=512, adapter="qlora", load_in_4bit=True)


def _config(name: str) -> dict:  # type: ignore[type-arg]
    return json.loads((DATA / "configs" / name).read_text())


@pytest.mark.parametrize(
    ("name", "cls"), [("deepseek-v3.json", "FineGrainedFP8Config"), ("gpt-oss-20b.json", "Mxfp4Config")]
)
def test_the_trap_is_real_transformers_refuses_bitsandbytes_on_these_bases(name: str, cls: str) -> None:
    from transformers import BitsAndBytesConfig
    from transformers.quantizers.auto import AutoHfQuantizer

    qc = _config(name)["quantization_config"]
    with pytest.raises(ValueError, match=f"The model is quantized with {cls} but you are passing a Bits"):
        AutoHfQuantizer.merge_quantization_configs(qc, BitsAndBytesConfig(load_in_4bit=True))
    assert not AutoHfQuantizer.supports_quant_method({"quant_method": "modelopt"})  # skipped, not refused


def test_qlora_on_deepseek_v3s_fp8_release_names_the_format_and_the_refusal() -> None:
    s = _section(QLORA, _config("deepseek-v3.json"))
    assert s is not None and s.data["quant_method"] == "fp8"
    assert s.findings == [
        "r.yml: base stored quantised, fp8 (fmt e4m3, weight_block_size [128, 128], "
        "activation_scheme dynamic): "
        "adapter: qlora with load_in_4bit makes Axolotl 0.19 pass a BitsAndBytesConfig, and bitsandbytes "
        "cannot quantise it again: transformers 5.24 refuses the load ('The model is quantized with "
        "FineGrainedFP8Config but you are passing a BitsAndBytesConfig config', "
        "AutoHfQuantizer.merge_quantization_configs); to train on it, dequantise at load "
        "(model_quantization_config: FineGrainedFP8Config with model_quantization_config_kwargs "
        "{dequantize: true}, and adapter: lora without load_in_4bit; Axolotl's gpt-oss examples do this with "
        "Mxfp4Config)"
    ]


@pytest.mark.parametrize(
    ("qc", "fragment"),
    [
        ({"quant_method": "gptq", "bits": 4, "group_size": 128}, "loads it with its own config (GPTQConfig"),
        ({"quant_method": "awq", "bits": 4}, "the adapter trains on the stored awq weights"),
        ({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized"}, "CompressedTensorsConfig"),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "does not know quant_method 'modelopt'"),
        ({"bits": 4}, "names no quant_method"),
    ],
)
def test_each_stored_format_says_what_loading_it_for_qlora_does(qc: dict, fragment: str) -> None:  # type: ignore[type-arg]
    s = _section(QLORA, {"model_type": "llama", "quantization_config": qc})
    assert s is not None and len(s.findings) == 1 and fragment in s.findings[0], s.findings


def test_no_finding_without_bitsandbytes_or_on_a_bitsandbytes_base() -> None:
    plain = Run(source="r.yml", kind="axolotl", base_model="b", seq_len=512, adapter="lora")
    s = _section(plain, _config("gpt-oss-20b.json"))
    assert s is not None and not s.findings and "mxfp4 (modules_to_not_convert" in s.lines[0]
    bnb = {"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True}}
    s = _section(QLORA, bnb)
    assert s is not None and not s.findings and "BitsAndBytesConfig of config.json's" in s.lines[1]
    assert _section(QLORA, _config("llama-3.1-8b.json")) is None
    text = {"text_config": {"quantization_config": {"quant_method": "fp8", "fmt": "e4m3"}}}
    s = _section(QLORA, text)  # transformers looks in the text config too
    assert s is not None and "text_config.quantization_config" in s.lines[0] and s.findings


def test_axolotls_gpt_oss_example_turned_to_qlora_is_a_finding(
    tmp_path: Path, capsys, monkeypatch, hub
) -> None:
    example = (DATA / "axolotl" / "examples" / "gpt-oss__gpt-oss-20b-sft-lora-singlegpu.yaml").read_text()
    _, d = _findings(tmp_path, example, capsys, monkeypatch, hub)
    assert d["sections"]["quantised base"]["quant_method"] == "mxfp4"
    assert not any("base stored quantised" in f for f in d["findings"])  # dequantised at load: no finding
    qlora = example.replace("adapter: lora", "adapter: qlora\nload_in_4bit: true")
    code, d = _findings(tmp_path, qlora, capsys, monkeypatch, hub)
    found = [f for f in d["findings"] if "base stored quantised" in f]
    assert code == 1 and len(found) == 1 and "The model is quantized with Mxfp4Config" in found[0]
