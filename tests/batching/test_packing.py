"""Packing: best-fit-decreasing, the packed-row collator, and the transformers mask trap it refuses."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tuneproof.core.errors import TuneproofError
from tuneproof.data import PackedBatchSampler, PackedCollator, best_fit_decreasing, check_packed_batch


@given(lengths=st.lists(st.integers(1, 100), min_size=1, max_size=200), capacity=st.integers(100, 300))
@settings(max_examples=80, deadline=None)
def test_bfd_packs_everything_within_capacity(lengths: list[int], capacity: int) -> None:
    arr = np.array(lengths)
    rows = best_fit_decreasing(arr, capacity)
    assert sorted(int(i) for r in rows for i in r) == list(range(len(lengths)))
    assert all(arr[r].sum() <= capacity for r in rows)
    # never worse than the volume bound by more than one row per "half-full" pair (BFD guarantee-ish)
    assert len(rows) <= 2 * -(-arr.sum() // capacity) + 1


def test_bfd_is_best_fit() -> None:
    # 7 fits the row holding 3 (room 7) exactly, not the emptier one holding 1 (room 9)
    rows = best_fit_decreasing(np.array([9, 1, 3, 7]), 10)
    assert sorted(sorted(r.tolist()) for r in rows) == [[0, 1], [2, 3]]


def test_packed_sampler_shuffles_rows_per_epoch() -> None:
    s = PackedBatchSampler(np.arange(1, 200), capacity=400, seed=1)
    a = list(s)
    s.set_epoch(1)
    b = list(s)
    assert sorted(map(tuple, a)) == sorted(map(tuple, b)) and a != b


def test_collator_builds_position_ids_seq_ids_and_cu_seqlens() -> None:
    batch = PackedCollator(metadata=True)([{"input_ids": [5, 6, 7]}, {"input_ids": [8, 9]}])
    assert batch["input_ids"].tolist() == [[5, 6, 7, 8, 9]] and batch["use_cache"] is False
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1]]
    assert batch["seq_ids"].tolist() == [[0, 0, 0, 1, 1]]
    assert batch["cu_seqlens"].tolist() == [0, 3, 5]
    assert batch["labels"].tolist() == [[-100, 6, 7, -100, 9]]
    assert "attention_mask" not in batch
    assert set(PackedCollator()([{"input_ids": [1, 2]}])) == {
        "input_ids",
        "labels",
        "position_ids",
        "use_cache",
    }


def test_collator_and_check_refuse_both_traps() -> None:
    with pytest.raises(TuneproofError, match="documents attend to each other"):
        PackedCollator(attention_mask=True)
    packed = torch.tensor([[0, 1, 0, 1]])
    with pytest.raises(TuneproofError, match="drop the attention_mask"):
        check_packed_batch({"position_ids": packed, "attention_mask": torch.ones(1, 4), "use_cache": False})
    with pytest.raises(TuneproofError, match="use_cache=False"):
        check_packed_batch({"position_ids": packed})
    check_packed_batch({"position_ids": packed, "use_cache": False})
    check_packed_batch({"position_ids": torch.tensor([[0, 1, 2, 3]]), "attention_mask": torch.ones(1, 4)})


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_the_trap_is_real_in_transformers(attn: str) -> None:
    """Why the collator refuses a mask and sets use_cache=False: packed position_ids isolate documents
    only without a 2-D mask and without a cache (measured on transformers 5.24)."""
    from tiny_models import config_dict
    from tuneproof.arch import resolve
    from tuneproof.measure.model import build_model

    cfg = config_dict("llama", num_hidden_layers=1)
    model = build_model(resolve(cfg), attn).train()
    doc_a, doc_b = [3, 4, 5, 6], [7, 8, 9]
    batch = PackedCollator()([{"input_ids": doc_a}, {"input_ids": doc_b}])
    with torch.no_grad():
        alone = model(input_ids=torch.tensor([doc_b]), use_cache=False).logits[0]
        packed = model(**batch).logits[0, 4:]
        masked = model(**batch, attention_mask=torch.ones(1, 7, dtype=torch.long)).logits[0, 4:]
        cached = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).logits[0, 4:]
    assert torch.allclose(packed, alone, atol=1e-5)  # the collator's batch: documents isolated
    assert not torch.allclose(masked, alone, atol=1e-3)  # all-ones mask: doc_b attends to doc_a
    assert not torch.allclose(cached, alone, atol=1e-3)  # default use_cache: the same leak


def test_packing_capacity_errors() -> None:
    with pytest.raises(TuneproofError, match="exceeds the packing capacity 10"):
        best_fit_decreasing(np.array([5, 11]), 10)
