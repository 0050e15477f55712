"""`tuneproof quant-audit`: recipes matched with compressed-tensors' rules against the meta module tree
(fused experts skipped by `targets: Linear` unless the engine linearises them), checkpoints from headers."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest

from tiny_models import TINY
from tuneproof.cli.app import main
from tuneproof.core.errors import TuneproofError
from tuneproof.ship import quant
from tuneproof.ship.recipe import read_quant_recipe

RECIPES = Path(__file__).parent.parent / "data" / "quant_recipes"
CASE_CONFIG = Path(__file__).parent.parent.parent / "examples" / "gemma4-26b-a4b-like" / "config.json"
NVFP4 = """
quant_stage:
  quant_modifiers:
    QuantizationModifier:
      targets: Linear
      scheme: NVFP4
      ignore: [lm_head, 're:.*router']
"""


@pytest.fixture(autouse=True)
def _wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests read what the reports say; tests/core/test_output.py holds them to 80 columns."""
    monkeypatch.setenv("COLUMNS", "250")


def _config(tmp_path: Path, family: str) -> Path:
    path = tmp_path / f"{family}.json"
    path.write_text(json.dumps({"model_type": family, **TINY[family]}))
    return path


@pytest.mark.parametrize(
    "name", sorted(p.name for p in RECIPES.iterdir() if p.suffix in (".py", ".yaml", ".json"))
)
def test_real_recipes_from_llm_compressor_and_modelopt_parse(name: str) -> None:
    recipe = read_quant_recipe(RECIPES / name)
    assert recipe.groups and all(g.targets for g in recipe.groups)
    assert "lm_head" in recipe.ignore


def _experts(tmp_path: Path, family: str, engine: str) -> tuple[int, quant.RecipeAudit]:
    (tmp_path / "r.yaml").write_text(NVFP4)
    recipe = read_quant_recipe(tmp_path / "r.yaml")
    config = json.loads(_config(tmp_path, family).read_text())
    audit = quant.audit_recipe(recipe, config, quant.engine(engine))
    return audit.family("experts").covered_matrices, audit


@pytest.mark.parametrize(
    ("family", "moe_layers", "experts"),
    [("qwen3_moe", 1, 4), ("gemma4_text", 3, 4), ("qwen2_moe", 2, 4), ("mixtral", 2, 4), ("gpt_oss", 2, 4)],
)
def test_targets_linear_skips_fused_experts_for_an_engine_that_sees_them(
    family, moe_layers, experts, tmp_path
) -> None:
    covered, audit = _experts(tmp_path, family, "llm-compressor==0.11.0")
    fam = audit.family("experts")
    assert covered == 0 and fam.matrices == 3 * moe_layers * experts
    assert audit.findings[0].startswith(f"experts: 0 of {3 * moe_layers * experts} tensors covered")
    assert "targets='Linear' cannot match fused 3-D expert parameters" in audit.findings[0]
    # a linearising llm-compressor covers every one of them
    covered, audit = _experts(tmp_path, family, "llm-compressor==0.14.0")
    assert (
        covered == 3 * moe_layers * experts and audit.linearized_modules == moe_layers and not audit.findings
    )


def test_the_case_config_reports_11520_expert_tensors(tmp_path: Path, capsys) -> None:
    (tmp_path / "r.yaml").write_text(NVFP4)
    code = main(
        [
            "quant-audit",
            "--recipe",
            str(tmp_path / "r.yaml"),
            "--config",
            str(CASE_CONFIG),
            "--engine",
            "modelopt",
        ]
    )
    out = capsys.readouterr().out
    assert code == 1
    assert "experts: 0 of 11,520 tensors covered (91 % of parameters left unquantised)" in out
    assert "engines   DISAGREE" in out and "11,520 covered (llm-compressor >= 0.12)" in out


def test_the_router_ignore_and_the_head_are_honoured(tmp_path: Path) -> None:
    _, audit = _experts(tmp_path, "qwen3_moe", "llm-compressor==0.14.0")
    assert audit.family("head").ignored_matrices == 1 and audit.family("head").covered_matrices == 0
    assert audit.family("attention").covered_matrices == audit.family("attention").matrices == 8


def test_a_regex_on_fused_experts_matches_the_module_but_covers_nothing(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(NVFP4.replace("targets: Linear", "targets: ['re:.*experts$']"))
    recipe = read_quant_recipe(tmp_path / "r.yaml")
    config = json.loads(_config(tmp_path, "qwen3_moe").read_text())
    audit = quant.audit_recipe(recipe, config, quant.engine("modelopt"))
    assert audit.family("experts").matched_no_weight == 12
    assert "matched by name, but the module holds 3-D parameters" in audit.findings[0]


def test_json_carries_both_engines_and_their_counts(tmp_path: Path, capsys) -> None:
    (tmp_path / "r.yaml").write_text(NVFP4)
    config = _config(tmp_path, "qwen3_moe")
    main(
        [
            "quant-audit",
            "--recipe",
            str(tmp_path / "r.yaml"),
            "--config",
            str(config),
            "--engine",
            "llm-compressor==0.14",
            "--json",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert [e["families"]["experts"]["covered"] for e in data["engines"]] == [12, 0]
    assert data["engines_disagree"] is True


@pytest.mark.parametrize(
    ("spec", "linearizes"),
    [
        ("modelopt", False),
        ("llm-compressor", True),
        ("llm-compressor==0.11.9", False),
        ("llmcompressor@0.12", True),
    ],
)
def test_engine_specs(spec: str, linearizes: bool) -> None:
    assert quant.engine(spec).linearizes is linearizes


def test_a_bad_engine_is_refused(tmp_path: Path, capsys) -> None:
    (tmp_path / "r.yaml").write_text(NVFP4)
    args = ["quant-audit", "--recipe", str(tmp_path / "r.yaml"), "--config", str(_config(tmp_path, "llama"))]
    assert main([*args, "--engine", "vllm"]) == 2
    assert "--engine 'vllm' is not an engine" in capsys.readouterr().err


# --- checkpoints, headers only ---------------------------------------------------------------------------


def _sparse_checkpoint(
    folder: Path, tensors: dict[str, tuple[str, list[int]]], config: dict | None, modelopt: dict | None = None
) -> Path:
    """A safetensors file whose header is real and whose data is a hole: auditing it must not read data."""
    from tuneproof.core.dtypes import SAFETENSORS_BITS

    folder.mkdir()
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        size = (int(__import__("math").prod(shape)) * SAFETENSORS_BITS[dtype] + 7) // 8
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    with (folder / "model.safetensors").open("wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + offset)
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    if modelopt is not None:
        (folder / "hf_quant_config.json").write_text(json.dumps(modelopt))
    return folder


def _ct_config() -> dict:
    return {
        "model_type": "qwen3_moe",
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": "nvfp4-pack-quantized",
            "config_groups": {
                "group_0": {
                    "targets": ["Linear"],
                    "weights": {"num_bits": 4, "type": "float", "group_size": 16},
                }
            },
            "ignore": ["lm_head"],
        },
    }


def _layer_tensors(layers: int, experts: int, experts_packed: bool) -> dict[str, tuple[str, list[int]]]:
    t: dict[str, tuple[str, list[int]]] = {
        "lm_head.weight": ("BF16", [4096, 2048]),
        "model.embed_tokens.weight": ("BF16", [4096, 2048]),
    }
    for i in range(layers):
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            t[f"model.layers.{i}.self_attn.{proj}.weight_packed"] = ("U8", [2048, 1024])
            t[f"model.layers.{i}.self_attn.{proj}.weight_scale"] = ("F8_E4M3", [2048, 128])
            t[f"model.layers.{i}.self_attn.{proj}.weight_global_scale"] = ("F32", [1])
        for e in range(experts):
            for proj in ("gate_proj", "up_proj", "down_proj"):
                key = f"model.layers.{i}.mlp.experts.{e}.{proj}"
                if experts_packed:
                    t[f"{key}.weight_packed"] = ("U8", [768, 1024])
                    t[f"{key}.weight_scale"] = ("F8_E4M3", [768, 128])
                else:
                    t[f"{key}.weight"] = ("BF16", [768, 2048])
    return t


def test_a_checkpoint_that_kept_experts_in_bf16_is_reported_from_headers_alone(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    from tuneproof.ship import tensors

    def no_data(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("the audit read tensor data")

    monkeypatch.setattr(tensors, "read_tensor", no_data)
    monkeypatch.setattr(tensors, "iter_chunks", no_data)
    monkeypatch.setattr(tensors, "read_exact", no_data)  # what both read through
    folder = _sparse_checkpoint(tmp_path / "ck", _layer_tensors(2, 8, experts_packed=False), _ct_config())
    assert main(["quant-audit", "--checkpoint", str(folder)]) == 1
    out = capsys.readouterr().out
    assert "experts: 48 tensors" in out and "stored unquantised and not in the ignore list" in out
    assert re.search(r"attention +8 ", out)  # 8 packed attention weights
    folder = _sparse_checkpoint(tmp_path / "ok", _layer_tensors(2, 8, experts_packed=True), _ct_config())
    assert main(["quant-audit", "--checkpoint", str(folder), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["findings"] == [] and data["families"]["experts"]["quantised_tensors"] == 48
    assert data["families"]["experts"]["unquantised_tensors"] == 0


def test_expected_size_shows_the_bf16_experts(tmp_path: Path, capsys) -> None:
    folder = _sparse_checkpoint(tmp_path / "ck", _layer_tensors(2, 8, experts_packed=False), _ct_config())
    main(["quant-audit", "--checkpoint", str(folder), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["scheme"] == "NVFP4"
    experts_bf16 = 48 * 768 * 2048 * 2
    assert data["total_bytes"] - data["expected_bytes"] == pytest.approx(
        experts_bf16 * (1 - 0.5625 / 2), rel=1e-6
    )


def test_fused_names_with_quantisation_suffixes_are_a_finding(tmp_path: Path, capsys) -> None:
    t = _layer_tensors(1, 0, experts_packed=True)
    t["model.layers.0.mlp.experts.gate_up_proj_packed"] = ("U8", [8, 1536, 1024])
    t["model.layers.0.mlp.experts.gate_up_proj_scale"] = ("F8_E4M3", [8, 1536, 128])
    folder = _sparse_checkpoint(tmp_path / "ck", t, _ct_config())
    assert main(["quant-audit", "--checkpoint", str(folder)]) == 1
    assert (
        "carry quantisation suffixes (model.layers.0.mlp.experts.gate_up_proj_packed)"
        in capsys.readouterr().out
    )


def test_a_modelopt_checkpoint_with_excluded_experts_is_not_a_finding(tmp_path: Path, capsys) -> None:
    t = {
        "model.layers.0.self_attn.q_proj.weight": ("U8", [2048, 1024]),
        "model.layers.0.self_attn.q_proj.weight_scale": ("F8_E4M3", [2048, 128]),
        "model.layers.0.self_attn.q_proj.weight_scale_2": ("F32", []),
        "model.layers.0.mlp.experts.0.down_proj.weight": ("BF16", [2048, 768]),
    }
    excluded = {
        "producer": {"name": "modelopt"},
        "quantization": {"quant_algo": "NVFP4", "exclude_modules": ["model.layers.0.mlp.experts*"]},
    }
    folder = _sparse_checkpoint(tmp_path / "ck", t, {"model_type": "qwen3_moe"}, excluded)
    assert main(["quant-audit", "--checkpoint", str(folder)]) == 0
    assert "declared  ModelOpt; scheme NVFP4" in capsys.readouterr().out


def test_a_checkpoint_with_nothing_declared_says_so(tmp_path: Path, capsys) -> None:
    folder = _sparse_checkpoint(
        tmp_path / "ck", _layer_tensors(1, 2, experts_packed=False), {"model_type": "qwen3_moe"}
    )
    assert main(["quant-audit", "--checkpoint", str(folder)]) == 1
    assert "nothing says how it was quantised" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "suffix", "needle"),
    [
        ("a: [", ".yaml", "not YAML"),
        ("stage: {AWQModifier: {}}", ".yaml", "no quantising modifier"),
        ("QuantizationModifier(targets=TARGETS)", ".py", "computed, not written out"),
        ("def (", ".py", "not valid Python"),
        ("{}", ".json", "holds no quantisation recipe"),
        ("QuantizationModifier(targets=3)", ".py", "not a string or a list of strings"),
        (
            "m: {QuantizationModifier: {targets: Linear, scheme: BOGUS}}",
            ".yaml",
            "not a compressed-tensors preset",
        ),
        (
            "m: {QuantizationModifier: {targets: Linear, ignore: ['re:(unclosed']}}",
            ".yaml",
            "not a valid regex",
        ),
        (
            '{"config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": "four"}}}}',
            ".json",
            "num_bits",
        ),
    ],
)
def test_bad_recipes_are_refused(text: str, suffix: str, needle: str, tmp_path: Path) -> None:
    (tmp_path / f"r{suffix}").write_text(text)
    with pytest.raises(TuneproofError, match=needle):
        read_quant_recipe(tmp_path / f"r{suffix}")


def test_a_modelopt_config_as_recipe_uses_fnmatch_exclusions_and_linear_modules(tmp_path: Path) -> None:
    recipe = tmp_path / "hf_quant_config.json"
    recipe.write_text(
        json.dumps(
            {
                "producer": {"name": "modelopt"},
                "quantization": {"quant_algo": "NVFP4", "exclude_modules": ["lm_head", "*.mlp.gate"]},
            }
        )
    )
    parsed = read_quant_recipe(recipe)
    assert parsed.kind == "modelopt" and quant.engine(None, parsed).name == "modelopt"
    config = json.loads(_config(tmp_path, "qwen3_moe").read_text())
    audit = quant.audit_recipe(parsed, config, quant.engine(None, parsed))
    assert audit.family("experts").covered_matrices == 0 and audit.findings
    assert audit.family("router").ignored_matrices == 1 and audit.family("head").ignored_matrices == 1


def test_a_compressed_tensors_quantization_config_is_a_recipe(tmp_path: Path) -> None:
    recipe = tmp_path / "config.json"
    recipe.write_text(
        json.dumps(
            {
                "model_type": "qwen3_moe",
                "quantization_config": {
                    "quant_method": "compressed-tensors",
                    "ignore": ["lm_head"],
                    "config_groups": {
                        "g": {"targets": ["re:.*self_attn.*"], "weights": {"num_bits": 4, "type": "float"}}
                    },
                },
            }
        )
    )
    parsed = read_quant_recipe(recipe)
    assert parsed.kind == "compressed-tensors" and parsed.groups[0].scheme == "w4-float"
    config = json.loads(_config(tmp_path, "qwen3_moe").read_text())
    audit = quant.audit_recipe(parsed, config, quant.engine("llm-compressor==0.14"))
    assert audit.family("attention").covered_matrices == 8
    assert {f.split(":")[0] for f in audit.findings} == {"experts", "dense MLP"}


def test_bytes_come_from_the_configs_dtype_or_are_unknown(tmp_path: Path, capsys) -> None:
    (tmp_path / "r.yaml").write_text(NVFP4)
    config = _config(tmp_path, "qwen3_moe")
    data = json.loads(config.read_text())
    main(["quant-audit", "--recipe", str(tmp_path / "r.yaml"), "--config", str(config), "--json"])
    assert json.loads(capsys.readouterr().out)["engines"][0]["families"]["experts"]["bytes"] is None
    config.write_text(json.dumps({**data, "dtype": "bfloat16"}))
    main(["quant-audit", "--recipe", str(tmp_path / "r.yaml"), "--config", str(config), "--json"])
    experts = json.loads(capsys.readouterr().out)["engines"][0]["families"]["experts"]
    assert experts["bytes"] == experts["parameters"] * 2 == 3 * 4 * 64 * 32 * 2


def test_a_malformed_quantization_config_in_a_checkpoint_is_refused(tmp_path: Path, capsys) -> None:
    folder = _sparse_checkpoint(
        tmp_path / "ck", _layer_tensors(1, 0, True), {"model_type": "llama", "quantization_config": [1, 2]}
    )
    assert main(["quant-audit", "--checkpoint", str(folder)]) == 2
    assert "quantization_config is a list, not an object" in capsys.readouterr().err


# --- formats quant-audit reads from headers but not as recipes: the published DeepSeek-V3 (fp8) and
# gpt-oss-20b (mxfp4) configs (tests/data/configs, provenance in tests/data/README.md) ---------------------

REAL_CONFIGS = Path(__file__).parent.parent / "data" / "configs"


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("deepseek-v3.json", "fp8 (fmt e4m3, weight_block_size [128, 128], activation_scheme dynamic)"),
        (
            "gpt-oss-20b.json",
            'mxfp4 (modules_to_not_convert ["model.layers.*.self_attn", "model.layers.*.mlp',
        ),
    ],
)
def test_a_config_in_a_format_not_audited_as_a_recipe_is_named(name: str, shown: str, capsys) -> None:
    config = str(REAL_CONFIGS / name)
    assert main(["quant-audit", "--recipe", config, "--config", config]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds no" not in err
    assert f"holds a quantization_config in a format quant-audit does not audit as a recipe, {shown}" in err
    assert "no targets to match against the model" in err and "pass its folder as --checkpoint" in err


def _deepseek_fp8_tensors() -> dict[str, tuple[str, list[int]]]:
    """DeepSeek-V3's release layout, one layer: fp8 weights with a 128x128-block weight_scale_inv."""
    t: dict[str, tuple[str, list[int]]] = {"lm_head.weight": ("BF16", [4096, 512])}
    for proj, shape in (("self_attn.q_a_proj", [256, 512]), ("self_attn.o_proj", [512, 256])):
        t[f"model.layers.0.{proj}.weight"] = ("F8_E4M3", shape)
        t[f"model.layers.0.{proj}.weight_scale_inv"] = (
            "F32",
            [(shape[0] + 127) // 128, (shape[1] + 127) // 128],
        )
    for e in range(4):
        for proj in ("gate_proj", "up_proj", "down_proj"):
            t[f"model.layers.0.mlp.experts.{e}.{proj}.weight"] = ("F8_E4M3", [256, 512])
            t[f"model.layers.0.mlp.experts.{e}.{proj}.weight_scale_inv"] = ("F32", [2, 4])
    return t


def _gpt_oss_mxfp4_tensors() -> dict[str, tuple[str, list[int]]]:
    """gpt-oss's release layout, one layer: bf16 attention and router, mxfp4 experts (_blocks, _scales)."""
    t: dict[str, tuple[str, list[int]]] = {"lm_head.weight": ("BF16", [4096, 512])}
    for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
        t[f"model.layers.0.self_attn.{proj}.weight"] = ("BF16", [512, 512])
    t["model.layers.0.mlp.router.weight"] = ("BF16", [8, 512])
    for proj, rows in (("gate_up_proj", 1024), ("down_proj", 512)):
        t[f"model.layers.0.mlp.experts.{proj}_blocks"] = ("U8", [8, rows, 16, 16])
        t[f"model.layers.0.mlp.experts.{proj}_scales"] = ("U8", [8, rows, 16])
        t[f"model.layers.0.mlp.experts.{proj}_bias"] = ("BF16", [8, rows])
    return t


def test_deepseek_v3s_fp8_checkpoint_is_read_as_stored_fp8(tmp_path: Path, capsys) -> None:
    config = json.loads((REAL_CONFIGS / "deepseek-v3.json").read_text())
    folder = _sparse_checkpoint(tmp_path / "ck", _deepseek_fp8_tensors(), config)
    assert main(["quant-audit", "--checkpoint", str(folder), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["declared"] == "fp8 (fmt e4m3, weight_block_size [128, 128], activation_scheme dynamic)"
    assert d["scheme"] == "FP8" and "weight_scale_inv" in d["audited"] and "not audited" in d["audited"]
    assert (
        d["families"]["experts"]["quantised_tensors"] == 12
        and d["families"]["attention"]["quantised_tensors"] == 2
    )


def test_gpt_oss_mxfp4_checkpoint_reads_its_blocks_and_modules_to_not_convert(tmp_path: Path, capsys) -> None:
    config = json.loads((REAL_CONFIGS / "gpt-oss-20b.json").read_text())
    folder = _sparse_checkpoint(tmp_path / "ck", _gpt_oss_mxfp4_tensors(), config)
    assert main(["quant-audit", "--checkpoint", str(folder)]) == 0  # bf16 attention: not converted on purpose
    out = capsys.readouterr().out
    assert "declared  mxfp4 (modules_to_not_convert" in out and "scheme MXFP4" in out
    assert re.search(r"experts +24 ", out)  # 8 experts x (gate and up) + 8 x down, from the _blocks
    config["quantization_config"]["modules_to_not_convert"] = ["lm_head"]
    folder = _sparse_checkpoint(tmp_path / "ck2", _gpt_oss_mxfp4_tensors(), config)
    assert main(["quant-audit", "--checkpoint", str(folder)]) == 1
    assert "attention: 4 tensors" in capsys.readouterr().out


def test_a_format_whose_layout_is_not_read_says_so(tmp_path: Path, capsys) -> None:
    config = {
        "model_type": "llama",
        "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128},
    }
    folder = _sparse_checkpoint(
        tmp_path / "ck", {"model.layers.0.self_attn.q_proj.qweight": ("I32", [64, 512])}, config
    )
    main(["quant-audit", "--checkpoint", str(folder)])
    out = capsys.readouterr().out
    assert "declared  gptq (bits 4, group_size 128)" in out
    assert "a format whose storage layout quant-audit does not read" in " ".join(out.split())
