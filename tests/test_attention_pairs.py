"""Pair counts against brute force over the (q, k) grid."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuneproof.flops.attention import flex_block_pairs, intended_pairs, performed_pairs


def _allowed(width: int, length: int, window: int | None) -> np.ndarray:
    q = np.arange(width)[:, None]
    k = np.arange(width)[None, :]
    ok = (k <= q) & (k < length)
    if window is not None:
        ok &= q - k < window
    return ok


@given(length=st.integers(1, 300), window=st.one_of(st.none(), st.integers(1, 200)))
@settings(max_examples=150, deadline=None)
def test_intended_pairs_is_exact(length: int, window: int | None) -> None:
    assert intended_pairs(length, window) == int(_allowed(length, length, window).sum())


@given(
    width=st.integers(1, 700),
    data=st.data(),
    window=st.one_of(st.none(), st.integers(1, 400)),
    block=st.sampled_from([16, 64, 128]),
)
@settings(max_examples=120, deadline=None)
def test_flex_blocks_match_brute_force(
    width: int, data: st.DataObject, window: int | None, block: int
) -> None:
    length = data.draw(st.integers(1, width))
    ok = _allowed(width, length, window)
    expect = 0
    for q0 in range(0, width, block):
        for k0 in range(0, width, block):
            tile = ok[q0 : q0 + block, k0 : k0 + block]
            if tile.any():
                expect += tile.size
    assert flex_block_pairs(width, length, window, block) == expect


def test_sliding_formula_from_the_issue() -> None:
    t, w = 16384, 1024
    assert intended_pairs(t, w) == w * (w + 1) // 2 + (t - w) * w
    assert intended_pairs(t, None) == t * (t + 1) // 2


def test_sdpa_materialises_at_and_above_the_window_only() -> None:
    below = performed_pairs("sdpa", 1023, [1023], 1024)
    at = performed_pairs("sdpa", 1024, [1024], 1024)
    assert not below.mask_materialised and below.pairs == intended_pairs(1023, None)
    assert at.mask_materialised and at.pairs == 1024 * 1024
    assert "kv_length 1024 >= window 1024" in at.why


def test_sdpa_padding_forces_the_full_square_on_global_layers() -> None:
    r = performed_pairs("sdpa", 100, [100, 60], None)
    assert r.mask_materialised and r.pairs == 2 * 100 * 100 and "padding" in r.why
    assert performed_pairs("sdpa", 100, [100, 100], None).pairs == 2 * intended_pairs(100, None)


def test_flash_attention_counts_real_tokens_only() -> None:
    assert performed_pairs("flash_attention_2", 100, [100, 60], 16).pairs == (
        intended_pairs(100, 16) + intended_pairs(60, 16)
    )


def test_unknown_path_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown attention path"):
        performed_pairs("xformers", 10, [10], None)
