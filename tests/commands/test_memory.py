"""`tuneproof memory`: the ledger's JSON, the excess it names, the fit on a card, and the published
configs sized without building their models."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tuneproof.cli.app import main
from tuneproof.commands.memory import MemorySpec, prepare, run
from tuneproof.core.errors import TuneproofError
from tuneproof.hardware.card import GIB, card
from tuneproof.memory.ledger import _largest
from tuneproof.runs.step import Precision, Step, Training

CONFIGS = Path(__file__).parents[1] / "data" / "configs"


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    """The command's JSON; it exits 1 when the step does not fit the card it names, 0 otherwise."""
    code = main(["memory", *args, "--json"])
    got = json.loads(capsys.readouterr().out)
    assert code == (1 if got["fit"] is not None and not got["fit"]["fits"] else 0)
    assert got["verdict"] is None if got["fit"] is None else got["verdict"]["exit_code"] == code
    return got


def test_the_json_carries_the_peak_and_every_component(capsys) -> None:
    got = _json(capsys, "--config", str(CONFIGS / "llama-3.1-8b.json"), "--seq-len", "2048", "--mode", "full")
    c = got["components"]
    parts = (
        "weights_and_adapters",
        "optimizer_states",
        "gradients",
        "activations",
        "temporaries",
        "sharding",
    )
    assert got["peak_bytes"] == c["total"] == sum(c[k] for k in parts)
    assert got["peak_where"] == c["where"] and max(p["total"] for p in got["points"]) == got["peak_bytes"]
    states = got["states"]
    assert states["weights"] == 2 * (8_030_261_248 - 4096 * 65)  # bf16, the 65 norms not in the shape
    assert states["optimizer"] == 2 * states["gradients"]  # AdamW, two moments in bf16
    assert set(got["activations_saved"]) >= {"norms", "projections", "attention", "mlp", "loss"}
    assert {u["what"] for u in got["unknown"]} == {"kernel workspaces", "allocator overhead", "CUDA context"}


def test_eager_attention_names_the_score_matrices_it_keeps(capsys) -> None:
    """32 layers x B x 32 heads x T^2 probabilities, in fp32 (transformers' softmax) and its bf16 copy."""
    config = str(CONFIGS / "llama-3.1-8b.json")
    got = _json(capsys, "--config", config, "--seq-len", "4096", "--attn", "eager")  # LoRA, bf16
    (line,) = got["excess"]
    assert "32 layer(s) keep B x H x T x T probabilities" in line["why"]
    scores = 32 * 32 * 4096 * 4096 * (4 + 2)
    repeated_kv = 32 * 4096 * (32 - 8) * 128 * 2 * 2  # K and V repeated from 8 to 32 heads, bf16
    # what a fused kernel keeps and eager does not: its fp32 log-sum-exp, and its output (under LoRA
    # o_proj's adapter keeps its own copy, so eager's output is not kept)
    fused_only = 32 * 32 * 4096 * 4 + 32 * 4096 * 4096 * 2
    assert line["bytes"] == scores + repeated_kv - fused_only
    assert got["intended_peak_bytes"] < got["peak_bytes"]


def test_fused_sdpa_has_no_excess_and_checkpointing_cuts_the_peak(capsys) -> None:
    base = ["--config", str(CONFIGS / "qwen3-8b.json"), "--seq-len", "8192", "--gpu", "H100"]
    plain = _json(capsys, *base, "--batch", "2")
    assert plain["excess"] == [] and plain["backends"] == {"cudnn": list(range(36))}
    assert not plain["fit"]["fits"]
    (option,) = [o for o in plain["fit"]["options"] if o["change"] == "with activation checkpointing"]
    ckpt = _json(capsys, *base, "--batch", "2", "--grad-ckpt")
    assert option["peak_bytes"] == ckpt["peak_bytes"] < plain["peak_bytes"] / 2
    assert ckpt["fit"]["fits"] and ckpt["fit"]["largest_batch"] >= 2


def test_the_largest_batch_is_the_edge_of_the_card(capsys) -> None:
    base = ["--config", str(CONFIGS / "qwen3-8b.json"), "--seq-len", "4096", "--grad-ckpt", "--gpu", "L40S"]
    fit = _json(capsys, *base)["fit"]
    edge = fit["largest_batch"]
    assert edge >= 1
    at = _json(capsys, *base, "--batch", str(edge))["peak_bytes"]
    over = _json(capsys, *base, "--batch", str(edge + 1))["peak_bytes"]
    assert at <= 48 * GIB < over


def test_largest_is_the_last_n_that_fits() -> None:
    assert _largest(lambda n: n <= 37, 1 << 20) == 37
    assert _largest(lambda n: n <= 0, 100) == 0
    assert _largest(lambda n: True, 100) == 100


def test_every_card_in_the_gpu_table_has_a_capacity() -> None:
    from tuneproof.hardware.gpus import GPUS

    assert all(g.memory_gib and g.memory_source for g in GPUS)
    assert card("NVIDIA A100-SXM4-80GB").total_bytes == 80 * GIB
    assert card("A100 40GB").total_bytes == 40 * GIB
    with pytest.raises(TuneproofError, match="ships with 40 GB or 80 GB"):
        card("NVIDIA A100").memory()
    assert card("H200").total_bytes == 141 * GIB


def test_qlora_weights_and_8bit_adam() -> None:
    """4-bit NF4 base (nn.Linear only, the LM head kept), fp32 adapters; 8-bit AdamW states."""
    step = Step(seq_len=1024, mode="lora")
    spec = MemorySpec(model=str(CONFIGS / "llama-3.1-8b.json"), run=step)
    plain = run(prepare(spec)).performed.states
    quant = MemorySpec(model=spec.model, run=replace(step, precision=Precision(quant="4bit")))
    q = run(prepare(quant)).performed.states
    linear = 8_030_261_248 - 2 * 128256 * 4096 - 4096 * 65  # layers' GEMMs: embedding and LM head kept
    assert plain.weights - q.weights == pytest.approx(linear * (2 - 0.5 - 4 / 64), rel=1e-4)
    eight = run(
        prepare(MemorySpec(model=spec.model, run=replace(step, training=Training(optimizer="adamw_8bit"))))
    )
    assert eight.performed.states.optimizer == pytest.approx(plain.optimizer / 4 * (1 + 4 / 256), rel=1e-3)


def test_fsdp_shards_the_states_and_gathers_a_layer() -> None:
    step = Step(seq_len=2048, mode="full", grad_ckpt=True)
    one = run(prepare(MemorySpec(model=str(CONFIGS / "llama-3.1-8b.json"), run=step))).performed
    eight = run(
        prepare(
            MemorySpec(
                model=str(CONFIGS / "llama-3.1-8b.json"),
                run=replace(step, training=Training(parallel="fsdp", world_size=8)),
            )
        )
    ).performed  # fmt: skip
    assert eight.states.optimizer == one.states.optimizer // 8
    top = eight.peak.top
    assert top.fixed == eight.states.weights + sum(i.nbytes for i in eight.sharding)
    assert eight.peak.peak_bytes < one.peak.peak_bytes / 3
    assert {i.what.split(":")[0] for i in eight.sharding} == {"FSDP2"}


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.json"), key=lambda p: p.name), ids=lambda p: p.stem)
def test_published_configs_are_sized_in_seconds_without_building_them(path: Path) -> None:
    if path.name == "params.json":
        pytest.skip("a Mistral-format params.json, not a transformers config")
    start = time.perf_counter()
    report = run(prepare(MemorySpec(model=str(path), run=Step(seq_len=4096, mode="lora"))))
    assert time.perf_counter() - start < 30
    assert report.performed.peak.peak_bytes > report.performed.states.weights > 0


def test_8bit_adamw_has_no_foreach_implementation() -> None:
    with pytest.raises(TuneproofError, match="bitsandbytes steps in one kernel"):
        Training(optimizer="adamw_8bit", optimizer_impl="foreach")


def test_a_path_transformers_refuses_is_sized_with_a_note() -> None:
    report = run(prepare(MemorySpec(model=str(CONFIGS / "gpt-oss-20b.json"), run=Step(seq_len=1024))))
    assert report.notes[0].startswith("transformers will not run sdpa for gpt_oss")


@pytest.mark.parametrize(
    ("name", "sized"),
    [(None, ("adamw", "fused")), ("adamw_torch", ("adamw", "foreach")),
     ("adamw_bnb_8bit", ("adamw_8bit", "fused")), ("paged_adamw_8bit", ("adamw_8bit", "fused")),
     ("lion_32bit", ("adamw", "fused"))],
)  # fmt: skip
def test_preflight_reads_the_runs_optimizer(name: str | None, sized: tuple[str, str]) -> None:
    from tuneproof.runs.run import ledger_optimizer

    optimizer, impl, unread = ledger_optimizer(name)
    assert (optimizer, impl) == sized
    assert (unread is not None) == (name == "lion_32bit")


def test_quantised_experts_shrink_the_weights() -> None:
    step = Step(seq_len=1024, mode="lora")
    model = str(CONFIGS / "qwen3-30b-a3b.json")
    kept = run(
        prepare(MemorySpec(model=model, run=replace(step, precision=Precision(quant="4bit"))))
    ).performed
    both = run(
        prepare(
            MemorySpec(model=model, run=replace(step, precision=Precision(quant="4bit", quant_experts=True)))
        )
    ).performed
    assert both.states.weights < kept.states.weights / 3  # the experts are most of a MoE's weights


def test_linear_attention_cores_are_named_as_not_counted() -> None:
    report = run(prepare(MemorySpec(model=str(CONFIGS / "qwen3-next-80b-a3b.json"), run=Step(seq_len=512))))
    assert any("36 linear-attention or state-space layer(s)" in n for n in report.notes)
    dense = run(prepare(MemorySpec(model=str(CONFIGS / "qwen3-8b.json"), run=Step(seq_len=512))))
    assert not any("state-space" in n for n in dense.notes)
