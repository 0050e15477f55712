"""Mamba-2 hybrids that arrange their layers differently from mamba2 / bamba: Nemotron-H's layers that
hold only an MLP or MoE block (no mixer), Falcon-H1's attention and Mamba-2 mixer side by side in one
layer, Zamba2's shared transformer block reused before some Mamba-2 layers with per-use adapters.
The SSD core itself is each family's own copy of transformers' `mamba2_chunk_scan`, checked here
against FlopCounterMode at several lengths; the layouts against each family's tiny build in
tests/flops/test_counter_parity.py."""

from __future__ import annotations

import importlib

import pytest

from tuneproof.arch import resolve
from tuneproof.arch.mixers import mixer_flops
from tuneproof.arch.shape import Attention, Core, Join, Linear, StateSpace

SCANS = (
    "mamba2.modeling_mamba2",
    "nemotron_h.modeling_nemotron_h",
    "falcon_h1.modeling_falcon_h1",
    "zamba2.modeling_zamba2",
)


@pytest.mark.parametrize("module", SCANS)
@pytest.mark.parametrize("length", [1, 16, 37, 70])
def test_ssd_flops_match_flop_counter_on_each_familys_own_scan(module: str, length: int) -> None:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    scan = importlib.import_module(f"transformers.models.{module}").mamba2_chunk_scan
    heads, p, n, chunk = 2, 8, 16, 16
    ssd = StateSpace(
        q="q",
        k="k",
        v="v",
        dst="o",
        heads=heads,
        head_dim=p,
        state=n,
        chunk=chunk,
        conv_channels=1,
        conv_kernel=4,
    )
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, length, heads, p, generator=gen, requires_grad=True)
    dt = torch.rand(1, length, heads, generator=gen, requires_grad=True)
    a = (-torch.rand(heads, generator=gen)).requires_grad_()
    b, c = (torch.randn(1, length, 1, n, generator=gen, requires_grad=True) for _ in range(2))
    forward, backward = FlopCounterMode(display=False), FlopCounterMode(display=False)
    with forward:
        y = scan(x, dt, a, b, c, chunk_size=chunk, dt_softplus=True)
    with backward:
        (y[0] if isinstance(y, tuple) else y).sum().backward()
    core, _, core_back = mixer_flops(ssd, length)
    assert core == forward.get_total_flops() and core_back == backward.get_total_flops()


def test_nemotron_h_mlp_and_moe_layers_have_no_mixer_and_read_the_layer_input() -> None:
    from tiny_models import shrunk_config

    cfg = shrunk_config("nemotron_h")
    shape = resolve(cfg).shape
    kinds = [layer.attention.kind for layer in shape.layers]
    assert cfg.layers_block_type == ["linear_attention", "moe", "full_attention", "mlp"]
    assert kinds == ["linear", "none", "full", "none"]
    for i in (1, 3):
        steps = shape.layers[i].steps
        assert not any(isinstance(s, Attention | Core) for s in steps)
        assert Join("mid", ("in",)) in steps
        first = next(s for s in steps if isinstance(s, Linear))
        assert first.src == "mid" and first.name.startswith("mixer.")
    assert shape.layers[1].steps != shape.layers[3].steps  # MoE experts and router vs a plain MLP
    assert any(s.num_experts == 4 for s in shape.layers[1].steps if isinstance(s, Linear))
    assert list(shape.mixer_groups) == [shape.layers[0].attention.label]  # FFN layers in no group


def test_falcon_h1_runs_attention_and_the_ssd_mixer_side_by_side_on_the_layer_input() -> None:
    from tiny_models import shrunk_config

    shape = resolve(shrunk_config("falcon_h1")).shape
    layer = shape.layers[0]
    assert layer.attention.kind == "full" and layer.attention.num_heads == 4
    steps = {s.name: s for s in layer.steps if isinstance(s, Linear)}
    assert steps["mamba.in_proj"].src == steps["self_attn.q_proj"].src == "in"
    assert steps["mamba.out_proj"].src == "mamba.attn" and steps["self_attn.o_proj"].src == "main.attn"
    cores = [s for s in layer.steps if isinstance(s, StateSpace)]
    assert len(cores) == 1 and cores[0].heads == 8 and cores[0].chunk == 16
    assert sum(isinstance(s, Attention) for s in layer.steps) == 1
    assert Join("mid", ("in", "main.o", "mamba.o")) in layer.steps
    assert steps["feed_forward.gate_proj"].src == "mid"


def test_zamba2_runs_the_shared_block_at_each_use_with_that_uses_adapters_and_counts_it_once() -> None:
    import torch.nn as nn
    from transformers import AutoModelForCausalLM

    from tiny_models import shrunk_config

    cfg = shrunk_config("zamba2")
    shape = resolve(cfg).shape
    assert cfg.hybrid_layer_ids == [1, 3]
    for use, index in enumerate(cfg.hybrid_layer_ids):
        steps = shape.layers[index].steps
        names = [s.name for s in steps if isinstance(s, Linear)]
        assert f"shared_transformer.self_attn.linear_q_adapter_list.{use}.0" in names
        assert not any(f"adapter_list.{1 - use}." in n for n in names)  # the other use's slot never runs
        assert Join("cat", ("in", "model:embed")) in steps  # the block reads the embeddings too
        assert sum(isinstance(s, Attention) for s in steps) == 1
        assert sum(isinstance(s, StateSpace) for s in steps) == 1
        tied = {s.name for s in steps if isinstance(s, Linear) and s.tied}
        assert bool(tied) == (use > 0) and "linear" not in tied
    assert shape.layers[0].attention.kind == "linear"  # a plain Mamba-2 layer
    model = AutoModelForCausalLM.from_config(cfg)
    weights = {id(m.weight): m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear)}
    assert shape.parameter_count() == sum(weights.values())  # the shared block's weights once


@pytest.mark.parametrize(
    ("model_type", "cores"), [("mamba2", 2), ("nemotron_h", 1), ("falcon_h1", 2), ("zamba2", 4)]
)
def test_the_explainer_names_mamba_ssms_kernels_for_every_ssd_core(model_type: str, cores: int) -> None:
    from tiny_models import shrunk_config
    from tuneproof.attention.mixer_notes import mixer_notes

    notes = mixer_notes(resolve(shrunk_config(model_type)).shape, False)
    ssd = [n for n in notes if "Mamba-2 SSD" in n]
    assert len(ssd) == 1 and ssd[0].startswith(f"{cores} Mamba-2 SSD cores")
    assert "mamba_split_conv1d_scan_combined" in ssd[0] and "mamba2_chunk_scan (chunks of 16 tokens" in ssd[0]
    assert not any("gated delta rule" in n for n in notes)
