"""In-model prefix tokens (`tuneproof.arch.prefixed`): CPM-Ant prepends prompt_length tokens to every
row inside its forward, runs every layer on T + prompt_length tokens with its own bidirectional
attention, and its LM head on T; checked against FlopCounterMode on transformers' own model at two
prompt lengths (a ledger on T tokens with causal pairs would miss both)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tuneproof.arch import resolve
from tuneproof.flops import Step, flop_report

TINY_CPMANT = dict(
    model_type="cpmant", hidden_size=64, num_attention_heads=4, dim_head=16, dim_ff=96, num_hidden_layers=2,
    vocab_size=256,
)  # fmt: skip


def test_the_layers_attend_bidirectionally_over_the_prompt_and_the_row() -> None:
    shape = resolve({**TINY_CPMANT, "prompt_length": 5}).shape
    assert shape.prefix_tokens == 5
    spec = shape.layers[0].attention
    assert (spec.kind, spec.prefix, spec.head_dim) == ("bidirectional", 5, 16)
    run = Step(seq_len=37, batch=3, attn="eager", mode="forward", lengths=(37, 20, 7))
    report = flop_report(shape, run)
    qk_per_pair = 2 * 4 * 16
    intended = report.intended.where(component_prefix="attention.qk", layers={0})
    assert intended == qk_per_pair * ((37 + 5) ** 2 + (20 + 5) ** 2 + (7 + 5) ** 2)
    performed = report.performed.where(component_prefix="attention.qk", layers={0})
    assert performed == qk_per_pair * 3 * (37 + 5) ** 2
    head = report.performed.where(component_prefix="lm_head")
    assert head == 2 * 3 * 37 * 64 * 256  # the prompt is dropped before the head


@pytest.mark.parametrize("prompt", [5, 11])
@pytest.mark.parametrize("mode,targets", [("forward", ()), ("full", ()), ("lora", ("ffn.ffn.w_in.w_0",))])
def test_cpmant_ledger_matches_flop_counter(prompt: int, mode: str, targets: tuple[str, ...]) -> None:
    from tiny_models import build_model, counted_flops

    cfg = {**TINY_CPMANT, "prompt_length": prompt}
    shape = resolve(cfg).shape
    counted = counted_flops(build_model(cfg), 2, 37, mode, targets=list(targets))
    run = Step(
        seq_len=37, batch=2, attn="eager", mode=mode, lora_rank=4, lora_targets=targets or ("all-linear",)
    )
    assert flop_report(shape, run).performed.total == pytest.approx(counted, rel=1e-9)
    # without the prompt (T tokens, T x T pairs) the ledger would undercount
    bare = tuple(replace(x, attention=replace(x.attention, prefix=0)) for x in shape.layers)
    assert flop_report(replace(shape, layers=bare), run).performed.total < 0.9 * counted


def test_every_attention_path_runs_the_models_own_matmuls() -> None:
    shape = resolve({**TINY_CPMANT, "prompt_length": 5}).shape
    totals = {
        attn: flop_report(shape, Step(seq_len=37, batch=2, attn=attn, mode="full")).performed.total
        for attn in ("eager", "sdpa", "flex_attention")
    }
    assert len(set(totals.values())) == 1, totals  # no fused-kernel recompute, no block rounding
