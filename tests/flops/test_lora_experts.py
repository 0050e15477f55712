"""LoRA on fused expert parameters (PEFT target_parameters) in the FLOP ledger.

PEFT's ParamWrapper adapts a 3-D expert weight in place: every forward it forms W + A@B over all E
experts (a token-independent cost, performed only), and the experts' GEMMs then run on that merged
weight, whose gradient the backward computes. The parity tests check the performed ledger against
FlopCounterMode on tiny MoE models (experts eager), with and without activation checkpointing."""

from __future__ import annotations

import pytest

from tiny_models import build_model, config_dict, counted_flops
from tuneproof.arch import from_config
from tuneproof.core.errors import TuneproofError
from tuneproof.flops import Step, flop_report

TOL = 0.005
MOE = ("qwen3_moe", "qwen2_moe", "mixtral", "gpt_oss", "gemma4_text")


def _experts(model_type: str) -> str:
    return "experts." if model_type == "gemma4_text" else "mlp.experts."


def _both(model_type: str) -> tuple[str, ...]:
    prefix = _experts(model_type)
    return (prefix + "gate_up_proj", prefix + "down_proj")


def _run(**kw: object) -> Step:
    options: dict = dict(seq_len=37, batch=2, attn="eager", mode="lora", lora_rank=4, lora_targets=())
    return Step(**{**options, **kw})  # type: ignore[arg-type]


def _ratio(model_type: str, run: Step) -> float:
    cfg = config_dict(model_type)
    counted = counted_flops(
        build_model(cfg), run.batch, run.seq_len, "lora", lora_rank=run.lora_rank, grad_ckpt=run.grad_ckpt,
        lengths=list(run.lengths) if run.lengths else None, targets=list(run.lora_targets),
        target_parameters=run.lora_target_parameters,
    )  # fmt: skip
    return flop_report(from_config(cfg), run).performed.total / counted


@pytest.mark.slow
@pytest.mark.parametrize("ckpt", [False, True], ids=["plain", "ckpt"])
@pytest.mark.parametrize("model_type", MOE)
def test_performed_matches_flop_counter(model_type: str, ckpt: bool) -> None:
    ratio = _ratio(model_type, _run(lora_target_parameters=_both(model_type), grad_ckpt=ckpt))
    assert abs(ratio - 1) < TOL, f"{model_type} ckpt={ckpt}: ours/counter = {ratio:.5f}"


@pytest.mark.slow
@pytest.mark.parametrize("ckpt", [False, True], ids=["plain", "ckpt"])
@pytest.mark.parametrize("model_type", ["qwen3_moe", "gpt_oss"])
def test_with_module_targets_one_parameter_and_a_padded_batch(model_type: str, ckpt: bool) -> None:
    # down_proj alone: its input (gate_up's output) needs no gradient, so no input-gradient GEMM
    run = _run(
        seq_len=29, batch=3, lengths=(29, 20, 7), lora_rank=3, grad_ckpt=ckpt,
        lora_targets=("self_attn.q_proj", "self_attn.v_proj"), lora_target_parameters=("down_proj",),
    )  # fmt: skip
    ratio = _ratio(model_type, run)
    assert abs(ratio - 1) < TOL, f"{model_type} ckpt={ckpt}: ours/counter = {ratio:.5f}"


@pytest.mark.slow
def test_the_counter_sees_two_merges_per_forward() -> None:
    """The trap behind the factor 2: torch's register_parametrization evaluates PEFT's parametrization
    once to check it, then the cached forward evaluates it again. FlopCounterMode's baddbmm FLOPs
    (nothing else in these models calls it) are exactly the ledger's forward and recompute merges."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from tuneproof.measure.model import apply_lora

    cfg = config_dict("mixtral")
    for ckpt in (False, True):
        model = apply_lora(build_model(cfg), [], 4, _both("mixtral"))
        if ckpt:
            model.gradient_checkpointing_enable()
            model.train()
        ids = torch.randint(0, 200, (2, 37), generator=torch.Generator().manual_seed(1))
        counter = FlopCounterMode(display=False)
        with counter:
            model(input_ids=ids, labels=ids).loss.backward()
        baddbmm = counter.get_flop_counts()["Global"][torch.ops.aten.baddbmm]
        rows = flop_report(from_config(cfg), _run(lora_target_parameters=_both("mixtral"), grad_ckpt=ckpt))
        merges = [r for r in rows.performed.rows if r.component == "lora.experts"]
        assert baddbmm == sum(r.flops for r in merges if r.pass_ != "backward")
        e, h, i, r = 4, 64, 32, 4  # experts, hidden, expert width, rank: gate_up (h -> 2i), down (i -> h)
        per_forward = 2 * 2 * e * r * (h * 2 * i + i * h) * 2  # 2 products, 2 layers
        assert baddbmm == per_forward * (2 if ckpt else 1)


def test_the_merges_are_performed_only_and_the_expert_weight_gradient_is_counted() -> None:
    # tiny qwen3_moe: layer 0 dense, layer 1 with E=4 experts (top 2) of width i=32 on h=64
    e, h, i, r, k = 4, 64, 32, 4, 2
    run = _run(lora_target_parameters=_both("qwen3_moe"))
    report = flop_report(from_config(config_dict("qwen3_moe")), run)
    merge = 2 * e * h * (2 * i) * r + 2 * e * i * h * r  # A@B of gate_up (h -> 2i) and down (i -> h)
    merges = report.performed.where(component_prefix="lora.experts")
    assert merges == (2 + 2) * merge  # forward: check and use; backward: dA and dB
    assert report.intended.where(component_prefix="lora.experts") == 0
    (line,) = [x for x in report.excess if x.name.startswith("LoRA on fused experts")]
    assert line.flops == merges and "for 2 fused expert parameters" in line.why
    # token work, in both ledgers: the merged weight trains, so each expert GEMM runs its weight
    # gradient; gate_up's input needs none (nothing before it trains), down_proj's does
    n = run.real_tokens * k
    gate_up, down = 2 * n * h * 2 * i, 2 * n * i * h
    experts = [row for row in report.intended.rows if row.component == "experts"]
    assert sum(row.flops for row in experts if row.pass_ == "forward") == gate_up + down
    assert sum(row.flops for row in experts if row.pass_ == "backward") == gate_up + 2 * down


def test_without_target_parameters_nothing_changes() -> None:
    shape = from_config(config_dict("qwen3_moe"))
    plain = flop_report(shape, _run(lora_targets=("self_attn.q_proj",)))
    assert "lora.experts" not in plain.performed.by("component")
    assert not any(x.name.startswith("LoRA on fused experts") for x in plain.excess)


@pytest.mark.parametrize(
    "model_type,target,message",
    [
        (
            "qwen3_moe",
            "q_proj",
            "lora_target_parameters 'q_proj' matches no fused expert parameter or GEMM weight of this "
            "qwen3_moe model "
            "(its fused expert parameters: mlp.experts.down_proj, mlp.experts.gate_up_proj)",
        ),
        (
            "mixtral",
            "experts.gate_up",  # a prefix of a name, not a '.'-suffix of the path
            "lora_target_parameters 'experts.gate_up' matches no fused expert parameter or GEMM weight "
            "of this mixtral model (its fused expert parameters: mlp.experts.down_proj, "
            "mlp.experts.gate_up_proj)",
        ),
        (
            "llama",
            "mlp.experts.down_proj",
            "lora_target_parameters 'mlp.experts.down_proj' matches no fused expert parameter or GEMM "
            "weight of this llama model (it has none (adapt nn.Linear modules with lora_targets))",
        ),
    ],
)
def test_a_target_parameter_that_matches_no_fused_expert_is_refused(
    model_type: str, target: str, message: str
) -> None:
    with pytest.raises(TuneproofError) as e:
        flop_report(from_config(config_dict(model_type)), _run(lora_target_parameters=(target,)))
    assert e.value.message == message


@pytest.mark.parametrize(
    "kw,message",
    [
        (
            {"lora_target_parameters": "down_proj"},
            "lora_target_parameters must be parameter names, got 'down_proj'"
            " (a tuple of fused expert parameter names, e.g. ('mlp.experts.down_proj',))",
        ),
        (
            {"lora_target_parameters": ("all-linear",)},
            "lora_target_parameters must be parameter names, got ('all-linear',)"
            " (a tuple of fused expert parameter names, e.g. ('mlp.experts.down_proj',))",
        ),
    ],
)
def test_runspec_refusals(kw: dict, message: str) -> None:
    with pytest.raises(TuneproofError) as e:
        _run(**kw)
    assert e.value.message == message
