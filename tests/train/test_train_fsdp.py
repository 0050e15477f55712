"""`accelerate launch` with an FSDP2 config around `tuneproof train`, on the CPU (gloo, 2 processes):
the LoRA trains with sharded weights, one whole adapter is saved, and each rank's callback bills
its own micro-batches, checked against the sampler's plan for that rank. DeepSpeed ZeRO-3 is refused
in one line (deepspeed is no dependency: its switch, transformers' own, is set by hand here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# the accelerate config the docs show (docs/train.md); the layer class is the tiny model's decoder layer
FSDP2_CONFIG = """\
compute_environment: LOCAL_MACHINE
distributed_type: FSDP
use_cpu: true
num_machines: 1
num_processes: 2
mixed_precision: 'no'
fsdp_config:
  fsdp_version: 2
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_transformer_layer_cls_to_wrap: Gemma4TextDecoderLayer
  fsdp_state_dict_type: FULL_STATE_DICT
  fsdp_reshard_after_forward: true
  fsdp_cpu_ram_efficient_loading: false
"""
RECIPE = {"optim": {"max_steps": 3, "micro_batch": 2, "grad_accum": 2}, "run": {"probe_budget_s": 0}}


def _planned_tokens(rank: int, num_steps: int) -> list[int]:
    """Real tokens per optimizer step of `rank`, from the sampler's own plan on the tiny corpus (the
    rows `tuneproof train` builds, the Trainer's defaults: seed 0, no drop_last)."""
    from tuneproof.data.sampler import BucketBatchSampler
    from tuneproof.gate.generate import tiny_tokenizer
    from tuneproof.runs.recipe import from_dict
    from tuneproof.train.data import read_records, tokenise

    recipe = from_dict(RECIPE, "test recipe")
    lengths = [len(r["input_ids"]) for r in tokenise(read_records(recipe), recipe, tiny_tokenizer())]
    opt = recipe.optim
    batches = iter(BucketBatchSampler(lengths, opt.micro_batch, opt.grad_accum, seed=opt.seed, num_replicas=2,
                                      rank=rank))  # fmt: skip
    steps = [[next(batches) for _ in range(opt.grad_accum)] for _ in range(num_steps)]
    return [sum(lengths[i] for batch in step for i in batch) for step in steps]


@pytest.mark.slow  # two real Trainer processes
def test_fsdp2_under_accelerate_launch_trains_saves_one_adapter_and_bills_each_rank(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    from tuneproof.runs.recipe import from_dict

    (tmp_path / "fsdp2.yaml").write_text(FSDP2_CONFIG)
    (tmp_path / "recipe.toml").write_text(from_dict(RECIPE, "test recipe").to_toml())
    accelerate = Path(sys.executable).parent / "accelerate"
    done = subprocess.run(
        [str(accelerate), "launch", "--config_file", "fsdp2.yaml", "--num_processes", "2",
         "--main_process_port", "0", "-m", "tuneproof", "train", "recipe.toml", "--output", "run"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("trained ") == 1  # one summary: rank 0's
    run = tmp_path / "run"
    saved = [p.parent.name for p in run.rglob("adapter_model.safetensors") if "checkpoints" not in p.parts]
    assert saved == ["adapter"]  # one adapter (the checkpoints beside it are for --resume)
    tensors = load_file(run / "adapter" / "adapter_model.safetensors")
    b = {k: v for k, v in tensors.items() if ".lora_B." in k}
    assert b and all(float(v.abs().max()) > 0 for v in b.values())  # every B trained away from zero
    # whole tensors (hidden 64 x r 16), not one rank's half: FSDP2 shards dim 0
    assert tuple(tensors["base_model.model.model.layers.0.mlp.down_proj.lora_B.weight"].shape) == (64, 16)
    processes = json.loads((run / "report" / "report.json").read_text())["data"]["processes"]
    how = (processes["distributed_type"], processes["fsdp_version"], processes["sharded"])
    assert how == ("FSDP", 2, True)  # FSDP2 with DTensor shards, not DDP
    ranks = processes["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    for r in ranks:
        assert [s["tokens"] for s in r["steps"]] == _planned_tokens(r["rank"], 3)  # its own rows, not all
        assert r["tokens"] == sum(s["tokens"] for s in r["steps"])
    assert ranks[0]["intended"] != ranks[1]["intended"]  # two ranks' own batches, not one copied
    tokens = f"rank 0 {ranks[0]['tokens']:,}, rank 1 {ranks[1]['tokens']:,}"
    said = f"Trained on 2 processes (FSDP 2); each rank billed its own micro-batches (real tokens: {tokens})"
    assert said in (run / "report" / "report.md").read_text()


def test_deepspeed_zero3_is_refused_before_anything_is_written(tmp_path: Path, monkeypatch, capsys) -> None:
    from transformers import integrations

    from tuneproof.cli.app import main

    monkeypatch.setattr(integrations, "is_deepspeed_zero3_enabled", lambda: True)
    assert main(["train", "--output", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: DeepSpeed ZeRO-3 is not supported by train") and "FSDP2" in err
    assert not (tmp_path / "run").exists()
