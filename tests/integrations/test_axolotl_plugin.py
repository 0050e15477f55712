"""The Axolotl plugin through Axolotl's own code: `load_cfg` (plugin registration, the plugin's args
merged into Axolotl's schema, validate_config, normalize_config), Axolotl's trainer builder, and a
3-step LoRA run on the CPU through `axolotl.train.train`, on a tiny llama with random weights saved to
a tmp folder (nothing downloaded). Runs in its own venv: `make test-axolotl` (Axolotl 0.19 pins its
own transformers, peft and accelerate, see dev/axolotl-requirements.txt)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

os.environ.setdefault("AXOLOTL_DO_NOT_TRACK", "1")  # no telemetry calls from a test (read at import)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

pytest.importorskip(
    "axolotl.integrations.base",
    reason="Axolotl is not installed here: `make test-axolotl` runs this file in .venv-axolotl",
)

PLUGIN = "tuneproof.integrations.axolotl.TuneproofPlugin"
ROWS = 48


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny llama (random weights) with tuneproof's byte tokenizer, and a local jsonl of texts."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from tuneproof.gate.generate import tiny_tokenizer

    root = tmp_path_factory.mktemp("axolotl")
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=259, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, pad_token_id=0, eos_token_id=1, bos_token_id=2,
    )  # fmt: skip
    tok = tiny_tokenizer()
    tok.padding_side = "right"
    LlamaForCausalLM(config).save_pretrained(root / "tiny")
    tok.save_pretrained(root / "tiny")
    with open(root / "data.jsonl", "w") as f:
        for i in range(ROWS):
            f.write(json.dumps({"text": "hello world " * (1 + i % 9)}) + "\n")
    return root


def _yaml(folder: Path, name: str, **extra: Any) -> Path:
    """An Axolotl YAML for 3 LoRA steps on the CPU (Axolotl's LoRA triton kernels off: CUDA only)."""
    cfg: dict[str, Any] = {
        "base_model": str(folder / "tiny"),
        "plugins": [PLUGIN],
        "datasets": [{"path": str(folder / "data.jsonl"), "ds_type": "json", "type": "completion"}],
        "output_dir": str(folder / f"out-{name}"),
        "sequence_len": 128,
        "micro_batch_size": 2,
        "gradient_accumulation_steps": 2,
        "max_steps": 3,
        "num_epochs": 1,
        "learning_rate": 1e-4,
        "optimizer": "adamw_torch",
        "lr_scheduler": "constant",
        "logging_steps": 1,
        "save_strategy": "no",
        "bf16": False,
        "fp16": False,
        "tf32": False,
        "sample_packing": False,
        "dataset_num_proc": 1,
        "adapter": "lora",
        "lora_r": 4,
        "lora_alpha": 8,
        "lora_target_linear": True,
        "lora_mlp_kernel": False,
        "lora_qkv_kernel": False,
        "lora_o_kernel": False,
        **extra,
    }
    import yaml

    path = folder / f"{name}.yml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture
def lines(monkeypatch) -> Any:
    """What the plugin logs through Axolotl's logger, one string per line."""
    from axolotl.utils.logging import MultiProcessAdapter

    import tuneproof.integrations.axolotl as module

    assert isinstance(module.LOG, MultiProcessAdapter)  # Axolotl's: main process only, in its log files
    assert module.LOG.logger.name == "axolotl.integrations.tuneproof"  # shown at INFO by Axolotl's config
    records: list[str] = []
    keep = SimpleNamespace(info=records.append, warning=records.append)
    monkeypatch.setattr(module, "LOG", keep)
    return records


def _plugin() -> Any:
    from axolotl.integrations.base import PluginManager

    return PluginManager.get_instance().plugins[PLUGIN]


def _dataset(folder: Path) -> Any:
    """The jsonl tokenized by the tiny tokenizer, as Axolotl's completion prompt strategy leaves it
    (Axolotl's own pipeline saves it with a spawn pool, which re-imports pytest in each child)."""
    from datasets import Dataset
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder / "tiny")
    texts = [json.loads(line)["text"] for line in (folder / "data.jsonl").read_text().splitlines()]
    rows = [tok(t)["input_ids"] + [tok.eos_token_id] for t in texts]
    return Dataset.from_dict(
        {"input_ids": rows, "attention_mask": [[1] * len(r) for r in rows], "labels": rows}
    )


def _meta(folder: Path) -> Any:
    from axolotl.common.datasets import TrainDatasetMeta

    return TrainDatasetMeta(train_dataset=_dataset(folder), eval_dataset=None, total_num_steps=3)


def test_axolotl_loads_the_plugin_keeps_its_keys_and_logs_the_preflight(
    folder: Path, lines, monkeypatch
) -> None:
    from axolotl.cli.config import load_cfg
    from axolotl.integrations.base import BasePlugin

    import tuneproof.commands.preflight as preflight
    from tuneproof.integrations.axolotl import TuneproofPlugin

    seen: list[tuple[dict, str]] = []

    def stand_in(spec: Any) -> Any:
        seen.append((dict(spec.config), spec.source))
        return SimpleNamespace(findings=["padding: 46% of token slots", "attention: mask materialised"])

    monkeypatch.setattr(preflight, "prepare", stand_in)
    monkeypatch.setattr(preflight, "run", lambda plan: plan)
    path = _yaml(folder, "keys", tuneproof_bucketing=True, tuneproof_peak_tflops=2.5)
    cfg = load_cfg(str(path))
    plugin = _plugin()
    assert isinstance(plugin, TuneproofPlugin) and isinstance(plugin, BasePlugin)
    # Axolotl's schema drops unknown keys: these survive only through the plugin's args model
    assert cfg.tuneproof_bucketing is True and cfg.tuneproof_peak_tflops == 2.5
    [(given, source)] = seen  # once, at registration, with the YAML as written and its path
    assert source == str(path) and given["base_model"] == str(folder / "tiny")
    assert not any(k.startswith("tuneproof_") or k == "axolotl_config_path" for k in given)
    assert plugin.preflight_findings == ["padding: 46% of token slots", "attention: mask materialised"]
    assert f"tuneproof pre-flight of {path}: 2 finding(s)" in lines
    assert "tuneproof pre-flight: attention: mask materialised" in lines


def test_a_failing_preflight_is_one_line_and_the_run_goes_on(folder: Path, lines, monkeypatch) -> None:
    from axolotl.cli.config import load_cfg

    import tuneproof.commands.preflight as preflight

    def broken(spec: Any) -> Any:
        raise RuntimeError("no config.json for base_model\nsecond line")

    monkeypatch.setattr(preflight, "prepare", broken)
    cfg = load_cfg(str(_yaml(folder, "broken")))
    assert cfg.base_model == str(folder / "tiny")
    assert lines == ["tuneproof pre-flight skipped: no config.json for base_model"]
    assert _plugin().preflight_findings is None


def test_the_real_preflight_runs_on_the_axolotl_config(folder: Path, lines) -> None:
    from axolotl.cli.config import load_cfg

    load_cfg(str(_yaml(folder, "real")))
    findings = _plugin().preflight_findings
    assert findings is not None, lines  # not skipped: it read the YAML, the local model and the jsonl
    assert lines[0].startswith("tuneproof pre-flight of ") and len(lines) == 1 + len(findings)


@pytest.mark.parametrize("key", ["sample_packing", "pad_to_sequence_len"])
def test_bucketing_where_it_changes_nothing_is_refused_by_axolotls_validation(folder: Path, key: str) -> None:
    from axolotl.cli.config import load_cfg

    with pytest.raises(ValueError, match=f"tuneproof_bucketing has no effect with {key}"):
        load_cfg(str(_yaml(folder, f"refused-{key}", tuneproof_bucketing=True, **{key: True})))


@pytest.mark.parametrize("bucketing", [True, False], ids=["bucketing", "axolotls-sampler"])
def test_axolotls_builder_gives_the_trainer_our_callback_and_sampler(folder: Path, bucketing: bool) -> None:
    from axolotl.cli.config import load_cfg
    from axolotl.train import setup_model_and_trainer

    from tuneproof.data import BucketBatchSampler
    from tuneproof.train.callback import TuneproofCallback

    path = _yaml(folder, f"build-{bucketing}", tuneproof_bucketing=bucketing, tuneproof_preflight=False)
    cfg = load_cfg(str(path))
    trainer = setup_model_and_trainer(cfg, _meta(folder))[0]
    ours = [cb for cb in trainer.callback_handler.callbacks if isinstance(cb, TuneproofCallback)]
    assert ours == [_plugin().callback]
    loader = trainer.get_train_dataloader()
    sampler = getattr(loader.batch_sampler, "batch_sampler", loader.batch_sampler)  # under accelerate's shard
    assert isinstance(sampler, BucketBatchSampler) is bucketing
    if bucketing:
        assert sampler is _plugin().sampler and len(sampler) == ROWS // 2
        # priced up front at the widths Axolotl's collator pads to (a multiple of 64 by default)
        assert trainer.data_collator.pad_to_multiple_of == 64
        assert ours[0].widths == sampler.widths(64) and all(w % 64 == 0 for w in ours[0].widths)


@pytest.mark.slow
def test_axolotl_trains_on_the_cpu_with_honest_flops_in_its_logs(folder: Path) -> None:
    """3 optimizer steps of 2 micro-batches through `axolotl.train.train`. Under Axolotl's peft 0.20 a
    hook on the base model never fired (0.0 TFLOP/s and NaN padding were logged): checked here."""
    from axolotl.cli.config import load_cfg
    from axolotl.train import train

    path = _yaml(
        folder, "train", tuneproof_bucketing=True, tuneproof_peak_tflops=1.0, tuneproof_preflight=False
    )
    trainer = train(cfg=load_cfg(str(path)), dataset_meta=_meta(folder))[2]
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logged) == 3
    for log in logged:
        assert log["tuneproof/tflops_performed"] >= log["tuneproof/tflops_intended"] > 0
        assert log["tuneproof/mfu_performed"] == pytest.approx(log["tuneproof/tflops_performed"])  # peak 1
        assert math.isfinite(log["tuneproof/padding"]) and 0 <= log["tuneproof/padding"] < 1
    history = _plugin().callback.history
    assert [s.micro_batches for s in history] == [2, 2, 2]
