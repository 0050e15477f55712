"""The attention paths transformers can take, as one table (`PATHS`) that every consumer reads: the
FLOP ledger (pairs performed), the dispatch explainer (is a mask materialised), batching (what a
padded or packed plan costs) and the CLI (which names each command accepts).

Each record answers, for a batch geometry (`Rows`) and a layer's window:
- `mask`: does transformers hand the kernel a dense mask tensor, and which condition decides
  (transformers 5.x `masking_utils`, docs/sources.md);
- `pairs`: how many (query, key) scores the kernel computes;
- `fused_backward`: the kernel keeps no score matrix, so its backward recomputes QK^T;
- `backward_on_cpu`: whether PyTorch has a backward for it on the CPU (flex_attention has none: its
  backward raises NotImplementedError there); probe, adjudicate and the dispatch advice read it;
- `probe` / `adjudicate`: whether `tuneproof probe` / `adjudicate` can run it (no extra package);
- `kernel`: what runs, for a path that does not go through SDPA's backend choice (None for sdpa:
  the SDPA rules pick the backend, `tuneproof.attention.rules.SDPA_KERNELS` names its kernel).

An unknown path name is an error (`path()`), never costed as another path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tuneproof.arch.prefixed import bidirectional_pairs
from tuneproof.attention.pairs import (
    FLEX_BLOCK,
    block_selected_pairs,
    flex_block_pairs,
    flex_document_pairs,
    intended_pairs,
)
from tuneproof.runs.step import UNKNOWN_PATH, Rows, attention_path_name

if TYPE_CHECKING:
    from tuneproof.arch.shape import AttentionSpec

# transformers: where each mask decision is taken (verified on transformers 5.24)
MASK_SOURCES = {
    "window": "transformers masking_utils._ignore_causal_mask_sdpa: returns False when "
    "local_attention_size is set and kv_length >= local_attention_size",
    "padding": "transformers masking_utils._ignore_causal_mask_sdpa: skips the mask only when the padding "
    "mask is all ones (fast_all)",
    "packed": "transformers masking_utils._preprocess_mask_arguments / find_packed_sequence_indices: packed "
    "position_ids set allow_is_causal_skip=False",
    "eager": "transformers masking_utils.eager_mask: always builds a (B,1,q,kv) float mask",
    "flex": "transformers masking_utils.flex_attention_mask: a BlockMask via create_block_mask",
    "flash": "transformers masking_utils.flash_attention_mask: the 2-D padding mask or None (varlen)",
    "compiled": "transformers masking_utils.find_packed_sequence_indices returns the sequence ids whenever "
    "it is traced (it cannot test them), so create_causal_mask sets allow_is_causal_skip=False; on torch "
    "< 2.14 _ignore_causal_mask_sdpa also returns False under torch.compile (is_torchdynamo_exporting)",
    "indexed": "transformers models/deepseek_v32/modeling_deepseek_v32.py DeepseekV32Attention.forward: "
    "eager and sdpa scatter the indexer's top-k into the attention mask",
}


@dataclass(frozen=True, slots=True)
class Mask:
    """Is a dense mask tensor materialised, and why: each cause with the transformers code that decides
    it, or (not materialised) what the kernel gets instead."""

    materialised: bool
    causes: tuple[tuple[str, str], ...]  # (condition, where transformers decides it)
    otherwise: str = ""  # not materialised: what the kernel gets

    @property
    def conditions(self) -> str:
        return " and ".join(c for c, _ in self.causes)

    @property
    def reason(self) -> str:
        if not self.causes:
            return self.otherwise
        return "; ".join(f"{c}: {s}" for c, s in self.causes)


@dataclass(frozen=True, slots=True)
class Performed:
    """Pairs a path computes for a batch, and why they differ from the intended pairs."""

    pairs: int
    mask: Mask
    why: str


def _sdpa_mask(rows: Rows, window: int | None) -> Mask:
    """transformers materialises the mask when the batch is packed, a sliding layer has kv_length >=
    window, or the batch has padding; otherwise SDPA gets attn_mask=None and is_causal=True."""
    causes = []
    if rows.compiled:
        causes.append(("compiled model (torch.compile)", MASK_SOURCES["compiled"]))
    if rows.is_packed:
        causes.append(("packed batch", MASK_SOURCES["packed"]))
    if window is not None and rows.width >= window:
        causes.append((f"kv_length {rows.width} >= window {window}", MASK_SOURCES["window"]))
    if rows.is_padded:
        causes.append(("padded batch (the padding mask is not all ones)", MASK_SOURCES["padding"]))
    if causes:
        return Mask(True, tuple(causes))
    why = "no padding" + (f", kv_length {rows.width} < window {window}" if window is not None else "")
    return Mask(False, (), f"{why}: SDPA gets attn_mask=None and is_causal=True")


def _sdpa_pairs(rows: Rows, window: int | None) -> Performed:
    mask = _sdpa_mask(rows, window)
    w = rows.width
    if mask.materialised:
        return Performed(
            rows.num_rows * w * w,
            mask,
            f"mask materialised ({mask.conditions}): SDPA gets an explicit mask, loses is_causal "
            f"and computes the full {w}x{w} square",
        )
    return Performed(rows.num_rows * intended_pairs(w, None), mask, "is_causal: the causal triangle")


def _eager_pairs(rows: Rows, window: int | None) -> Performed:
    w = rows.width
    return Performed(
        rows.num_rows * w * w,
        Mask(True, (("eager attention", MASK_SOURCES["eager"]),)),
        f"eager attention computes the full {w}x{w} score matrix and masks it afterwards",
    )


def _flash_pairs(rows: Rows, window: int | None) -> Performed:
    if rows.is_padded or rows.is_packed:
        otherwise = "no 4-D mask: the varlen kernel runs the real tokens (" + MASK_SOURCES["flash"] + ")"
        return Performed(intended_in(rows, window), Mask(False, (), otherwise),
                         "varlen kernel on real tokens, window and causal skip native")  # fmt: skip
    otherwise = "no mask, no padding, no packing: the dense kernel (flash_attn_func) with causal=True"
    return Performed(intended_in(rows, window), Mask(False, (), otherwise), "causal skip native")


def _flex_pairs(rows: Rows, window: int | None) -> Performed:
    pairs = sum(
        flex_document_pairs(list(row), window)
        if len(row) > 1
        else flex_block_pairs(rows.width, row[0], window)
        for row in rows.docs
    )
    return Performed(
        pairs,
        Mask(
            False,
            (),
            "BlockMask, not a dense tensor: blocks outside the mask are skipped ("
            + MASK_SOURCES["flex"]
            + ")",
        ),
        f"flex computes whole {FLEX_BLOCK}x{FLEX_BLOCK} BlockMask blocks that touch the mask"
        + (", pad query rows included" if rows.is_padded else ""),
    )


def _unknown_pairs(rows: Rows, window: int | None) -> Performed:
    """An implementation no rule models: what its kernel computes is unknown. The ledger counts the
    pairs the architecture intends there (a lower bound), and the report says the performed side is."""
    return Performed(
        intended_in(rows, window),
        Mask(False, (), "unknown: an attention implementation tuneproof does not model"),
        "not modelled: counted as the pairs the architecture intends, a lower bound",
    )


def _eager_square(batch: int, width: int, heads: int, layers: int) -> tuple[int, str]:
    return 2 * 4 * batch * width * width * heads * layers, (
        f"eager score matrices ({layers} layer(s) x {batch} x {heads} heads x {width}^2 x 2 x 4 B)"
    )


def _sdpa_square(batch: int, width: int, heads: int, layers: int) -> tuple[int, str]:
    # the worst case: a materialised (B, 1, T, T) bool mask and the float copy the CPU kernel makes
    return (
        5 * batch * width * width,
        f"the materialised (B, 1, T, T) mask and its float copy ({batch} x {width}^2 x 5 B)",
    )


def _no_square(batch: int, width: int, heads: int, layers: int) -> tuple[int, str]:
    return 0, "no width-squared tensor"


@dataclass(frozen=True, slots=True)
class Kernel:
    """What a path that bypasses SDPA's backend choice runs: the backend name the dispatch explainer
    reports, and the kernel on a CUDA card and on the CPU."""

    backend: str
    cuda: str
    cpu: str

    def on(self, capability: tuple[int, int] | None) -> str:
        """The kernel on the device of `capability` (None = the CPU)."""
        return self.cpu if capability is None else self.cuda


@dataclass(kw_only=True, frozen=True, slots=True)
class AttentionPath:
    """One attention implementation (transformers' `attn_implementation` name).

    `square_bytes(batch, width, heads, layers)`: bytes of the width-squared tensors a step holds at once
    (fp32; `layers` is how many layers keep theirs alive: all of them for a backward), and what they are."""

    name: str
    performed: Callable[[Rows, int | None], Performed]
    fused_backward: bool
    backward_on_cpu: bool
    probe: bool
    adjudicate: bool
    kernel: Kernel | None  # None: SDPA picks a backend (tuneproof.attention.rules)
    square_bytes: Callable[[int, int, int, int], tuple[int, str]] = _no_square

    def mask(self, rows: Rows, window: int | None) -> Mask:
        return self.performed(rows, window).mask


_EAGER_KERNEL = "aten matmul + softmax: the full score matrix, mask added after"
_FLASH_KERNEL = "flash-attn package varlen kernels (flash_attn_varlen_func)"
_FLEX_KERNEL = "flex_attention ({}; triton_tem_fused_flex_attention*)"
_UNKNOWN_KERNEL = "not modelled: the implementation's own kernel"

# Order: the paths as transformers lists them (eager first); every consumer keeps this order.
# backward_on_cpu: flex_attention's backward raises NotImplementedError on the CPU (torch 2.13,
# torch/_higher_order_ops/flex_attention.py); flash_attention_2 runs on CUDA only.
PATHS: dict[str, AttentionPath] = {
    p.name: p
    for p in (
        AttentionPath(
            name="eager",
            performed=_eager_pairs,
            fused_backward=False,
            backward_on_cpu=True,
            probe=True,
            adjudicate=True,
            kernel=Kernel("eager", _EAGER_KERNEL, _EAGER_KERNEL),
            square_bytes=_eager_square,
        ),
        AttentionPath(
            name="sdpa",
            performed=_sdpa_pairs,
            fused_backward=True,
            backward_on_cpu=True,
            probe=True,
            adjudicate=True,
            kernel=None,
            square_bytes=_sdpa_square,
        ),
        AttentionPath(
            name="flash_attention_2",
            performed=_flash_pairs,
            fused_backward=True,
            backward_on_cpu=False,
            probe=False,
            adjudicate=False,
            kernel=Kernel("flash_attention_2", _FLASH_KERNEL, _FLASH_KERNEL),
        ),
        AttentionPath(
            name="flex_attention",
            performed=_flex_pairs,
            fused_backward=True,
            backward_on_cpu=False,
            probe=True,
            adjudicate=True,
            kernel=Kernel(
                "flex",
                _FLEX_KERNEL.format("Triton kernel compiled for this card"),
                _FLEX_KERNEL.format("inductor CPU lowering"),
            ),
        ),
        # a run's implementation that no rule of runs.implementations models: never a --attn choice
        AttentionPath(
            name=UNKNOWN_PATH,
            performed=_unknown_pairs,
            fused_backward=False,
            backward_on_cpu=False,
            probe=False,
            adjudicate=False,
            kernel=Kernel(UNKNOWN_PATH, _UNKNOWN_KERNEL, _UNKNOWN_KERNEL),
        ),
    )
}


def path(name: object, field: str = "attn", unknown: bool = False) -> AttentionPath:
    """The record for `name`; a name that is no path is refused, naming the known ones (with `unknown`,
    the unknown path a run's implementation may price as is a record too)."""
    return PATHS[attention_path_name(name, field, unknown)]


def intended_in(rows: Rows, window: int | None) -> int:
    """The pairs the architecture specifies: causal (windowed) within each document, real tokens."""
    return sum(intended_pairs(n, window) for row in rows.docs for n in row)


def names(*, probe: bool = False, adjudicate: bool = False) -> tuple[str, ...]:
    """Path names a user may pass, optionally only those `tuneproof probe` / `adjudicate` can run."""
    return tuple(
        p.name
        for p in PATHS.values()
        if p.name != UNKNOWN_PATH and (not probe or p.probe) and (not adjudicate or p.adjudicate)
    )


def chunk_pieces(docs: tuple[int, ...], chunk: int) -> list[int]:
    """A row's documents cut where chunked attention cuts them: at every multiple of `chunk` from the
    row's first slot (transformers masking_utils.chunked_overlay: (k // chunk) == (q // chunk), and
    the documents' own mask on top)."""
    pieces, pos = [], 0
    for n in docs:
        end = pos + n
        while pos < end:
            step = min(end, (pos // chunk + 1) * chunk) - pos
            pieces.append(step)
            pos += step
    return pieces


def intended_for(rows: Rows, spec: AttentionSpec) -> int:
    """The pairs a layer's architecture specifies (0 for a linear-attention layer)."""
    if not spec.softmax:
        return 0
    if spec.kind == "indexed":  # min(topk, causal prefix) keys per query: a topk-key window's pairs
        return intended_in(rows, spec.topk)
    if spec.kind == "bidirectional":  # every real token and the model's prefix, both ways
        return bidirectional_pairs([sum(row) for row in rows.docs], spec.prefix)
    if spec.kind == "block_indexed":  # whole blocks the indexer keeps plus the partial one
        assert spec.topk is not None and spec.chunk is not None
        return sum(block_selected_pairs(n, spec.topk, spec.chunk) for row in rows.docs for n in row)
    if spec.kind == "chunked":
        assert spec.chunk is not None
        return sum(intended_pairs(n, None) for row in rows.docs for n in chunk_pieces(row, spec.chunk))
    return intended_in(rows, spec.window)


_CHUNK_FLASH = (
    "transformers masking_utils.create_chunked_causal_mask raises for flash attention when kv_length > "
    "attention_chunk_size"
)


_OWN_MASK = (
    "transformers models/cpmant/modeling_cpmant.py CpmAntModel._prepare_attention_mask: a (B, T + P, T + P) "
    "bool mask, applied with masked_fill"
)


def performed_for(p: AttentionPath, rows: Rows, spec: AttentionSpec) -> Performed:
    """What path `p` computes for one layer of geometry `spec` (the window or chunk it bounds keys by)."""
    if not spec.softmax:
        return Performed(0, Mask(False, (), "no score matrix"), "linear attention: no (query, key) scores")
    if spec.kind == "bidirectional":
        w = rows.width + spec.prefix
        why = (
            f"the model's own matmuls (no attention path applies): the full {w}x{w} square of the row and "
            f"the {spec.prefix} tokens it prepends"
        )
        return Performed(rows.num_rows * w * w, Mask(True, (("the model's own attention", _OWN_MASK),)), why)
    if spec.kind in ("indexed", "block_indexed") and p.name in ("eager", "sdpa"):
        w = rows.width
        why = f"the indexer's top-k is folded into a dense mask: {p.name} computes the full {w}x{w} square"
        mask = Mask(True, (("indexed attention", MASK_SOURCES["indexed"]),))
        return Performed(rows.num_rows * w * w, mask, why)
    if spec.kind != "chunked":  # block_indexed on another path: causal, as it would compute
        return p.performed(rows, spec.window)
    chunk = spec.chunk
    assert chunk is not None
    if p.name == "flex_attention":
        pairs = 0
        for row in rows.docs:
            if len(row) > 1:
                pairs += flex_document_pairs(chunk_pieces(row, chunk), None)
                continue
            for start in range(0, rows.width, chunk):  # whole chunks never share a block when
                seg = min(chunk, rows.width - start)  # chunk is a multiple of the block size
                real = min(max(row[0] - start, 0), seg)
                pairs += flex_block_pairs(seg, real, None) if real else 0
        why = (
            f"flex computes whole {FLEX_BLOCK}x{FLEX_BLOCK} BlockMask blocks inside each {chunk}-token chunk"
        )
        if chunk % FLEX_BLOCK:
            why += f" (chunk {chunk} is not a multiple of {FLEX_BLOCK}: blocks straddle chunks, a bound)"
        return Performed(pairs, p.performed(rows, None).mask, why)
    if p.name == "flash_attention_2":
        pieces = sum(intended_pairs(n, None) for row in rows.docs for n in chunk_pieces(row, chunk))
        if rows.width > chunk:
            return Performed(
                pieces, Mask(False, (), _CHUNK_FLASH), f"refused: width {rows.width} > chunk {chunk}"
            )
        return Performed(pieces, p.performed(rows, None).mask, "varlen kernel: the width fits one chunk")
    # sdpa gets the chunk as its local_attention_size, exactly like a window; eager squares anyway
    got = p.performed(rows, chunk)
    swap = lambda s: s.replace("window", "chunk")  # noqa: E731
    mask = Mask(
        got.mask.materialised, tuple((swap(c), s) for c, s in got.mask.causes), swap(got.mask.otherwise)
    )
    return Performed(got.pairs, mask, swap(got.why))
