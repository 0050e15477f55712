"""Looped decoders (`tuneproof.arch.schedule`): Dory runs its middle layers n_recurrent_loops times
with the same weights, and the ledger walks every run, checked against FlopCounterMode on transformers'
own model at several loop counts (a ledger that walked each module once would be off by the loops)."""

from __future__ import annotations

import pytest

from tuneproof.arch import resolve
from tuneproof.flops import Step, flop_report

TINY_DORY = dict(
    model_type="dory", hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, vocab_size=256, sliding_window=16, n_input_layers=1,
    n_output_layers=1,
)  # fmt: skip


def test_the_schedule_runs_the_middle_section_once_per_loop() -> None:
    shape = resolve({**TINY_DORY, "n_recurrent_loops": 3}).shape
    assert shape.schedule == (0, 1, 2, 1, 2, 1, 2, 3)
    assert [layer.index for layer in shape.runs] == list(shape.schedule)
    assert shape.num_layers == 4  # parameters: each module once


def test_a_decoder_without_loops_runs_each_layer_once() -> None:
    shape = resolve({**TINY_DORY, "model_type": "llama"}).shape
    assert shape.schedule == () and shape.runs == shape.layers


@pytest.mark.parametrize("loops", [1, 3])
@pytest.mark.parametrize("mode", ["forward", "full"])
def test_looped_ledger_matches_flop_counter(loops: int, mode: str) -> None:
    from tiny_models import build_model, counted_flops

    cfg = {**TINY_DORY, "n_recurrent_loops": loops}
    counted = counted_flops(build_model(cfg), 2, 37, mode)
    run = Step(seq_len=37, batch=2, attn="eager", mode=mode)
    ours = flop_report(resolve(cfg).shape, run).performed.total
    assert ours == pytest.approx(counted, rel=1e-3), (ours / counted, loops, mode)


def test_the_ledger_header_says_how_many_times_the_layers_run() -> None:
    from rich.console import Console

    from tuneproof.flops.render import render_report

    console = Console(record=True, width=200)
    render_report(
        flop_report(resolve({**TINY_DORY, "n_recurrent_loops": 3}).shape, Step(seq_len=37)), console
    )
    assert "4 layers, run 8 times with the loops" in console.export_text()


# HRM: two stacks of two layers, three low cycles per high cycle, of which only the last keeps
# gradients in the first high cycle and the last two in the second (L_bp_cycles [2] left-padded to [1, 2])
TINY_HRM = dict(
    model_type="hrm_text", hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
    head_dim=16, vocab_size=256, H_cycles=2, L_cycles=3, L_bp_cycles=[2],
)  # fmt: skip


def test_hrm_runs_both_stacks_in_cycles_with_the_early_low_runs_frozen() -> None:
    shape = resolve(TINY_HRM).shape
    low, high = (0, 1), (2, 3)
    assert shape.schedule == (*low * 3, *high, *low * 3, *high)
    frozen_low_cycles = {0, 1, 4}  # pairs of runs: h=0: l=0, 1; h=1: l=0 (after h=0's H run)
    assert shape.no_grad_runs == frozenset(p for c in frozen_low_cycles for p in (2 * c, 2 * c + 1))
    # a stack's first layer reads the sum of both states; z_L starts as a frozen constant
    assert shape.run_reads[0] == ("model:embed",)
    assert shape.run_reads[2] == ("L1:out", "model:embed")
    assert shape.run_reads[6] == ("model:embed", "L1:out")
    assert shape.run_reads[8] == ("L1:out", "L3:out")


@pytest.mark.parametrize("mode,ckpt", [("forward", False), ("full", False), ("lora", True)])
def test_hrm_ledger_matches_flop_counter_and_needs_its_frozen_runs(mode: str, ckpt: bool) -> None:
    from dataclasses import replace

    from tiny_models import build_model, counted_flops, linear_targets

    shape = resolve(TINY_HRM).shape
    targets = linear_targets(shape)
    counted = counted_flops(build_model(TINY_HRM), 2, 37, mode, grad_ckpt=ckpt, targets=targets)
    run = Step(
        seq_len=37, batch=2, attn="eager", mode=mode, grad_ckpt=ckpt, lora_rank=4, lora_targets=tuple(targets)
    )
    assert flop_report(shape, run).performed.total == pytest.approx(counted, rel=1e-9)
    if mode != "forward":  # every run with gradients: backward and recompute for the frozen runs too
        unfrozen = flop_report(replace(shape, no_grad_runs=frozenset()), run).performed.total
        assert unfrozen > 1.1 * counted
    if ckpt:  # the checkpointed embeddings need gradients: the first low run with gradients reads them
        chained = flop_report(replace(shape, run_reads=()), run).performed.total
        assert chained < counted
