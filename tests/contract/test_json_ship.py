"""The shipping commands tell the library's story: each `--json` output is exactly the library result's
`to_dict()` (`lora check`, `fingerprint`, `fingerprint --compare`, `merge`, `quant-audit --recipe`,
`quant-audit --checkpoint`). Where the two runs must write to different places, that path is
normalised."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import ship_fakes as fx
from tiny_models import TINY
from tuneproof.cli.app import main
from tuneproof.commands import fingerprint as record
from tuneproof.commands import lora
from tuneproof.commands import merge as m
from tuneproof.commands import quant_audit as qa

NVFP4 = """
quant_stage:
  quant_modifiers:
    QuantizationModifier:
      targets: Linear
      scheme: NVFP4
      ignore: [lm_head, 're:.*router']
"""


def _json(args: list[str], capsys: pytest.CaptureFixture[str], code: int = 0) -> Any:
    capsys.readouterr()
    assert main([*args, "--json"]) == code
    return json.loads(capsys.readouterr().out)


def _strict(data: dict[str, Any]) -> Any:
    """The library's dict as --json prints it (strict JSON: a NaN or inf is null)."""
    from tuneproof.core.io import dumps

    return json.loads(dumps(data))


@pytest.fixture
def llama_pair(tmp_path: Path) -> tuple[Path, Path]:
    base = fx.save(fx.model("llama"), tmp_path / "base")
    fx.adapter(fx.model("llama"), tmp_path / "adapter")
    return base, tmp_path / "adapter"


def test_lora_check_json_is_the_health_to_dict(llama_pair: tuple[Path, Path], capsys) -> None:
    base, adapter = llama_pair
    result = lora.run(lora.prepare(lora.CheckSpec(adapter_dir=adapter, base=base)))
    assert _json(["lora", "check", str(adapter), "--base", str(base)], capsys) == _strict(result.to_dict())
    assert result.verdict.outcome == "HEALTHY" and result.to_dict()["exit_code"] == 0


def test_fingerprint_json_is_the_recorded_to_dict(tmp_path: Path, capsys) -> None:
    base = fx.save(fx.model("llama"), tmp_path / "base")
    result = record.run(record.prepare(record.FingerprintSpec(model_dir=base, out=tmp_path / "lib.json")))
    shown = _json(["fingerprint", str(base), "--out", str(tmp_path / "cli.json")], capsys)
    assert shown.pop("out") == str(tmp_path / "cli.json")
    expected = _strict(result.to_dict())
    assert expected.pop("out") == str(tmp_path / "lib.json") and shown == expected
    assert json.loads((tmp_path / "cli.json").read_text()) == json.loads((tmp_path / "lib.json").read_text())
    assert result.verdict is None


def test_fingerprint_compare_json_is_the_comparison_to_dict(tmp_path: Path, capsys) -> None:
    base = fx.save(fx.model("llama"), tmp_path / "base")
    edited = fx.model("llama")
    with torch.no_grad():
        edited.model.layers[0].mlp.down_proj.weight.add_(0.01)
    fx.save(edited, tmp_path / "edited")
    spec = record.FingerprintSpec(compare=(base, tmp_path / "edited"))
    result = record.run(record.prepare(spec))
    shown = _json(["fingerprint", "--compare", str(base), str(tmp_path / "edited")], capsys, code=1)
    assert shown == _strict(result.to_dict()) and shown["characterisation"] is not None
    assert result.verdict.outcome == "DIFFERENT" and result.verdict.exit_code == 1


def test_merge_json_is_the_merge_result_to_dict(
    llama_pair: tuple[Path, Path], tmp_path: Path, capsys
) -> None:
    base, adapter = llama_pair
    result = m.run(m.prepare(m.MergeSpec(base=base, adapter_dir=adapter, out=tmp_path / "lib", dtype="bf16")))
    args = ["merge", "--base", str(base), "--adapter", str(adapter), "--out", str(tmp_path / "cli")]
    shown = _json([*args, "--dtype", "bf16"], capsys)
    assert shown.pop("out") == str(tmp_path / "cli")
    expected = _strict(result.to_dict())
    assert expected.pop("out") == str(tmp_path / "lib")
    # times differ run to run: the same keys, each a number of seconds
    times, expected_times = shown.pop("seconds"), expected.pop("seconds")
    assert (
        times.keys()
        == expected_times.keys()
        == {"plan", "imports", "stream", "finish", "busy", "by_thread", "bound"}
    )
    assert times["busy"].keys() == expected_times["busy"].keys() >= {"read", "delta", "write", "fsync"}
    assert all(v >= 0 for v in [*times["busy"].values(), times["plan"], times["stream"]])
    assert times["by_thread"].keys() == {"reading", "changing", "writing"}
    assert times["bound"] is None  # a stream this short is bound by nothing worth naming
    assert shown == expected
    assert shown["warnings"] and shown["base_identity"] == "unchecked"  # no fingerprint was recorded


def test_quant_audit_recipe_json_is_the_recipe_report_to_dict(tmp_path: Path, capsys) -> None:
    (tmp_path / "r.yaml").write_text(NVFP4)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "qwen3_moe", **TINY["qwen3_moe"]}))
    engine = "llm-compressor==0.11.0"  # the fused view: the engines disagree, both are reported
    result = qa.run(qa.prepare(qa.AuditSpec(recipe=tmp_path / "r.yaml", config=config, engine=engine)))
    args = ["quant-audit", "--recipe", str(tmp_path / "r.yaml"), "--config", str(config), "--engine", engine]
    shown = _json(args, capsys, code=1)
    assert shown == _strict(result.to_dict()) and shown["engines_disagree"] is True
    assert result.verdict.outcome == "FINDING"


def test_quant_audit_checkpoint_json_is_the_checkpoint_report_to_dict(tmp_path: Path, capsys) -> None:
    folder = fx.save(fx.model("llama"), tmp_path / "ck")
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized"}
    (folder / "config.json").write_text(json.dumps(config))
    result = qa.run(qa.prepare(qa.AuditSpec(checkpoint=folder)))
    shown = _json(["quant-audit", "--checkpoint", str(folder)], capsys, code=result.verdict.exit_code)
    assert shown == _strict(result.to_dict()) and shown["checkpoint"] == str(folder)
