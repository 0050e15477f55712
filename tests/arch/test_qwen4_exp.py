"""Qwen4-Exp's layers (`tuneproof.arch.qwen4_exp`): hyper-connection streams around every block, a PLE
layer's dilated convolution, and QSA attention whose indexer scores each query against the whole key
blocks it sees (a per-query loop in transformers); checked against FlopCounterMode on transformers' own
model at two block sizes, on a padded batch (pad queries see their row's real keys) and with LoRA."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tuneproof.arch import resolve
from tuneproof.arch.shape import BlockScores
from tuneproof.attention.pairs import block_selected_pairs, visible_blocks
from tuneproof.flops import Step, flop_report

TINY_QWEN4_EXP = dict(
    model_type="qwen4_exp_text", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, vocab_size=256, linear_num_key_heads=2, linear_num_value_heads=4,
    linear_key_head_dim=16, linear_value_head_dim=16, moe_intermediate_size=24,
    shared_expert_intermediate_size=48, num_experts=4, num_experts_per_tok=2,
    layer_types=["linear_attention", "indexed_attention"], hc_count=2, hc_lowrank=8, ple_layer_ids=[1],
    ple_embed_dim=48, heads_per_ngram=2, ngram_vocab_size_base=1000, indexer_n_heads=2, indexer_kv_heads=1,
    indexer_head_dim=16, indexer_budget=8, indexer_compress_ratio=4, eos_token_id=2, pad_token_id=0,
)  # fmt: skip


def test_block_counts_and_kept_pairs_match_the_per_query_rule() -> None:
    for width, real, block in ((37, 37, 4), (37, 20, 3), (16, 1, 4), (9, 9, 1)):
        assert visible_blocks(width, real, block) == sum(min(q + 1, real) // block for q in range(width))
    for n, topk, block in ((37, 8, 4), (50, 6, 3), (7, 8, 4), (0, 8, 4)):
        kept = sum(
            v if v // block <= topk // block else topk // block * block + v % block for v in range(1, n + 1)
        )
        assert block_selected_pairs(n, topk, block) == kept


@pytest.mark.parametrize("ratio,budget", [(4, 8), (3, 6)])
@pytest.mark.parametrize("mode,ckpt,lengths", [("forward", False, None), ("forward", False, [37, 20]),
                                               ("full", False, None), ("lora", False, [37, 20]),
                                               ("lora", True, None)])  # fmt: skip
def test_qwen4_exp_ledger_matches_flop_counter(
    ratio: int, budget: int, mode: str, ckpt: bool, lengths: list[int] | None
) -> None:
    from tiny_models import linear_targets

    cfg = {**TINY_QWEN4_EXP, "indexer_compress_ratio": ratio, "indexer_budget": budget}
    shape = resolve(cfg).shape
    targets = linear_targets(shape)
    counted = _counted(cfg, mode, ckpt, lengths, targets)
    run = Step(
        seq_len=37, batch=2, attn="eager", mode=mode, lora_rank=4, grad_ckpt=ckpt,
        lora_targets=tuple(targets), lengths=tuple(lengths) if lengths else None,
    )  # fmt: skip
    ledger = flop_report(shape, run).performed
    convolution_backward = sum(
        r.flops for r in ledger.rows if r.component == "linear_attention.conv" and r.pass_ == "backward"
    )
    assert ledger.total - convolution_backward == pytest.approx(counted, rel=1e-9)
    # without the indexer's per-query scores the ledger would undercount
    bare = tuple(
        replace(x, steps=tuple(s for s in x.steps if not isinstance(s, BlockScores))) for x in shape.layers
    )
    assert flop_report(replace(shape, layers=bare), run).performed.total < ledger.total


def _counted(cfg: dict, mode: str, ckpt: bool, lengths: list[int] | None, targets: list[str]) -> float:
    """FlopCounterMode's total without convolution backward, left out on both sides (it counts a
    depthwise conv's weight gradient as if it were dense; tests/family_parity.py); rows right-padded
    to `lengths`."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from tiny_models import build_model
    from tuneproof.measure.model import apply_lora

    model = build_model(cfg)
    if mode == "lora":
        model = apply_lora(model, targets, 4)
    if ckpt:
        model.gradient_checkpointing_enable()
        model.train()
    ids = torch.randint(3, 200, (2, 37), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 37, dtype=torch.long)
    for i, n in enumerate(lengths or []):
        mask[i, n:] = 0
    counter = FlopCounterMode(display=False)
    if mode == "forward":
        with torch.no_grad(), counter:
            model(input_ids=ids, attention_mask=mask)
    else:
        with counter:
            model(input_ids=ids, attention_mask=mask, labels=ids).loss.backward()
    ops = {str(k): v for k, v in counter.get_flop_counts()["Global"].items()}
    return float(sum(v for k, v in ops.items() if k != "aten.convolution_backward"))
