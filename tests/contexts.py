"""The explainer's context as the tests write it: the flags `tuneproof explain` takes (width, batch,
path, padded or packed, training, the card's capability), made into the one step a run gives
(`Run.step()`) and the card (`hardware.card`)."""

from __future__ import annotations

from typing import Any

from tuneproof.attention.dispatch import Context
from tuneproof.hardware.capability import parse_capability
from tuneproof.hardware.card import CPU, Card, of_capability
from tuneproof.runs.run import Run


def context(
    seq_len: int,
    batch: int = 1,
    attn: str = "sdpa",
    padded: bool = False,
    packed: bool = False,
    dtype: str = "bf16",
    training: bool = False,
    capability: Any = None,
    smem_limit: int | None = None,
    smem_source: str | None = None,
    dropout: float | None = None,
    compiled: bool = False,
    cudnn: Any = None,
    cuda: str | None = None,
) -> Context:
    run = Run.of_flags(
        attn=attn, mode="full" if training else "forward", seq_len=seq_len, micro_batch=batch,
        torch_compile=compiled,
    )  # fmt: skip
    return Context(
        step=run.step(padded=padded, packed=packed), card=_card(capability, smem_limit, smem_source),
        dtype=dtype, dropout=dropout, cudnn=cudnn, cuda=cuda,
    )  # fmt: skip


def _card(capability: Any, smem_limit: int | None, smem_source: str | None) -> Card:
    if capability is None:
        return CPU
    if not isinstance(capability, tuple):
        text = capability if isinstance(capability, str) else ".".join(map(str, capability))
        capability = parse_capability(text)
    table = of_capability(capability)
    if smem_limit is None:
        return table
    return Card(capability=capability, smem_limit=smem_limit, smem_source=smem_source)
