"""Pair counts against brute force over the (q, k) grid, and the attention path table: one mask rule
read by the ledger, the explainer and batching alike."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contexts import context
from tuneproof.arch import from_config
from tuneproof.attention.dispatch import explain
from tuneproof.attention.pairs import flex_block_pairs, flex_document_pairs, intended_pairs
from tuneproof.attention.paths import PATHS, intended_in, names, path
from tuneproof.core.errors import TuneproofError
from tuneproof.flops import Step, flop_report
from tuneproof.runs.step import Rows


def _allowed(width: int, length: int, window: int | None) -> np.ndarray:
    q = np.arange(width)[:, None]
    k = np.arange(width)[None, :]
    ok = (k <= q) & (k < length)
    if window is not None:
        ok &= q - k < window
    return ok


def _blocks_touched(ok: np.ndarray, block: int) -> int:
    width = ok.shape[0]
    total = 0
    for q0 in range(0, width, block):
        for k0 in range(0, width, block):
            tile = ok[q0 : q0 + block, k0 : k0 + block]
            if tile.any():
                total += tile.size
    return total


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
@settings(max_examples=150, deadline=None)
def test_flex_blocks_match_brute_force(
    width: int, data: st.DataObject, window: int | None, block: int
) -> None:
    length = data.draw(st.integers(1, width))
    assert flex_block_pairs(width, length, window, block) == _blocks_touched(
        _allowed(width, length, window), block
    )


@given(
    docs=st.lists(st.integers(1, 150), min_size=1, max_size=8),
    window=st.one_of(st.none(), st.integers(1, 300)),
    block=st.sampled_from([16, 64, 128]),
)
@settings(max_examples=150, deadline=None)
def test_flex_document_blocks_match_brute_force(docs: list[int], window: int | None, block: int) -> None:
    width = sum(docs)
    doc = np.repeat(np.arange(len(docs)), docs)
    ok = _allowed(width, width, window) & (doc[:, None] == doc[None, :])
    assert flex_document_pairs(docs, window, block) == _blocks_touched(ok, block)


def test_flex_counts_stay_cheap_at_huge_widths() -> None:
    # one pass over the query blocks: a million-token row is counted without a blocks-squared matrix
    t = 1 << 20
    assert flex_block_pairs(t, t, None) == sum(128 * 128 * (i + 1) for i in range(t // 128))
    assert flex_block_pairs(t, t, 1024) < flex_block_pairs(t, t, None) // 100


def test_sliding_formula_from_the_issue() -> None:
    t, w = 16384, 1024
    assert intended_pairs(t, w) == w * (w + 1) // 2 + (t - w) * w
    assert intended_pairs(t, None) == t * (t + 1) // 2


def test_sdpa_materialises_at_and_above_the_window_only() -> None:
    sdpa = path("sdpa")
    below = sdpa.performed(Rows.padded(1023, [1023]), 1024)
    at = sdpa.performed(Rows.padded(1024, [1024]), 1024)
    assert not below.mask.materialised and below.pairs == intended_pairs(1023, None)
    assert at.mask.materialised and at.pairs == 1024 * 1024
    assert "kv_length 1024 >= window 1024" in at.why


def test_sdpa_padding_or_packing_forces_the_full_square() -> None:
    sdpa = path("sdpa")
    padded = sdpa.performed(Rows.padded(100, [100, 60]), None)
    assert padded.mask.materialised and padded.pairs == 2 * 100 * 100 and "padded batch" in padded.why
    assert sdpa.performed(Rows.padded(100, [100, 100]), None).pairs == 2 * intended_pairs(100, None)
    packed = sdpa.performed(Rows(100, ((40, 60),)), None)
    assert packed.mask.materialised and packed.pairs == 100 * 100 and "packed batch" in packed.why


def test_flash_counts_real_tokens_and_documents_only() -> None:
    flash = path("flash_attention_2")
    assert flash.performed(Rows.padded(100, [100, 60]), 16).pairs == intended_pairs(100, 16) + intended_pairs(
        60, 16
    )
    assert flash.performed(Rows(100, ((40, 60),)), None).pairs == intended_pairs(40, None) + intended_pairs(
        60, None
    )


def test_unknown_path_is_refused_never_costed_as_another() -> None:
    with pytest.raises(TuneproofError, match="'xformers' is not a known attention path"):
        path("xformers")
    with pytest.raises(TuneproofError, match="attn 'xformers'"):
        Step(seq_len=8, attn="xformers")


def test_rows_take_packed_rows_that_end_in_padding_and_refuse_overfull_rows() -> None:
    """A packed row padded to a multiple (TRL's pad_to_multiple_of, Axolotl's multipack) is a real
    batch: its documents are priced, its padding is not a document."""
    rows = Rows(100, ((40, 50),))
    assert rows.is_packed and rows.is_padded
    assert intended_in(rows, None) == 40 * 41 // 2 + 50 * 51 // 2
    with pytest.raises(TuneproofError, match="hold 120 tokens in a row of width 100"):
        Rows.padded(100, [120])


def test_path_table_flags() -> None:
    assert list(PATHS) == ["eager", "sdpa", "flash_attention_2", "flex_attention", "unknown"]
    assert names() == ("eager", "sdpa", "flash_attention_2", "flex_attention")  # a user's choices
    assert names(probe=True) == ("eager", "sdpa", "flex_attention")
    assert names(adjudicate=True) == ("eager", "sdpa", "flex_attention")
    assert [p.name for p in PATHS.values() if p.fused_backward] == [
        "sdpa",
        "flash_attention_2",
        "flex_attention",
    ]


# ---- the ledger and the explainer read one mask rule --------------------------------------------

GRID_SHAPE = {
    "model_type": "gemma3_text",
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "query_pre_attn_scalar": 16,
    "sliding_window": 64,
    "layer_types": ["sliding_attention", "full_attention"],
    "vocab_size": 256,
}


@pytest.mark.parametrize("attn", names())
@pytest.mark.parametrize("geometry", ["plain", "padded", "packed"])
@pytest.mark.parametrize("width", [32, 63, 64, 65, 256])  # below, at and above the window of 64
def test_ledger_and_explainer_agree_on_the_mask(attn: str, geometry: str, width: int) -> None:
    shape = from_config(GRID_SHAPE)
    ctx = context(seq_len=width, batch=2, attn=attn, padded=geometry == "padded", packed=geometry == "packed")
    rows = ctx.rows
    run = Step(seq_len=width, batch=2, attn=attn, documents=rows.docs)
    ledger = flop_report(shape, run).attention
    explained = {f"{x.layer_type}": x.mask_materialised for x in explain(shape, ctx, live=False).layers}
    for label, mask in ledger.items():
        kind = label.split()[0]
        assert mask.materialised == explained[kind], (label, attn, geometry, width)
    # and the rule itself, spelled out once here: sdpa materialises iff packed, padded or width >= window
    sliding = next(m for label, m in ledger.items() if label.startswith("sliding"))
    expect = {"eager": True, "flash_attention_2": False, "flex_attention": False}.get(
        attn, geometry != "plain" or width >= 64
    )
    assert sliding.materialised == expect
