"""Elementwise recurrences (RecurrentGemma's RG-LRU, RWKV-4's WKV): the recurrences run no matmul
(FlopCounterMode counts 0 on transformers' own scans, forward and backward), the RG-LRU block costs
its projections, its two block-diagonal gate GEMMs and its convolution, RWKV its four projections;
the ledger's structure for both families and the dispatch explainer's lines."""

from __future__ import annotations

from typing import Any

import pytest

from tuneproof.arch.mixers import mixer_flops
from tuneproof.arch.recurrent import RgLru, Wkv

LENGTHS = [1, 5, 37, 64]
HIDDEN, LRU, HEADS, K = 16, 24, 4, 4  # hidden size, lru width, heads (block width 6), conv taps


def _counted(fn: Any) -> tuple[int, dict[str, int]]:
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return counter.get_total_flops(), {str(k): v for k, v in counter.get_flop_counts()["Global"].items()}


def _tiny_block() -> Any:
    import torch
    from transformers import RecurrentGemmaConfig
    from transformers.models.recurrent_gemma.modeling_recurrent_gemma import RecurrentGemmaRecurrentBlock

    cfg = RecurrentGemmaConfig(hidden_size=HIDDEN, lru_width=LRU, num_attention_heads=HEADS, conv1d_width=K,
                               num_hidden_layers=1, vocab_size=32, intermediate_size=32)  # fmt: skip
    torch.manual_seed(0)
    return RecurrentGemmaRecurrentBlock(cfg, 0)


@pytest.mark.parametrize("length", LENGTHS)
def test_the_rg_lru_scan_runs_no_matmul_forward_or_backward(length: int) -> None:
    import torch

    rg_lru = _tiny_block().rg_lru
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, length, LRU, generator=gen, requires_grad=True)
    a = torch.rand(2, length, LRU, generator=gen, requires_grad=True)
    reset = torch.zeros(2, length, 1, dtype=torch.bool)
    out: list[Any] = []
    forward, _ = _counted(lambda: out.append(rg_lru._rnn_scan(x, a, reset, None)[0]))
    backward, _ = _counted(lambda: out[0].sum().backward())
    assert forward == backward == 0
    assert mixer_flops(
        RgLru(q="q", k="k", v="v", dst="o", width=LRU, conv_channels=LRU, conv_kernel=K), length
    )[0::2] == (0.0, 0.0)


@pytest.mark.parametrize("length", LENGTHS)
def test_a_tiny_recurrent_block_costs_its_gemms_gates_and_conv(length: int) -> None:
    """The whole torch forward of transformers' RecurrentGemmaRecurrentBlock: linear_y, linear_x, the
    depthwise conv, the RG-LRU's two baddbmm gates (per head (W/H x W/H), every token), linear_out."""
    import torch

    from tuneproof.arch.recurrent import rglru_core

    block = _tiny_block().eval()
    spec, core = rglru_core(block)
    hidden = torch.randn(1, length, HIDDEN)
    positions = torch.arange(length)[None]
    with torch.no_grad():
        total, ops = _counted(lambda: block(hidden, positions, None, use_cache=False))
    _, conv, _ = mixer_flops(core, length)
    gates = 2 * 2 * length * LRU * (LRU // HEADS)
    assert ops["aten.convolution"] == conv == 2 * LRU * K * (length + K - 1)
    assert ops["aten.baddbmm"] == gates
    assert total == 2 * length * 3 * HIDDEN * LRU + gates + conv
    assert (spec.num_heads, spec.head_dim, spec.chunk) == (HEADS, LRU // HEADS, 1)


def test_the_gate_weights_are_block_diagonal_gemms_read_after_the_conv() -> None:
    """RecurrentGemmaRglru's (heads, W/H, W/H) gate weights are read as GEMMs of W x W/H that every
    token runs (not as routed experts), on the convolution's output, with no LoRA adapter; the full
    fine-tune backward gives them their weight gradients (parity: tests/family_parity.py)."""
    from tiny_models import shrunk_config
    from tuneproof.arch import resolve
    from tuneproof.arch.shape import Linear

    shape = resolve(shrunk_config("recurrent_gemma")).shape
    assert not shape.has_experts
    kinds = [layer.attention.kind for layer in shape.layers]
    assert kinds == ["linear", "linear", "sliding", "linear"]
    steps = shape.layers[0].steps
    core = next(s for s in steps if isinstance(s, RgLru))
    gates = [s for s in steps if isinstance(s, Linear) and s.component == "rg_lru.gates"]
    assert [g.name.rpartition(".")[2] for g in gates] == ["input_gate_weight", "recurrent_gate_weight"]
    assert all(g.src == core.dst and not g.adaptable and g.out_features * 4 == g.in_features for g in gates)
    assert core.q == core.k == core.v == "mix.x"  # the conv reads linear_x only, not the y branch


@pytest.mark.parametrize("length", LENGTHS)
def test_the_wkv_recurrence_runs_no_matmul_forward_or_backward(length: int) -> None:
    import torch
    from transformers.models.rwkv.modeling_rwkv import rwkv_linear_attention_cpu

    gen = torch.Generator().manual_seed(0)
    decay, first = (torch.randn(8, generator=gen, requires_grad=True) for _ in range(2))
    k, v = (torch.randn(2, length, 8, generator=gen, requires_grad=True) for _ in range(2))
    out: list[Any] = []
    forward, _ = _counted(lambda: out.append(rwkv_linear_attention_cpu(decay, first, k, v)[0]))
    backward, _ = _counted(lambda: out[0].sum().backward())
    assert forward == backward == 0
    assert mixer_flops(Wkv(q="q", k="k", v="v", dst="o", width=8), length) == (0.0, 0.0, 0.0)


def test_rwkv_costs_its_projections_and_recomputes_its_gated_value_gemm() -> None:
    """RwkvFeedForward returns sigmoid(receptance) * value(k): the multiply saves value's output, so
    checkpointing's recompute re-runs that last GEMM (no early stop), as FlopCounterMode sees."""
    from tiny_models import shrunk_config
    from tuneproof.arch import resolve

    shape = resolve(shrunk_config("rwkv")).shape
    assert all(layer.attention.kind == "linear" for layer in shape.layers)
    assert not any(layer.recompute_stops_early for layer in shape.layers)
    names = {s.name for s in shape.layers[0].steps if hasattr(s, "name")}
    assert {"attention.key", "attention.value", "attention.receptance", "attention.output"} <= names
    assert any(isinstance(s, Wkv) for s in shape.layers[0].steps)


@pytest.mark.parametrize(
    ("model_type", "words"),
    [
        ("recurrent_gemma", ("Griffin RG-LRU", "_rnn_scan", "baddbmm", "sequential in T")),
        ("rwkv", ("kernels-community/rwkv", "rwkv_linear_attention_cpu", "sequential in T")),
    ],
)
def test_explainer_names_the_kernels_and_the_torch_loop(model_type: str, words: tuple[str, ...]) -> None:
    from contexts import context
    from tiny_models import shrunk_config
    from tuneproof.arch import resolve
    from tuneproof.attention.dispatch import explain

    shape = resolve(shrunk_config(model_type)).shape
    text = " ".join(explain(shape, context(seq_len=64, batch=1), live=False).notes)
    assert all(w in text for w in words) and "gated delta rule" not in text
    packed = " ".join(explain(shape, context(seq_len=64, batch=1, packed=True), live=False).notes)
    assert "packed" in packed
