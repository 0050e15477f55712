"""flex_attention kernel options that fit the card's shared memory, chosen with their reason.

Shared-memory estimate (bytes, element size e, head_dim rounded up to a power of two D), stage-aware.
The loop of the flex template loads a K and a V tile (forward) or a Q and a dO tile (backward) per
iteration; Triton's software pipelining (`num_stages` S > 1) keeps S copies of each in flight, while
with S = 1 nothing is prefetched and the buffers of tiles not live at once are shared:
- forward, blocks (BLOCK_M, BLOCK_N):
  S = 1: e * (BLOCK_M*D + BLOCK_N*D + BLOCK_M*BLOCK_N) (Q tile, one K/V tile, the score tile);
  S > 1: e * (BLOCK_M*D + S * 2*BLOCK_N*D) (Q tile, S K and V tiles; the scores stay in registers);
- backward, blocks (BLOCK_M1, BLOCK_N1):
  S = 1: e * (BLOCK_N1*D + 2*BLOCK_M1*D + 2*BLOCK_M1*BLOCK_N1) (K tile; Q and dO tiles; P and dS);
  S > 1: e * (BLOCK_N1*D + S * 2*BLOCK_M1*D + 2*BLOCK_M1*BLOCK_N1).
It reproduces every known point: fwd 64x32 bf16 head_dim 512 at 1 stage = 102,400 B (the reference
run, sm_120), fwd 64x32 fp32 head_dim 256 at 1 stage = 106,496 B (pytorch#143832: inductor retries a
failing config with num_stages=1, `compile_by_disabling_pipelining`, so the reported figure is the
1-stage one), bwd 64x64 bf16 head_dim 256 at 1 stage = 114,688 B (pytorch#198224, the sm_12x default),
and torch's H200 default fwd 64x32 x 3 stages at head_dim 512 = 262,144 B > 232,448 B (the device
check's "Required: 26x,xxx"). It is an estimate: `kernel_measure` compiles the choice on a CUDA
device and reads Triton's own answer, and `run_with_smem_fallback` catches the error and retries.

Defaults mirror torch 2.13's `_inductor/template_heuristics/triton.py` (CUDAConfigHeuristic
get_flex_attn_fwd_configs / get_flex_attn_bwd_configs).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tuneproof.attention.pairs import FLEX_BLOCK
from tuneproof.core import validate
from tuneproof.core.dtypes import BY_SHORT, MODEL_DTYPES
from tuneproof.core.errors import TuneproofError
from tuneproof.hardware.capability import smem_limit

DTYPE_BYTES = {s: BY_SHORT[s].bytes for s in MODEL_DTYPES}


def _pow2(d: int) -> int:
    return 1 << (d - 1).bit_length()


def smem_fwd(block_m: int, block_n: int, head_dim: int, dtype: str, stages: int = 1) -> int:
    d, e = _pow2(head_dim), DTYPE_BYTES[dtype]
    if stages > 1:
        return e * (block_m * d + stages * 2 * block_n * d)
    return e * (block_m * d + block_n * d + block_m * block_n)


def smem_bwd(block_m: int, block_n: int, head_dim: int, dtype: str, stages: int = 1) -> int:
    d = _pow2(head_dim)
    return DTYPE_BYTES[dtype] * (block_n * d + max(stages, 1) * 2 * block_m * d + 2 * block_m * block_n)


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
    (CUDAConfigHeuristic.get_flex_attn_fwd_configs; tests/attention/test_attention_flex.py checks every known
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


# Configurations whose shared memory a card reported (Triton's "Required"): the estimate reproduces each,
# so where it says one of them does not fit a smaller limit, that is a fact about bytes, not a guess.
# (pass, BLOCK_M, BLOCK_N, num_stages, head_dim rounded to a power of two, element bytes) -> evidence
SEEN = {
    ("fwd", 64, 32, 3, 512, 2): "an H200 refused it: 'Required: 26x,xxx' (bench/gpu_check.py)",
    ("fwd", 64, 32, 1, 512, 2): "the reference run on sm_120: 102,400 B",
    ("fwd", 64, 32, 1, 256, 4): "pytorch#143832: 106,496 B",
    ("bwd", 64, 64, 1, 256, 2): "pytorch#198224: 'Required: 114688, Hardware limit: 101376' on sm_12x",
}
RETRY = (
    "torch 2.13's inductor recompiles a template that runs out of shared memory with num_stages=1 "
    "(config.triton.dynamic_disable_pipelining, on by default; triton_heuristics.py "
    "compile_by_disabling_pipelining): a default past the limit may then run unpipelined, slower, rather "
    "than fail, and the reported 'Required' is the one-stage figure"
)


def caveats(
    head_dims: Iterable[int], dtype: str, capability: tuple[int, int], pass_: str, limit: int
) -> list[str]:
    """What an estimated choice for these head_dims does not know: the defaults the stage model says
    overflow, in a configuration no card has reported the size of (SEEN), and inductor's one-stage
    retry."""
    default = default_fwd if pass_ == "fwd" else default_bwd
    estimate = smem_fwd if pass_ == "fwd" else smem_bwd
    out, retried = [], False
    for d in sorted(set(head_dims)):
        bm, bn, stages, _ = default(d, dtype, capability)
        need = estimate(bm, bn, d, dtype, stages)
        if need <= limit:
            continue
        retried = retried or stages > 1
        if (pass_, bm, bn, stages, _pow2(d), DTYPE_BYTES[dtype]) not in SEEN:
            tuned = "a default torch tunes for" if d <= 256 else "torch's default for head_dim > 256 on"
            out.append(
                f"unverified: the estimate says torch's own {pass_} default {bm}x{bn} x {stages} stage"
                f"{'s' * (stages > 1)} at head_dim {d} ({dtype}) needs {need:,} B > {limit:,} B, {tuned} "
                f"capability {capability[0]}.{capability[1]}, and no card has reported that configuration's "
                "size: the stage model may overcount pipelined tiles (on the card, the choice is measured)"
            )
    return out + ([RETRY] if retried else [])


# Smaller configurations tried in order when the default does not fit (largest first).
CANDIDATES = ((64, 64), (64, 32), (32, 64), (32, 32), (32, 16), (16, 32), (16, 16))


@dataclass(kw_only=True, frozen=True, slots=True)
class KernelChoice:
    """kernel_options to pass (empty = keep torch's defaults) and why."""

    options: dict[str, int]
    reason: str
    smem_bytes: int
    smem_limit: int
    attempts: list[str] = field(default_factory=list)
    source: str = "estimated"  # "estimated" (the formulas above) | "measured" (compiled on the device)


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
    _check_device(capability, smem_limit_bytes)
    cap = (int(capability[0]), int(capability[1])) if capability is not None else (8, 0)
    limit = smem_limit_bytes if smem_limit_bytes is not None else smem_limit(cap)
    bm, bn, stages, warps = (default_fwd if pass_ == "fwd" else default_bwd)(head_dim, dtype, cap)
    estimate = smem_fwd if pass_ == "fwd" else smem_bwd
    need = estimate(bm, bn, head_dim, dtype, stages)
    where = f"capability {cap[0]}.{cap[1]}" if capability else "given limit"
    default = (
        f"default {bm}x{bn} x {stages} stage{'s' * (stages > 1)} ({pass_}, head_dim {head_dim}, {dtype})"
    )
    if need <= limit:
        return KernelChoice(
            options={},
            reason=f"{default} needs {need:,} B <= {limit:,} B per block ({where}): keep torch's defaults",
            smem_bytes=need,
            smem_limit=limit,
        )
    for m, n, st in fitting_order((bm, bn), stages):
        got = estimate(m, n, head_dim, dtype, st)
        if got <= limit:
            return KernelChoice(
                options=triton_options(pass_, m, n, st, warps),
                reason=f"{default} needs {need:,} B > {limit:,} B per block ({where}); {m}x{n} x {st} "
                f"stage{'s' * (st > 1)} needs {got:,} B",
                smem_bytes=got,
                smem_limit=limit,
            )
    raise TuneproofError(
        f"no flex block size fits {limit:,} B for head_dim {head_dim} {dtype} {pass_}",
        "use a smaller head_dim or another backend",
    )


def _check_device(capability: object, smem_limit_bytes: object) -> None:
    """A capability as (major, minor) integers, a limit as a positive whole number of bytes, one given."""
    if capability is None and smem_limit_bytes is None:
        raise TuneproofError("no device given", "pass capability=(major, minor) or smem_limit_bytes")
    if capability is not None and not (
        isinstance(capability, tuple | list)
        and len(capability) == 2
        and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in capability)
    ):
        raise TuneproofError(f"capability {capability!r} is not (major, minor)", "e.g. capability=(9, 0)")
    if smem_limit_bytes is not None:
        validate.integer("smem_limit_bytes", smem_limit_bytes, low=1, high=1 << 30, hint="bytes per block")


def fitting_order(default: tuple[int, int], stages: int) -> Iterator[tuple[int, int, int]]:
    """Candidates largest first: the default blocks with fewer stages, then each smaller block size
    (never past the default's, always dividing the BlockMask block) from the default's stages down."""
    bm, bn = default
    for st in range(stages - 1, 0, -1):
        yield bm, bn, st
    for m, n in CANDIDATES:
        if (m, n) != (bm, bn) and m <= bm and n <= bn and m <= FLEX_BLOCK and n <= FLEX_BLOCK:
            for st in range(stages, 0, -1):
                yield m, n, st


def triton_options(pass_: str, m: int, n: int, stages: int, warps: int) -> dict[str, int]:
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
    tries: list[dict[str, int]] = [first or {}] + [triton_options(pass_, m, n, 1, 4) for m, n in CANDIDATES]
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
    that fit all of them (blocks before stages: the default's blocks with fewer stages, then smaller
    blocks)."""
    if isinstance(head_dims, int | str) or not isinstance(head_dims, Iterable):
        raise TuneproofError(f"head_dims {head_dims!r} is not a list of head_dims", "e.g. [256, 512]")
    given = list(head_dims)
    for d in given:
        validate.integer("head_dim", d, high=65536)
    if not given:
        raise TuneproofError("no head_dims given", "pass the model's head_dims, e.g. [256, 512]")
    dims = sorted(set(given))
    per = {
        d: choose_kernel_options(
            d, dtype, capability=capability, smem_limit_bytes=smem_limit_bytes, pass_=pass_
        )
        for d in dims
    }
    if all(not c.options for c in per.values()):
        worst = max(per.values(), key=lambda c: c.smem_bytes)
        return KernelChoice(
            options={},
            reason="; ".join(c.reason for c in per.values()),
            smem_bytes=worst.smem_bytes,
            smem_limit=worst.smem_limit,
        )
    limit = next(iter(per.values())).smem_limit
    estimate = smem_fwd if pass_ == "fwd" else smem_bwd
    cap = (int(capability[0]), int(capability[1])) if capability is not None else (8, 0)
    default = default_fwd if pass_ == "fwd" else default_bwd
    widest = max(dims, key=lambda d: per[d].smem_bytes if per[d].options else 0)  # the one past the limit
    bm, bn, stages, _ = default(widest, dtype, cap)
    for m, n, st in fitting_order((bm, bn), stages):
        need = max(estimate(m, n, d, dtype, st) for d in dims)
        if need <= limit:
            over = [c.reason for c in per.values() if c.options]
            return KernelChoice(
                options=triton_options(pass_, m, n, st, 4),
                reason=f"{'; '.join(over)}; one setting for head_dims {dims}: "
                f"{m}x{n} x {st} stage{'s' * (st > 1)} needs at most {need:,} B",
                smem_bytes=need,
                smem_limit=limit,
            )
    raise TuneproofError(f"no flex block size fits {limit:,} B for head_dims {dims}", "use another backend")
