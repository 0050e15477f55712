"""flex_attention done safely: block masks cached per width, kernel options that fit the card,
and a recompile guard that turns dynamo's silent eager fallback into a loud error.

Why the guard: `torch._dynamo.config.recompile_limit` defaults to 8 and every distinct sequence width
(and every distinct (heads, head_dim)) is a new graph. Past the limit dynamo does not fail: it runs
flex_attention uncompiled, which materialises the full score matrix (about 20x slower in the CASE)
and is documented as unsafe for the backward.
"""

from __future__ import annotations

import contextlib
import functools
import re
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from tuneproof.attention.kernel_measure import best_choice
from tuneproof.attention.kernel_options import KernelChoice
from tuneproof.core import validate
from tuneproof.core.errors import TuneproofError

EAGER_FLEX_WARNING = "flex_attention called without torch.compile()"
MIN_TORCH = (2, 6)


def require_flex() -> None:
    """flex_attention with CPU support and `kernel_options` needs torch >= 2.6."""
    import torch

    major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    if (major, minor) < MIN_TORCH:
        raise TuneproofError(
            f"flex_attention needs torch >= {MIN_TORCH[0]}.{MIN_TORCH[1]}, found {torch.__version__}",
            "upgrade torch or use the sdpa attention path",
        )


# ---- block masks ------------------------------------------------------------------------------


def _causal(b: Any, h: Any, q: Any, k: Any) -> Any:
    return k <= q


@functools.lru_cache(maxsize=64)
def causal_block_mask(width: int, device: str = "cpu") -> Any:
    from torch.nn.attention.flex_attention import create_block_mask

    return create_block_mask(_causal, None, None, width, width, device=device)


@functools.lru_cache(maxsize=64)
def sliding_block_mask(width: int, window: int, device: str = "cpu") -> Any:
    """Query q sees keys q-window < k <= q (transformers' sliding_window_overlay convention)."""
    from torch.nn.attention.flex_attention import create_block_mask

    def mask_mod(b: Any, h: Any, q: Any, k: Any) -> Any:
        return (k <= q) & (q - k < window)

    return create_block_mask(mask_mod, None, None, width, width, device=device)


@functools.lru_cache(maxsize=64)
def document_block_mask(lengths: tuple[int, ...], window: int | None = None, device: str = "cpu") -> Any:
    """Packed documents of these lengths in one row: causal within a document, never across."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask

    doc = torch.repeat_interleave(
        torch.arange(len(lengths), device=device), torch.tensor(lengths, device=device)
    )
    width = int(sum(lengths))

    def mask_mod(b: Any, h: Any, q: Any, k: Any) -> Any:
        ok = (doc[q] == doc[k]) & (k <= q)
        return ok & (q - k < window) if window is not None else ok

    return create_block_mask(mask_mod, None, None, width, width, device=device)


@functools.lru_cache(maxsize=64)
def padding_block_mask(
    lengths: tuple[int, ...], width: int, window: int | None = None, device: str = "cpu"
) -> Any:
    """A batch padded to `width`: causal (and windowed) over real keys only, one mask row per sequence."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask

    real = torch.tensor(lengths, device=device)

    def mask_mod(b: Any, h: Any, q: Any, k: Any) -> Any:
        ok = (k <= q) & (k < real[b])
        return ok & (q - k < window) if window is not None else ok

    return create_block_mask(mask_mod, len(lengths), None, width, width, device=device)


# ---- recompile guard --------------------------------------------------------------------------


def graphs_needed(widths: Iterable[int], num_variants: int = 1) -> int:
    """Distinct compiled graphs a run needs: one per (width, attention variant)."""
    return len(set(widths)) * max(1, num_variants)


@dataclass(kw_only=True, slots=True)
class RecompileGuard:
    """Raises dynamo's recompile limit to cover the run's distinct widths and makes hitting it an error.

    Use as a context manager (restores the previous settings) or call `install()` for the whole process.
    Inside, a call that would fall back to uncompiled flex raises instead: dynamo's own
    `fail_on_recompile_limit_hit`, and the "flex_attention called without torch.compile()" warning
    turned into an error."""

    widths: tuple[int, ...]
    num_variants: int = 1
    margin: int = 4
    _saved: dict[str, Any] | None = None

    @property
    def limit(self) -> int:
        return graphs_needed(self.widths, self.num_variants) + self.margin

    def install(self) -> None:
        import torch._dynamo.config as dc

        self._saved = {
            "recompile_limit": dc.recompile_limit,
            "fail": dc.fail_on_recompile_limit_hit,
            "accumulated": dc.accumulated_recompile_limit,
            "filters": list(warnings.filters),
        }
        dc.recompile_limit = max(dc.recompile_limit, self.limit)
        dc.accumulated_recompile_limit = max(dc.accumulated_recompile_limit, self.limit)
        dc.fail_on_recompile_limit_hit = True
        warnings.filterwarnings("error", message=f".*{re.escape(EAGER_FLEX_WARNING)}.*")

    def uninstall(self) -> None:
        import torch._dynamo.config as dc

        if self._saved is None:
            return
        dc.recompile_limit = self._saved["recompile_limit"]
        dc.fail_on_recompile_limit_hit = self._saved["fail"]
        dc.accumulated_recompile_limit = self._saved["accumulated"]
        warnings.filters[:] = self._saved["filters"]  # type: ignore[index]
        self._saved = None

    def __enter__(self) -> RecompileGuard:
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self.uninstall()


@contextlib.contextmanager
def loud_recompile_errors() -> Iterator[None]:
    """Re-raise dynamo's limit failure as a TuneproofError that says what to do."""
    try:
        yield
    except Exception as e:
        name = type(e).__name__
        if name == "FailOnRecompileLimitHit" or "recompile_limit" in str(e) or EAGER_FLEX_WARNING in str(e):
            raise TuneproofError(
                f"flex_attention would fall back to uncompiled eager ({name})",
                "size the RecompileGuard with every width the run will see "
                "(the bucketing sampler knows them)",
            ) from e
        raise


# ---- switching a transformers model to flex ---------------------------------------------------


@dataclass(slots=True)
class FlexSetup:
    kernel_options: dict[str, int]
    choices: dict[str, KernelChoice]
    guard: RecompileGuard

    def describe(self) -> list[str]:
        return [f"{k}: {c.reason}" for k, c in self.choices.items()] + [
            f"recompile limit {self.guard.limit} for {len(set(self.guard.widths))} widths x "
            f"{self.guard.num_variants} attention variants; exceeding it raises"
        ]


@contextlib.contextmanager
def enable_flex(
    model: Any,
    widths: Iterable[int],
    *,
    capability: tuple[int, int] | None = None,
    dtype: str = "bf16",
    training: bool = True,
) -> Iterator[FlexSetup]:
    """Inside the block, `model` runs flex_attention with kernel options that fit the card on every
    attention call, under a recompile guard sized for `widths`; a call that would fall back to
    uncompiled flex raises `TuneproofError`. On exit everything is undone: the model's previous
    attention implementation, the options hook, dynamo's limits and the warning filters.

        with enable_flex(model, sampler.widths(), capability=(12, 0)) as setup:
            trainer.train()

    transformers passes one `kernel_options` to all layers, so the options must fit every head_dim
    of the model (Gemma 4: 256 on sliding layers, 512 on global ones)."""
    require_flex()
    from tuneproof.arch import resolve

    widths = tuple(validate.integers("widths", list(widths)))
    shape = resolve(model.config).shape
    if "flex_attention" in shape.attn_refused:
        raise TuneproofError(
            f"transformers will not run flex_attention for {shape.model_type}: "
            + shape.attn_refused["flex_attention"],
            "keep sdpa (or eager) for this model",
        )
    softmax = [s for s in shape.layers if s.attention.softmax]  # linear-attention layers never call flex
    variants = {(s.attention.num_heads, s.attention.num_kv_heads, s.attention.head_dim) for s in softmax}
    options: dict[str, int] = {}
    choices: dict[str, KernelChoice] = {}
    if capability is not None:
        dims = {s.attention.head_dim for s in softmax}
        for p in ("fwd", "bwd") if training else ("fwd",):
            choice = best_choice(dims, dtype, capability, p)  # measured on this CUDA device
            choices[p] = choice
            options.update(choice.options)
    previous = getattr(model.config, "_attn_implementation", None) or "sdpa"
    guard = RecompileGuard(widths=widths, num_variants=len(variants))
    handle = None
    model.set_attn_implementation("flex_attention")
    try:
        guard.install()
        if options:

            def inject(
                module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
            ) -> tuple[Any, dict[str, Any]]:
                kwargs.setdefault("kernel_options", options)
                return args, kwargs

            handle = model.register_forward_pre_hook(inject, with_kwargs=True)
        with loud_recompile_errors():
            yield FlexSetup(options, choices, guard)
    finally:
        if handle is not None:
            handle.remove()
        guard.uninstall()
        model.set_attn_implementation(previous)
