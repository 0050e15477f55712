"""xLSTM's mLSTM cell: the cost formula against FlopCounterMode on transformers' own native backend
(`xLSTMBackend`, the path without the `xlstm` package) in each of its modes and at lengths that are
and are not whole chunks, forward and backward; the tiny model's shape and the explainer's line."""

from __future__ import annotations

from typing import Any

import pytest

from tuneproof.arch.mixers import mixer_flops
from tuneproof.arch.mlstm import PAD_CHUNK, MLstm, mlstm_pieces

HEADS, DK, DV, CHUNK = 2, 8, 16, 16


def _backend(mode: str) -> Any:
    from transformers import xLSTMConfig
    from transformers.models.xlstm import modeling_xlstm

    if modeling_xlstm.external_xlstm:
        pytest.skip("the xlstm package is installed: transformers builds its kernels, not the native backend")
    cfg = xLSTMConfig(hidden_size=32, num_heads=HEADS, mode=mode, chunk_size=CHUNK,
                      return_last_states=mode == "inference")  # fmt: skip
    return modeling_xlstm.xLSTMBackend(cfg)


def _run(mode: str, length: int) -> tuple[int, int]:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    backend = _backend(mode)
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, HEADS, length, DK, generator=gen, requires_grad=True) for _ in range(2))
    v = torch.randn(1, HEADS, length, DV, generator=gen, requires_grad=True)
    i, f = (torch.randn(1, HEADS, length, generator=gen, requires_grad=True) for _ in range(2))
    forward, backward = FlopCounterMode(display=False), FlopCounterMode(display=False)
    with forward:
        out = backend(q, k, v, i, f)
    h = out[0] if isinstance(out, tuple) else out
    with backward:
        h.sum().backward()
    return forward.get_total_flops(), backward.get_total_flops()


@pytest.mark.parametrize(
    ("mode", "length"),
    [("inference", n) for n in (1, 5, 16, 37, 70)]
    + [("train", n) for n in (16, 48)]
    + [("train_with_padding", n) for n in (5, 70)],
)
def test_mlstm_flops_match_flop_counter_on_transformers_own_backend(mode: str, length: int) -> None:
    chunk = PAD_CHUNK if mode == "train_with_padding" else CHUNK
    core = MLstm(q="q", k="k", v="v", dst="o", heads=HEADS, key_dim=DK, value_dim=DV, chunk=chunk, mode=mode)
    forward, backward = _run(mode, length)
    f, conv, b = mixer_flops(core, length)
    assert (f, conv, b) == (forward, 0.0, backward)


def test_inference_mode_runs_whole_chunks_then_a_per_token_loop() -> None:
    core = MLstm(
        q="q", k="k", v="v", dst="o", heads=HEADS, key_dim=DK, value_dim=DV, chunk=CHUNK, mode="inference"
    )
    assert mlstm_pieces(core, 37) == (2, 5)
    padded = MLstm(
        q="q",
        k="k",
        v="v",
        dst="o",
        heads=HEADS,
        key_dim=DK,
        value_dim=DV,
        chunk=PAD_CHUNK,
        mode="train_with_padding",
    )
    assert mlstm_pieces(padded, 70) == (2, 0)  # padded to 128 tokens


def test_the_tiny_xlstm_reads_its_mlstm_cell_and_the_explainer_names_the_paths() -> None:
    from contexts import context
    from tiny_models import shrunk_config
    from tuneproof.arch import resolve
    from tuneproof.attention.dispatch import explain

    shape = resolve(shrunk_config("xlstm")).shape
    core = next(s for s in shape.layers[0].steps if isinstance(s, MLstm))
    assert (core.heads, core.key_dim, core.value_dim, core.chunk, core.mode) == (8, 8, 16, 16, "inference")
    text = " ".join(explain(shape, context(seq_len=64, batch=1), live=False).notes)
    assert "mlstm_chunkwise_native_autograd" in text and "mlstm_recurrent_step_native" in text
    assert "xlstm" in text and "gated delta rule" not in text


def test_an_unknown_backend_mode_is_refused() -> None:
    with pytest.raises(ValueError, match=r"MLstm\.mode"):
        MLstm(q="q", k="k", v="v", dst="o", heads=HEADS, key_dim=DK, value_dim=DV, chunk=CHUNK, mode="fast")
