"""Proof that packed documents stay apart, on the user's own model and backend: one packed row runs
through the model as transformers receives packed batches (`DataCollatorWithFlattening`, TRL's
padding-free rows: `position_ids` restarting at 0 for each document, no attention mask, no cache), then
each document runs alone, and the logits of every document are compared. A document whose logits
differ by more than the tolerance saw a token of another one.

transformers 5.x keeps the documents apart only when it detects them: `position_ids` that restart,
no 2-D attention mask and no KV cache (`masking_utils._preprocess_mask_arguments` /
`find_packed_sequence_indices`; flash attention: `_is_packed_sequence` on a batch of one row). The
planted leaks break exactly those conditions, so the check is seen to fail where it should:
"no-restarts" (positions 0..T-1 across the row) and "2d-mask" (an all-ones mask sent with the
restarting positions: packed detection is skipped, one causal mask spans the row).
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass
from typing import Any

from tuneproof.core.errors import TuneproofError
from tuneproof.core.verdict import CANNOT_JUDGE

LEAKS = ("no-restarts", "2d-mask")
RECURRENT_KINDS = ("linear", "none")  # tuneproof.arch.shape kinds whose mixer carries a state, not a mask
# max |dlogit| allowed, relative to the largest |logit| of the row (at least 1): packed and alone runs
# sum in another order (other tile boundaries in the CPU flash and flex kernels), measured on tiny
# random models: fp32 <= 2e-6, bf16 <= 3e-2 relative; a leak is >= 1e-1 relative in both
TOLERANCE = {"float32": 1e-3, "float64": 1e-8, "bfloat16": 6e-2, "float16": 1e-2}


@dataclass(kw_only=True, frozen=True, slots=True)
class Isolation:
    """Per document (numbered from 1), the largest |logit| difference packed vs alone."""

    attn: str
    docs: tuple[int, ...]
    diffs: tuple[float, ...]
    tolerance: float
    leak: str | None = None  # the planted leak, if any
    note: str = ""  # how the backend was run, where not as in training
    # where the first document that saw another one first differs: the layer (from 0) and its kind
    layer: int | None = None
    layer_kind: str = ""
    why: str = ""  # the model's own forward hides the packing (`tuneproof.attention.packed_detection`)

    @property
    def isolated(self) -> bool:
        return all(d <= self.tolerance for d in self.diffs)

    def summary(self) -> str:
        worst = max(self.diffs)
        planted = f", planted leak: {self.leak}" if self.leak else ""
        planted += f"; {self.note}" if self.note else ""
        if self.isolated:
            return (
                f"isolated (max |dlogit| {worst:.1g} over {len(self.docs)} documents, {self.attn}, "
                f"tolerance {self.tolerance:.1g}{planted})"
            )
        seeing = [i for i, d in enumerate(self.diffs) if d > self.tolerance]
        first = seeing[0]
        earlier = "document 1" if first == 1 else f"documents 1-{first}"
        who = f"document {first + 1} attends to {earlier}"
        if len(seeing) > 1:
            who = f"documents {_numbers([i + 1 for i in seeing])} attend to the documents before them"
        where = ""
        if self.layer is not None:
            where = f" from layer {self.layer}" + (f" ({self.layer_kind})" if self.layer_kind else "") + " on"
            if self.why:
                where += f": {self.why}"
            elif self.layer_kind in RECURRENT_KINDS:
                where += (
                    ": a recurrent state (linear attention or a state-space scan, no mask) runs across the "
                    "row; transformers keeps documents apart there only from cu_seq_lens_q / seq_idx with "
                    "the mixer's CUDA kernels"
                )
        return (
            f"{who}{where} (max |dlogit| {max(self.diffs):.2g}, tolerance {self.tolerance:.1g}, "
            f"{self.attn}{planted})"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "attn": self.attn, "documents": list(self.docs), "max_abs_dlogit": list(self.diffs),
            "tolerance": self.tolerance, "isolated": self.isolated, "planted_leak": self.leak,
            "attending": [i + 1 for i, d in enumerate(self.diffs) if d > self.tolerance],
            "note": self.note or None, "first_layer": self.layer, "first_layer_kind": self.layer_kind or None,
            "why": self.why or None, "summary": self.summary(),
        }  # fmt: skip


def _numbers(ns: list[int]) -> str:
    """2, 3 and 5"""
    return ", ".join(map(str, ns[:-1])) + f" and {ns[-1]}"


def documents_line(attn: str, batch: int = 1) -> str:
    """What keeps packed documents apart on `attn` in transformers 5.x, and what makes them attend to
    each other: the explainer's line for a packed batch of `batch` rows."""
    if attn == "flash_attention_2" and batch > 1:
        return (
            f"packed documents kept apart on flash_attention_2 by varlen boundaries, at {batch} rows a batch "
            "only from cu_seq_lens_q/k sent by the collator: position_ids alone are read only in a batch of "
            "one row (modeling_flash_attention_utils._is_packed_sequence), and a 2-D attention_mask lets "
            "them attend to each other"
        )
    if attn == "flash_attention_2":
        return (
            "packed documents kept apart on flash_attention_2 by varlen boundaries: cu_seq_lens_q/k when the "
            "collator sends them, else packed position_ids in a batch of one row (modeling_flash_attention_"
            "utils._is_packed_sequence); a 2-D attention_mask, or position_ids alone in a batch of several "
            "rows, lets them attend to each other"
        )
    return (
        f"packed documents kept apart on {attn} by a per-document mask built from the restarting "
        "position_ids (masking_utils.find_packed_sequence_indices); a 2-D attention_mask or a KV cache sent "
        "with them turns that off, and one causal mask then spans the row"
    )


def packed_row(
    docs: list[int] | tuple[int, ...], vocab_size: int, seed: int = 0, restarts: bool = True
) -> dict[str, Any]:
    """One packed row as a padding-free collator builds it: random tokens (seeded), `position_ids`
    restarting at 0 per document (`restarts=False`: 0..T-1 across the row), no attention mask."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab_size, (1, sum(docs)), generator=generator)
    if restarts:
        positions = torch.cat([torch.arange(n) for n in docs])[None]
    else:
        positions = torch.arange(sum(docs))[None]
    return {"input_ids": ids, "position_ids": positions}


ROW_KEYS = ("input_ids", "position_ids", "attention_mask")  # what a real row brings to the check


def cut_row(
    batch: dict[str, Any], index: int, docs: tuple[int, ...], budget: int
) -> tuple[tuple[int, ...], dict[str, Any]]:
    """Row `index` of a real batch (its documents `docs`, from slot 0), cut to at most `budget` tokens
    and at least two documents: each document keeps a prefix, in order, the first at most half the
    budget when more follow. Returns the kept lengths and the row's ROW_KEYS tensors (1 x sum), a 2-D
    mask only (a 4-D or block mask is rebuilt by transformers from the positions)."""
    import torch

    kept: list[int] = []
    left = budget
    for i, n in enumerate(docs):
        share = left if i > 0 or len(docs) == 1 else min(left, max(1, budget // 2))
        take = min(n, share)
        if take < 1:
            break
        kept.append(take)
        left -= take
    starts = [sum(docs[:i]) for i in range(len(kept))]
    row: dict[str, Any] = {}
    for key in ROW_KEYS:
        value = batch.get(key)
        if value is None or not hasattr(value, "dim") or value.dim() != 2:
            continue
        line = value[index if value.shape[0] > index else 0]
        row[key] = torch.cat([line[a : a + n] for a, n in zip(starts, kept, strict=True)])[None]
    return tuple(kept), row


def check_isolation(
    model: Any,
    docs: list[int] | tuple[int, ...],
    *,
    seed: int = 0,
    leak: str | None = None,
    tolerance: float | None = None,
    row: dict[str, Any] | None = None,
    use_cache: bool = False,
    autocast: str | None = None,
) -> Isolation:
    """Run `docs` packed into one row and each alone through `model` (a transformers causal LM or a
    PEFT model around one) on its own attention implementation; the model's training mode is restored
    afterwards and no gradient is taken.

    The row is random tokens with restarting `position_ids` (`packed_row`), or `row`: a real batch's
    row as the model received it (`input_ids` and whatever came with them: `position_ids`, a 2-D
    `attention_mask`, 1 x sum(docs) each), run with the batch's own `use_cache`, so that what lets its
    documents see each other in training does so here too. `autocast`: the dtype the forward computes
    in under mixed precision ("bfloat16": a Trainer with bf16=True wraps the model's forward in
    autocast through accelerate), which sets the tolerance with the weights' own dtypes."""
    import torch

    docs = tuple(docs)
    config = _config(model)
    _check_inputs(docs, leak, row, config)
    first = next(model.parameters())
    # the loosest of the weights' dtypes (bf16 weights under fp32 LoRA adapters compute in bf16)
    dtypes = {str(p.dtype).removeprefix("torch.") for p in model.parameters()} | (
        {autocast} if autocast else set()
    )
    tol = tolerance if tolerance is not None else max(TOLERANCE.get(d, 1e-2) for d in dtypes)
    if row is None:
        vocab = int(getattr(config, "vocab_size", 0) or 0) or 2
        row = packed_row(docs, vocab, seed, restarts=leak != "no-restarts")
    kwargs = {k: v.to(first.device) for k, v in row.items() if v is not None}
    if leak == "2d-mask":
        kwargs["attention_mask"] = torch.ones_like(kwargs["input_ids"])
    flex = (getattr(config, "_attn_implementation", None) or "") == "flex_attention"
    # torch 2.13's compiled flex on the CPU (transformers compiles flex_attention and create_block_mask)
    # returns run-to-run different logits, NaN at times, at some dynamic shapes (a 40-token document
    # after a 166-token row: measured); uncompiled, the same BlockMask runs exactly
    eager = flex and first.device.type == "cpu"
    stance = torch.compiler.set_stance("force_eager") if eager else contextlib.nullcontext()
    training = model.training
    model.eval()
    attn = getattr(config, "_attn_implementation", None) or "eager"
    try:
        with torch.no_grad(), stance, warnings.catch_warnings():
            # uncompiled flex warns that it materialises the scores: it is meant to, here
            warnings.filterwarnings("ignore", message=".*flex_attention.*", category=UserWarning)
            diffs, scale, layer = _compare(model, kwargs, docs, tol, use_cache, _agreed if flex else _logits)
    except (ValueError, RuntimeError, NotImplementedError, ImportError) as e:
        if isinstance(e, TuneproofError):
            raise
        first_line = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise TuneproofError(
            f"the model does not run a packed row on {attn} here ({type(e).__name__}: {first_line})",
            "check the path the run uses, on the device it runs on",
            exit_code=CANNOT_JUDGE,
        ) from None
    finally:
        model.train(training)
    note = "flex run uncompiled on the CPU (the same BlockMask)" if eager else ""
    kind = _layer_kind(config, layer) if layer is not None else ""
    why = ""
    if layer is not None and leak is None and kind not in RECURRENT_KINDS:
        from tuneproof.attention.packed_detection import packed_detection

        detection = packed_detection(str(getattr(config, "model_type", "")))
        why = detection.blind(attn) if detection is not None else ""
    return Isolation(attn=attn, docs=docs, diffs=diffs, tolerance=tol * scale, leak=leak, note=note,
                     layer=layer, layer_kind=kind, why=why)  # fmt: skip


def _compare(
    model: Any, kwargs: dict[str, Any], docs: tuple[int, ...], tol: float, use_cache: bool, run: Any
) -> tuple[tuple[float, ...], float, int | None]:
    """Per document, max |dlogit| packed vs alone; the row's logit scale; the first layer where the
    first document that saw another one differs (None when none did)."""
    device = kwargs["input_ids"].device
    packed = run(model, kwargs, use_cache)
    scale = max(1.0, float(packed.abs().max()))
    diffs, start = [], 0
    for n in docs:
        alone = run(model, _alone(kwargs, start, n, device))
        diffs.append(float((packed[:, start : start + n] - alone).abs().max()))
        start += n
    leaking = next((i for i, d in enumerate(diffs) if d > tol * scale), None)
    if leaking is None:
        return tuple(diffs), scale, None
    start = sum(docs[:leaking])
    alone_row = _alone(kwargs, start, docs[leaking], device)
    return tuple(diffs), scale, _first_layer(model, kwargs, alone_row, start, tol, use_cache)


def _check_inputs(docs: tuple[int, ...], leak: str | None, row: dict[str, Any] | None, config: Any) -> None:
    _check_docs(docs, leak)
    if row is not None and (leak is not None or tuple(row["input_ids"].shape) != (1, sum(docs))):
        raise TuneproofError(
            f"a row of shape {tuple(row['input_ids'].shape)} for documents {list(docs)}"
            + (f" with a planted leak {leak!r}" if leak else ""),
            f"give a row of shape (1, {sum(docs)}) and no leak",
        )
    limit = getattr(config, "max_position_embeddings", None)
    if isinstance(limit, int) and max(docs) > limit:
        raise TuneproofError(
            f"a document of {max(docs)} tokens is past the model's {limit} positions",
            "give shorter documents",
        )


def _first_layer(
    model: Any, packed: dict[str, Any], alone: dict[str, Any], start: int, tol: float, use_cache: bool
) -> int | None:
    """The first decoder layer whose output for the document differs packed vs alone (its hidden
    states, relative to their own scale), or None when the model returns no hidden states."""
    n = alone["input_ids"].shape[1]
    rows = model(**packed, use_cache=use_cache, output_hidden_states=True).hidden_states
    own = model(**alone, use_cache=False, output_hidden_states=True).hidden_states
    if not rows or len(rows) != len(own):
        return None
    for i, (a, b) in enumerate(zip(rows[1:], own[1:], strict=True)):
        a, b = a[:, start : start + n].float(), b.float()
        if float((a - b).abs().max()) > tol * max(1.0, float(b.abs().max())):
            return i
    return None


def _layer_kind(config: Any, layer: int) -> str:
    """The layer's kind as tuneproof's model shape names it (full, sliding, linear, ...), or ""."""
    from tuneproof.arch import resolve

    try:
        layers = resolve(config).shape.layers
    except TuneproofError:
        return ""
    return layers[layer].attention.kind if layer < len(layers) else ""


def _check_docs(docs: tuple[int, ...], leak: str | None) -> None:
    if len(docs) < 2:
        raise TuneproofError(f"{len(docs)} document(s) to pack", "give at least two document lengths")
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in docs):
        raise TuneproofError(f"document lengths {list(docs)}", "give lengths of at least 1 token")
    if leak is not None and leak not in LEAKS:
        raise TuneproofError(f"leak {leak!r} is not a planted leak", "use one of: " + ", ".join(LEAKS))


def _agreed(model: Any, kwargs: dict[str, Any], use_cache: bool = False) -> Any:
    """Logits two calls in a row agree on (up to 4 calls): compiled flex has returned garbage for a
    call (see check_isolation), which must not be taken for a leak; a backend never twice alike is
    refused."""
    previous = _logits(model, kwargs, use_cache)
    for _ in range(3):
        current = _logits(model, kwargs, use_cache)
        if bool((current - previous).abs().max() <= 1e-5 * max(1.0, float(current.abs().max()))):
            return current
        previous = current
    raise TuneproofError(
        "flex_attention gave different logits on every one of 4 identical calls",
        "check the torch build; run the check on sdpa or eager to see the masks",
    )


def _alone(kwargs: dict[str, Any], start: int, n: int, device: Any) -> dict[str, Any]:
    """The document at `start` (n tokens) on its own: positions 0..n-1, no mask."""
    import torch

    return {
        "input_ids": kwargs["input_ids"][:, start : start + n],
        "position_ids": torch.arange(n, device=device)[None],
    }


def _config(model: Any) -> Any:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.config


def _logits(model: Any, kwargs: dict[str, Any], use_cache: bool = False) -> Any:
    out = model(**kwargs, use_cache=use_cache)
    logits = out.logits if hasattr(out, "logits") else out[0]
    return logits.float()
