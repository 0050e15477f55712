"""Inkling's layers (`tuneproof.arch.inkling`): relative-position banks feed the scores, short
convolutions follow the projections and each block, shared experts run every token (torch.bmm);
Inkling 2's learned queries attend over the block states (the inputs of every
n_layers_per_attn_res_block-th layer) and sinks feed the scores. Checked against FlopCounterMode on
transformers' own models at two block sizes (the block mixes' widths grow with the layers), two
shared-expert counts, and with LoRA on a score-only input (r_proj, sink_proj: their gradient needs
dO @ V^T alone)."""

from __future__ import annotations

import pytest

from tuneproof.arch import resolve
from tuneproof.arch.shape import BlockMix, Linear
from tuneproof.flops import Step, flop_report

TINY_INKLING2 = dict(
    model_type="inkling2_text", hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, swa_num_attention_heads=4, swa_num_key_value_heads=2, swa_head_dim=8,
    sliding_window_size=16, rel_extent=24, vocab_size=256, unpadded_vocab_size=256, n_routed_experts=4,
    num_experts_per_tok=2, moe_intermediate_size=24, n_layers_per_attn_res_block=2,
    layer_types=["hybrid_sliding", "hybrid", "hybrid_sliding", "hybrid"],
)  # fmt: skip


TINY_INKLING = dict(
    model_type="inkling_text", hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, swa_num_attention_heads=4, swa_num_key_value_heads=2, swa_head_dim=8,
    sliding_window_size=16, rel_extent=24, vocab_size=256, n_routed_experts=4, num_experts_per_tok=2,
    moe_intermediate_size=24, intermediate_size=96, layer_types=["hybrid_sliding", "hybrid"] * 2,
    mlp_layer_types=["dense", "sparse", "sparse", "sparse"],
)  # fmt: skip


def _mixes(steps: tuple) -> list[tuple[int, int]]:
    return [(s.queries, s.blocks) for s in steps if isinstance(s, BlockMix)]


def test_the_block_mixes_read_every_boundary_layers_input() -> None:
    shape = resolve(TINY_INKLING2).shape
    # layer 0: no attention input; a boundary: its own input joins its MLP's block states
    assert [_mixes(layer.steps) for layer in shape.layers] == [
        [(1, 2)],
        [(3, 2), (1, 2)],
        [(1, 2), (1, 3)],
        [(3, 3), (1, 3)],
    ]
    assert _mixes(shape.post_steps) == [(1, 3)] and shape.head.src == "model:final_input"
    assert [layer.attention.kind for layer in shape.layers] == ["sliding", "full"] * 2


@pytest.mark.parametrize("block", [1, 3])
@pytest.mark.parametrize(
    "mode,ckpt,targets",
    [
        ("forward", False, ()),
        ("full", False, ()),
        ("lora", False, ("self_attn.sink_proj",)),
        ("lora", True, ()),
    ],
)
def test_inkling2_ledger_matches_flop_counter(
    block: int, mode: str, ckpt: bool, targets: tuple[str, ...]
) -> None:
    from tiny_models import linear_targets

    cfg = {**TINY_INKLING2, "n_layers_per_attn_res_block": block}
    shape = resolve(cfg).shape
    names = list(targets) or linear_targets(shape)
    run = Step(
        seq_len=37, batch=2, attn="eager", mode=mode, lora_rank=4, grad_ckpt=ckpt, lora_targets=tuple(names)
    )
    ledger = flop_report(shape, run).performed
    convolution_backward = sum(
        r.flops for r in ledger.rows if r.component == "linear_attention.conv" and r.pass_ == "backward"
    )
    assert ledger.total - convolution_backward == pytest.approx(_counted(cfg, mode, ckpt, names), rel=1e-9)
    assert ledger.by("component")["block_residual"] > 0


def _counted(cfg: dict, mode: str, ckpt: bool, names: list[str]) -> float:
    """FlopCounterMode's total without convolution backward, left out on both sides (it counts a
    depthwise conv's weight gradient as if it were dense; tests/family_parity.py)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from tiny_models import build_model
    from tuneproof.measure.model import apply_lora

    model = build_model(cfg)
    if mode == "lora":
        model = apply_lora(model, names, 4)
    if ckpt:
        model.gradient_checkpointing_enable()
        model.train()
    ids = torch.randint(0, 200, (2, 37), generator=torch.Generator().manual_seed(1))
    counter = FlopCounterMode(display=False)
    if mode == "forward":
        with torch.no_grad(), counter:
            model(input_ids=ids)
    else:
        with counter:
            model(input_ids=ids, labels=ids).loss.backward()
    ops = {str(k): v for k, v in counter.get_flop_counts()["Global"].items()}
    return float(sum(v for k, v in ops.items() if k != "aten.convolution_backward"))


@pytest.mark.parametrize("shared", [1, 3])
@pytest.mark.parametrize(
    "mode,ckpt,targets",
    [("forward", False, ()), ("full", False, ()), ("lora", False, ("self_attn.r_proj",)), ("lora", True, ())],
)
def test_inkling_ledger_matches_flop_counter(
    shared: int, mode: str, ckpt: bool, targets: tuple[str, ...]
) -> None:
    from tiny_models import linear_targets

    cfg = {**TINY_INKLING, "n_shared_experts": shared}
    shape = resolve(cfg).shape
    names = list(targets) or linear_targets(shape)
    run = Step(
        seq_len=37, batch=2, attn="eager", mode=mode, lora_rank=4, grad_ckpt=ckpt, lora_targets=tuple(names)
    )
    ledger = flop_report(shape, run).performed
    convolution_backward = sum(
        r.flops for r in ledger.rows if r.component == "linear_attention.conv" and r.pass_ == "backward"
    )
    assert ledger.total - convolution_backward == pytest.approx(_counted(cfg, mode, ckpt, names), rel=1e-9)
    assert "block_residual" not in ledger.by("component")


TINY_INKLING2_LOOP = dict(
    TINY_INKLING2, model_type="inkling2_loop_text", num_hidden_layers=6,
    layer_types=["hybrid_sliding", "hybrid"] * 3, loop_layer_index_start=2, loop_layer_index_end=6,
    loop_gate_rank=8,
)  # fmt: skip


def test_the_looped_section_runs_its_first_pass_programs_then_its_own() -> None:
    shape = resolve({**TINY_INKLING2_LOOP, "loop_num_passes": 3}).shape
    assert shape.schedule == (0, 1, 6, 7, 8, 9, 2, 3, 4, 5, 2, 3, 4, 5)
    assert [v.index for v in shape.variants] == [2, 3, 4, 5]
    assert shape.run_reads[6] == ("L1:out",)  # a later pass restarts from the pre-loop output
    # later passes retrieve messages outside the checkpoint: 4 queries over the previous pass's block
    # states but its first (layer 4's input) and its output
    assert _mixes(shape.layers[2].outside) == [(4, 2)] and not shape.variants[0].outside
    assert all(s.tied for s in shape.variants[0].steps if isinstance(s, Linear))


@pytest.mark.parametrize("passes", [2, 3])
@pytest.mark.parametrize(
    "mode,ckpt,targets",
    [
        ("forward", False, ()), ("full", False, ()), ("lora", False, ("k_message_gate.down_proj",)),
        ("lora", True, ()),
    ],
)  # fmt: skip
def test_inkling2_loop_ledger_matches_flop_counter(
    passes: int, mode: str, ckpt: bool, targets: tuple[str, ...]
) -> None:
    from tiny_models import linear_targets

    cfg = {**TINY_INKLING2_LOOP, "loop_num_passes": passes}
    shape = resolve(cfg).shape
    names = list(targets) or linear_targets(shape)
    run = Step(
        seq_len=37, batch=2, attn="eager", mode=mode, lora_rank=4, grad_ckpt=ckpt, lora_targets=tuple(names)
    )
    ledger = flop_report(shape, run).performed
    convolution_backward = sum(
        r.flops for r in ledger.rows if r.component == "linear_attention.conv" and r.pass_ == "backward"
    )
    assert ledger.total - convolution_backward == pytest.approx(_counted(cfg, mode, ckpt, names), rel=1e-9)
