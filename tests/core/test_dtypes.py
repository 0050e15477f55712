"""The one dtype table: every name of a dtype maps to the same record, and torch agrees."""

from __future__ import annotations

import pytest
import torch

from tuneproof.core.dtypes import (
    BY_CONFIG,
    BY_SAFETENSORS,
    BY_SHORT,
    DTYPES,
    MODEL_DTYPES,
    short_name,
    torch_dtype,
)


@pytest.mark.parametrize("d", DTYPES, ids=lambda d: d.short)
def test_every_name_of_a_dtype_is_one_record(d) -> None:  # type: ignore[no-untyped-def]
    assert BY_SHORT[d.short] is BY_SAFETENSORS[d.safetensors] is BY_CONFIG[d.config] is d
    assert torch_dtype(d.short).itemsize == d.bytes
    assert short_name(torch_dtype(d.short)) == d.short == short_name(str(torch_dtype(d.short)))


def test_unknown_dtypes_are_not_guessed() -> None:
    assert short_name(torch.int8) is None
    with pytest.raises(KeyError):
        torch_dtype("fp8")
    assert MODEL_DTYPES == ("bf16", "fp16", "fp32")
