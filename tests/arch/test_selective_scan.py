"""Mamba-1's selective scan (mamba, falcon_mamba, jamba): the cost formula against FlopCounterMode on
transformers' own torch path (`mamba_selective_scan` and a tiny `MambaMixer`'s forward), the trap that
`self.dt_proj.weight @ time_step` bypasses LoRA, and the dispatch explainer's line."""

from __future__ import annotations

from typing import Any

import pytest

from tuneproof.arch.mixers import mixer_flops
from tuneproof.arch.selective_scan import SelectiveScan

LENGTHS = [1, 5, 37, 64]
D, N, K, R = 24, 8, 4, 3  # inner width, state, conv taps, time-step rank


def _counted(fn: Any) -> tuple[int, dict[str, int]]:
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return counter.get_total_flops(), {str(k): v for k, v in counter.get_flop_counts()["Global"].items()}


@pytest.mark.parametrize("length", LENGTHS)
def test_scan_flops_match_flop_counter_on_transformers_own_scan(length: int) -> None:
    import torch
    from transformers.models.mamba.modeling_mamba import mamba_selective_scan

    scan = SelectiveScan(q="q", k="k", v="v", dst="o", channels=D, state=N, conv_channels=D, conv_kernel=K)
    gen = torch.Generator().manual_seed(0)
    x, dt, z = (torch.randn(2, D, length, generator=gen, requires_grad=True) for _ in range(3))
    b, c = (torch.randn(2, N, length, generator=gen, requires_grad=True) for _ in range(2))
    a = -torch.rand(D, N, generator=gen)
    out: list[Any] = []
    forward, _ = _counted(lambda: out.append(mamba_selective_scan(x, dt, a, b, c, D=torch.ones(D), z=z,
                                                                   delta_softplus=True)))  # fmt: skip
    backward, _ = _counted(lambda: out[0].sum().backward())
    core, _, core_back = mixer_flops(scan, length)
    assert 2 * core == forward  # two sequences
    assert 2 * core_back == backward


def _tiny_mixer() -> Any:
    import torch
    from transformers import MambaConfig
    from transformers.models.mamba.modeling_mamba import MambaMixer

    cfg = MambaConfig(hidden_size=12, intermediate_size=D, state_size=N, conv_kernel=K, time_step_rank=R,
                      num_hidden_layers=1, vocab_size=32)  # fmt: skip
    torch.manual_seed(0)
    return MambaMixer(cfg, 0)


@pytest.mark.parametrize("length", LENGTHS)
def test_a_tiny_mamba_mixer_costs_its_gemms_conv_and_scan(length: int) -> None:
    """The whole torch forward of transformers' MambaMixer: in_proj, the depthwise conv, x_proj,
    dt_proj's weight matmul, the scan's per-step read-outs, out_proj; nothing else is counted."""
    import torch

    from tuneproof.arch.selective_scan import scan_core

    mixer = _tiny_mixer().eval()
    _, scan = scan_core(mixer)
    hidden = torch.randn(1, length, 12)
    with torch.no_grad():
        total, ops = _counted(lambda: mixer(hidden))
    core, conv = mixer_flops(scan, length)[:2]
    gemms = 2 * length * (12 * 2 * D + D * (R + 2 * N) + R * D + D * 12)
    assert ops["aten.convolution"] == conv
    assert total == gemms + conv + core


def test_lora_on_dt_proj_never_runs_and_the_ledger_does_not_offer_it() -> None:
    """The trap is real: PEFT wraps dt_proj, but the mixer multiplies by `dt_proj.weight` directly,
    so the adapter adds no FLOP; the ledger reads dt_proj as a GEMM LoRA cannot adapt."""
    import torch

    from tiny_models import shrunk_config
    from tuneproof.arch import resolve
    from tuneproof.measure.model import apply_lora, lora_targets

    mixer = _tiny_mixer()
    model = torch.nn.Sequential()
    model.add_module("mixer", mixer)
    hidden = torch.randn(1, 9, 12)
    plain, _ = _counted(lambda: mixer(hidden))
    adapted = apply_lora(model, ["mixer.dt_proj"], 2)
    assert type(adapted.base_model.model.mixer.dt_proj).__name__ == "Linear"  # PEFT's lora.Linear
    with_lora, _ = _counted(lambda: adapted.base_model.model.mixer(hidden))
    assert with_lora == plain

    shape = resolve(shrunk_config("mamba")).shape
    dt = next(s for s in shape.layers[0].steps if getattr(s, "name", "").endswith("dt_proj"))
    assert not dt.adaptable and "mixer.dt_proj" not in lora_targets(shape)
    assert any(isinstance(s, SelectiveScan) for s in shape.layers[0].steps)


def test_jamba_costs_its_scan_beside_attention_and_experts() -> None:
    from tiny_models import shrunk_config
    from tuneproof.arch import resolve

    shape = resolve(shrunk_config("jamba")).shape
    assert [layer.attention.kind for layer in shape.layers] == ["linear", "full"]
    mamba_moe = [s for s in shape.layers[0].steps if getattr(s, "num_experts", 1) > 1]
    assert mamba_moe and any(isinstance(s, SelectiveScan) for s in shape.layers[0].steps)


def test_explainer_says_the_torch_scan_is_sequential_and_names_the_kernels() -> None:
    from contexts import context
    from tiny_models import shrunk_config
    from tuneproof.arch import resolve
    from tuneproof.attention.dispatch import explain

    shape = resolve(shrunk_config("mamba")).shape
    text = " ".join(explain(shape, context(seq_len=64, batch=1), live=False).notes)
    assert "mamba_inner_fn" in text and "selective_scan_fn" in text and "causal_conv1d_fn" in text
    assert "sequential in T" in text and "gated delta rule" not in text
    packed = " ".join(explain(shape, context(seq_len=64, batch=1, packed=True), live=False).notes)
    assert "share one recurrent state" in packed


def test_zamba_tiny_build_builds_and_is_refused_for_its_shared_block() -> None:
    """Two hybrid layers let the shared block's tie resolve (one does not); zamba stays refused for
    its layout, never costed as a plain Mamba stack."""
    from tiny_models import shrunk_config
    from tuneproof.arch import resolve
    from tuneproof.arch.construct import meta_model
    from tuneproof.core.errors import TuneproofError

    cfg = shrunk_config("zamba")
    layers = meta_model(cfg).model.layers
    assert [type(m).__name__ for m in layers][1::2] == ["ZambaHybridLayer"] * 2
    with pytest.raises(TuneproofError, match="shared attention block"):
        resolve(cfg)
