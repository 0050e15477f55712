"""flex_attention kernel options that fit the card's shared memory, chosen with their reason.

Shared-memory estimate (bytes, element size e, head_dim rounded up to a power of two D, as the
kernel stages it):
- forward, blocks (BLOCK_M, BLOCK_N): e * (BLOCK_M*D + BLOCK_N*D + BLOCK_M*BLOCK_N)
  (Q tile, K/V tile, score tile);
- backward, blocks (BLOCK_M1, BLOCK_N1): e * (BLOCK_N1*D + 2*BLOCK_M1*D + 2*BLOCK_M1*BLOCK_N1)
  (K tile; Q and dO tiles; P and dS tiles).
It reproduces the three published data points exactly: fwd 64x32 bf16 head_dim 512 = 102,400 B
(docs/reference-run.md), fwd 64x32 fp32 head_dim 256 = 106,496 B (pytorch#143832), bwd 64x64 bf16
head_dim 256 = 114,688 B (pytorch#198224). It is an estimate: `run_with_smem_fallback` also catches
Triton's out-of-resource error and retries smaller.

Defaults mirror torch 2.13's `_inductor/template_heuristics/triton.py` (CUDAConfigHeuristic
get_flex_attn_fwd_configs / get_flex_attn_bwd_configs).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tuneproof import validate
from tuneproof.attention.pairs import FLEX_BLOCK
from tuneproof.dtypes import BY_SHORT, MODEL_DTYPES
from tuneproof.errors import TuneproofError
from tuneproof.hardware import SMEM_SM80, SMEM_SM86_89_120, SMEM_SM90_100

DTYPE_BYTES = {s: BY_SHORT[s].bytes for s in MODEL_DTYPES}


def smem_limit(capability: tuple[int, int]) -> int:
    """Per-block opt-in shared memory for a compute capability (see tuneproof.hardware)."""
    major, minor = capability
    if major in (9, 10):
        return SMEM_SM90_100
    if (major, minor) == (8, 0):
        return SMEM_SM80
    if major in (8, 11, 12):
        return SMEM_SM86_89_120
    raise TuneproofError(
        f"no shared-memory limit known for capability {major}.{minor}", "pass smem_limit explicitly"
    )


def _pow2(d: int) -> int:
    return 1 << (d - 1).bit_length()


def smem_fwd(block_m: int, block_n: int, head_dim: int, dtype: str) -> int:
    d = _pow2(head_dim)
    return DTYPE_BYTES[dtype] * (block_m * d + block_n * d + block_m * block_n)


def smem_bwd(block_m: int, block_n: int, head_dim: int, dtype: str) -> int:
    d = _pow2(head_dim)
    return DTYPE_BYTES[dtype] * (block_n * d + 2 * block_m * d + 2 * block_m * block_n)


# torch 2.13 CUDAConfigHeuristic forward tables, keyed by (dtype, head_dim) exactly as the flex lowering
# passes them (the raw head_dim: 96 or 192 have no entry on most cards and take the default).
_SM120 = {
    ("fp32", 64): (128, 32, 2, 4),
    ("fp32", 128): (128, 32, 2, 4),
    ("fp32", 256): (64, 16, 2, 4),
    ("bf16", 64): (128, 64, 2, 4),
    ("bf16", 128): (128, 64, 2, 8),
    ("bf16", 256): (32, 64, 2, 4),
}
_SM100 = {
    ("fp32", 64): (128, 32, 3, 4),
    ("fp32", 128): (32, 64, 3, 4),
    ("fp32", 192): (32, 64, 2, 4),
    ("fp32", 256): (32, 32, 3, 4),
    ("bf16", 64): (128, 128, 3, 4),
    ("bf16", 128): (128, 64, 3, 8),
    ("bf16", 192): (128, 128, 1, 8),
    ("bf16", 256): (64, 32, 3, 4),
}
_SM90 = {
    ("fp32", 64): (128, 32, 3, 4),
    ("fp32", 128): (32, 64, 3, 4),
    ("fp32", 192): (32, 64, 1, 8),
    ("fp32", 256): (32, 32, 3, 4),
    ("bf16", 64): (128, 128, 3, 4),
    ("bf16", 128): (128, 64, 3, 8),
    ("bf16", 256): (64, 32, 3, 4),
}
_SM80 = {
    ("fp32", 64): (128, 32, 3, 4), ("fp32", 128): (128, 32, 3, 4), ("fp32", 256): (64, 16, 3, 4),
    ("bf16", 64): (128, 64, 3, 4), ("bf16", 128): (128, 64, 3, 8), ("bf16", 192): (128, 32, 2, 8),
    ("bf16", 256): (32, 64, 3, 4),
}  # fmt: skip
# Ordering rule: as torch tests them, newest architecture first; the first matching row wins. fp16
# shares bf16's entries in every table.
FWD_TABLES: tuple[
    tuple[Callable[[tuple[int, int]], bool], dict[tuple[str, int], tuple[int, int, int, int]]], ...
] = (
    (lambda c: c >= (11, 0), _SM120),
    (lambda c: c >= (10, 0), _SM100),
    (lambda c: c == (9, 0), _SM90),
    (lambda c: c >= (8, 0), _SM80),
)


def default_fwd(head_dim: int, dtype: str, cap: tuple[int, int]) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_stages, num_warps) torch 2.13 uses for the forward on CUDA
    (CUDAConfigHeuristic.get_flex_attn_fwd_configs; tests/test_attention_flex.py checks every known
    capability, head_dim and dtype against it)."""
    if head_dim > 256:
        return (32, 16, 3, 4) if dtype == "fp32" else (64, 32, 3, 4)
    table = next((t for test, t in FWD_TABLES if test(cap)), {})
    return table.get(("fp32" if dtype == "fp32" else "bf16", head_dim), (64, 64, 3, 4))


def default_bwd(head_dim: int, dtype: str, cap: tuple[int, int]) -> tuple[int, int, int, int]:
    """(BLOCK_M1=BLOCK_N2, BLOCK_N1=BLOCK_M2, num_stages, num_warps) for the backward on CUDA
    (CUDAConfigHeuristic.get_flex_attn_bwd_configs, checked the same way)."""
    if dtype == "fp32" or head_dim > 256 or cap < (8, 0):
        return (16, 16, 1, 4)
    h = head_dim
    if cap == (9, 0):
        return (64, 64, 3, 4) if h < 64 else (64, 128, 3, 8) if h <= 128 else (64, 64, 2, 4)
    if cap[0] == 10:
        return (64, 128, 3, 4) if h <= 128 else (64, 64, 1, 8) if h <= 192 else (64, 64, 1, 4)
    if cap[0] in (11, 12):
        return (32, 128, 3, 4) if h < 64 else (64, 64, 1 if h >= 128 else 2, 4)
    return (32, 128, 3, 4) if h < 64 else (64, 64, 3 if cap == (8, 6) and h == 128 else 2, 4)


# Smaller configurations tried in order when the default does not fit (largest first).
CANDIDATES = ((64, 64), (64, 32), (32, 64), (32, 32), (32, 16), (16, 32), (16, 16))


@dataclass(frozen=True, slots=True)
class KernelChoice:
    """kernel_options to pass (empty = keep torch's defaults) and why."""

    options: dict[str, int]
    reason: str
    smem_bytes: int
    smem_limit: int
    attempts: list[str] = field(default_factory=list)


def choose_kernel_options(
    head_dim: int,
    dtype: str = "bf16",
    *,
    capability: tuple[int, int] | None = None,
    smem_limit_bytes: int | None = None,
    pass_: str = "fwd",
) -> KernelChoice:
    """Keep torch's default blocks when they fit the per-block shared memory; else the largest that does."""
    validate.integer("head_dim", head_dim, high=65536)
    validate.choice("dtype", dtype, DTYPE_BYTES)
    validate.choice("pass_", pass_, ("fwd", "bwd"))
    if capability is None and smem_limit_bytes is None:
        raise TuneproofError("no device given", "pass capability=(major, minor) or smem_limit_bytes")
    cap = capability or (8, 0)
    limit = smem_limit_bytes if smem_limit_bytes is not None else smem_limit(cap)
    if pass_ == "fwd":
        bm, bn, _stages, warps = default_fwd(head_dim, dtype, cap)
        need = smem_fwd(bm, bn, head_dim, dtype)
        estimate = smem_fwd
    else:
        bm, bn, _stages, warps = default_bwd(head_dim, dtype, cap)
        need = smem_bwd(bm, bn, head_dim, dtype)
        estimate = smem_bwd
    where = f"capability {cap[0]}.{cap[1]}" if capability else "given limit"
    if need <= limit:
        return KernelChoice(
            {},
            f"default {bm}x{bn} ({pass_}, head_dim {head_dim}, {dtype}) needs {need:,} B <= "
            f"{limit:,} B per block ({where}): keep torch's defaults",
            need,
            limit,
        )
    for m, n in CANDIDATES:
        if m > bm or n > bn:
            continue
        got = estimate(m, n, head_dim, dtype)
        if got <= limit and m <= FLEX_BLOCK and n <= FLEX_BLOCK:  # blocks must divide the BlockMask block
            opts = _options(pass_, m, n, 1, warps)
            return KernelChoice(
                opts,
                f"default {bm}x{bn} ({pass_}, head_dim {head_dim}, {dtype}) needs {need:,} B > "
                f"{limit:,} B per block ({where}); {m}x{n} needs {got:,} B",
                got,
                limit,
            )
    raise TuneproofError(
        f"no flex block size fits {limit:,} B for head_dim {head_dim} {dtype} {pass_}",
        "use a smaller head_dim or another backend",
    )


def _options(pass_: str, m: int, n: int, stages: int, warps: int) -> dict[str, int]:
    if pass_ == "fwd":
        return {"fwd_BLOCK_M": m, "fwd_BLOCK_N": n, "fwd_num_stages": stages, "fwd_num_warps": warps}
    return {
        "bwd_BLOCK_M1": m,
        "bwd_BLOCK_N1": n,
        "bwd_BLOCK_M2": n,
        "bwd_BLOCK_N2": m,
        "bwd_num_stages": stages,
        "bwd_num_warps": warps,
    }


# Both textual forms of Triton's out-of-resource error (direct, and through inductor's autotuner).
_REQUIRED = re.compile(r"Required:\s*(\d+)")
_LIMIT = re.compile(r"Hardware limit:\s*(\d+)")


def parse_out_of_resource(message: str) -> tuple[int, int] | None:
    """(required, limit) bytes from a Triton shared-memory error, or None if it is not one."""
    if "out of resource" not in message:
        return None
    req, lim = _REQUIRED.search(message), _LIMIT.search(message)
    return (int(req.group(1)), int(lim.group(1))) if req and lim else None


def run_with_smem_fallback(
    fn: Callable[[dict[str, int]], Any],
    head_dim: int,
    dtype: str,
    pass_: str,
    first: dict[str, int] | None = None,
) -> tuple[Any, list[str]]:
    """Call fn(kernel_options); on Triton's out-of-resource error retry with the next smaller blocks.

    Returns fn's result and a log of what was tried."""
    log: list[str] = []
    tries: list[dict[str, int]] = [first or {}] + [_options(pass_, m, n, 1, 4) for m, n in CANDIDATES]
    for opts in tries:
        try:
            result = fn(opts)
        except Exception as e:  # Triton/inductor raise several types; only the resource error is retried
            parsed = parse_out_of_resource(str(e))
            if parsed is None:
                raise
            log.append(
                f"{opts or 'defaults'}: out of shared memory (required {parsed[0]:,} B, "
                f"limit {parsed[1]:,} B); retrying smaller"
            )
            continue
        log.append(f"{opts or 'defaults'}: ran")
        return result, log
    raise TuneproofError(
        f"flex_attention ran out of shared memory at every block size for head_dim {head_dim}",
        "use another attention backend for this layer",
    )


def choose_for_head_dims(
    head_dims: Iterable[int],
    dtype: str,
    *,
    capability: tuple[int, int] | None = None,
    smem_limit_bytes: int | None = None,
    pass_: str = "fwd",
) -> KernelChoice:
    """One set of options for every head_dim of a model: transformers passes a single `kernel_options`
    to all layers. Keeps the defaults when every head_dim's default fits; else the largest blocks
    that fit all of them."""
    dims = sorted(set(head_dims))
    per = {
        d: choose_kernel_options(
            d, dtype, capability=capability, smem_limit_bytes=smem_limit_bytes, pass_=pass_
        )
        for d in dims
    }
    if all(not c.options for c in per.values()):
        worst = max(per.values(), key=lambda c: c.smem_bytes)
        return KernelChoice({}, "; ".join(c.reason for c in per.values()), worst.smem_bytes, worst.smem_limit)
    limit = next(iter(per.values())).smem_limit
    estimate = smem_fwd if pass_ == "fwd" else smem_bwd
    for m, n in CANDIDATES:
        need = max(estimate(m, n, d, dtype) for d in dims)
        if need <= limit:
            over = [c.reason for c in per.values() if c.options]
            return KernelChoice(
                _options(pass_, m, n, 1, 4),
                f"{'; '.join(over)}; one setting for head_dims {dims}: {m}x{n} needs at most {need:,} B",
                need,
                limit,
            )
    raise TuneproofError(f"no flex block size fits {limit:,} B for head_dims {dims}", "use another backend")
