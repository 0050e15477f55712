"""The labels TRL's `SFTTrainer` builds, step by step as TRL 1.16 does (trl/trainer/sft_trainer.py
`_prepare_dataset`, trl/data_utils.py `pack_dataset`), with the tokenizer's own `apply_chat_template`
run in batches (the call TRL makes per example):

1. The first row decides the form: chat `messages` (or ShareGPT `conversations`, whose from/value keys
   TRL renames to role/content and whose roles it keeps), `prompt` + `completion` (chats or text), or
   the text field.
2. Text rows (and text completions) get the EOS token appended when they do not end with it.
3. Chats are rendered with the chat template; with `assistant_only_loss` and a template without
   `{% generation %}` markers TRL swaps in its training version of a template it knows
   (`get_training_chat_template`), and refuses the run (ValueError) for one it does not. An example
   whose assistant mask is all zero stops the preparation (RuntimeError).
4. Labels: -100 outside the assistant mask (always, when there is one) and outside the completion
   (`completion_only_loss`, on by default for prompt-completion rows).
5. Without packing: truncation at `max_length` (keep_start or keep_end), then every example with no
   label left is dropped. With packing: bfd truncates each example to `max_length` (keeps its start,
   drops none), bfd_split cuts it into pieces of `max_length`; wrapped (rows cut across examples) is
   not modelled.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import numpy as np

from tuneproof.labels.rules import IGNORE, TRL_VERIFIED, Built, LabelRules, empty, row_error

TRL_NO_MASK = (
    "TRL stops the run ('You're using `assistant_only_loss=True`, but at least one example has no assistant "
    "tokens'): {n} example(s) have an all-zero assistant mask"
)


def form_of(row: dict[str, Any], text_field: str) -> str:
    """The dataset's form, as TRL reads it from the first row."""
    if _chat(row.get("messages")):
        return "messages"
    if isinstance(row.get("conversations"), list):
        return "conversations"
    if "prompt" in row and "completion" in row:
        return "prompt-completion chat" if _chat(row.get("prompt")) else "prompt-completion"
    if isinstance(row.get(text_field), str):
        return "text"
    keys = ", ".join(sorted(row)) or "none"
    return f"unknown (keys: {keys})"


def _chat(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) and "role" in m for m in value)


def build(rows: list[dict[str, Any]], tok: Any, rules: LabelRules) -> Built:
    form = form_of(rows[0], rules.text_field)
    check_rows(rows, form, rules.text_field)
    out = empty(len(rows), form)
    out.notes.append(f"as TRL {TRL_VERIFIED}'s SFTTrainer builds them")
    if rules.assistant_only_loss and form in ("text", "prompt-completion"):
        out.stops.append(
            "TRL refuses assistant_only_loss on a dataset that is not conversational ('You set "
            "`assistant_only_loss=True`, but the dataset is not conversational')"
        )
        return out
    template = _template(tok, rules, out)
    if form in ("messages", "conversations"):
        ids, masks = _chats(rows, tok, rules, template, out)
    elif form == "prompt-completion chat":
        ids, masks = _prompt_completion_chats(rows, tok, rules, template, out)
    elif form == "prompt-completion":
        ids, masks = _prompt_completion_text(rows, tok, rules, out)
    else:
        ids, masks = _text(rows, tok, rules, out)
    fill(out, ids, masks)
    empty_masks = int(np.count_nonzero(out.mask_empty))
    if rules.assistant_only_loss and empty_masks and not out.stops:  # a refused template stops it first
        out.stops.append(TRL_NO_MASK.format(n=empty_masks))
    if out.form in ("messages", "conversations") and out.no_target is not None:
        key = "messages" if out.form == "messages" else "conversations"
        for i in np.flatnonzero(out.trained_before == 0):  # only where nothing would train
            out.no_target[i] = not any(t.get("role", t.get("from")) == "assistant" for t in rows[i][key])
    finish(out, rules)
    return out


def check_rows(rows: list[dict[str, Any]], form: str, text_field: str) -> None:
    """Every row of the form the first row set, as TRL's preparation needs it; one that is not stops
    TRL's `map` with a traceback, so it is refused here, by its row."""
    if form.startswith("unknown"):
        raise row_error(0, f"no chat 'messages' or 'conversations', no 'prompt' and 'completion', and no "
                        f"text field {text_field!r} ({form.removeprefix('unknown ')})",
                        "give chat rows, prompt-completion rows, or the text field's name")  # fmt: skip
    for i, r in enumerate(rows):
        if form in ("messages", "conversations"):
            turns = r.get(form)
            if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns):
                shown = type(turns).__name__ if turns is not None else "missing"
                raise row_error(i, f"'{form}' is {shown}, not a list of turns", "make every row a chat")
        elif form.startswith("prompt-completion"):
            chat = form.endswith("chat")
            kinds = (list,) if chat else (str,)
            if not all(isinstance(r.get(k), kinds) for k in ("prompt", "completion")):
                want = "lists of turns" if chat else "strings"
                raise row_error(
                    i, f"'prompt' and 'completion' are not both {want}, as in row 1", "fix the row"
                )
        elif not isinstance(r.get(text_field), str):
            shown = type(r.get(text_field)).__name__ if text_field in r else "missing"
            raise row_error(
                i, f"text field {text_field!r} is {shown}, not text", "fix the row, or name the field"
            )


def _template(tok: Any, rules: LabelRules, out: Built) -> str | None:
    """The chat template TRL renders with: the tokenizer's, or TRL's training version of it."""
    if not rules.assistant_only_loss:
        return None
    current = getattr(tok, "chat_template", None)
    if not current:
        out.stops.append("the tokenizer has no chat template: TRL cannot render the chats")
        return None
    from tuneproof.labels.render import MARKERS

    source = current.get("default", "") if isinstance(current, dict) else current
    if MARKERS.search(source):  # TRL's has_generation_markers (the template's default variant)
        return None
    from trl.chat_template_utils import get_training_chat_template  # heavy: only for a template to swap

    try:
        swapped = get_training_chat_template(tok)
    except ValueError as e:
        out.stops.append(
            "the chat template has no {% generation %} markers, so every assistant mask is all zero, and TRL "
            f"knows no training version of it: SFTTrainer stops at start ('{str(e).split('.')[0]}.')"
        )
        return None
    if swapped is not None:
        out.notes.append(
            "the chat template has no {% generation %} markers: TRL swaps in its training version"
        )
        out.template = swapped
    return swapped


def _apply(tok: Any, chats: list[Any], template: str | None, **kw: Any) -> Any:
    """(ids, assistant masks) per chat, as apply_chat_template gives them (`labels.render`)."""
    from tuneproof.labels.render import chat_ids

    masks = bool(kw.pop("return_assistant_tokens_mask", False))
    return chat_ids(tok, chats, template, masks, **kw)


def _chats(rows: list[dict[str, Any]], tok: Any, rules: LabelRules, template: str | None, out: Built) -> Any:
    key = "messages" if out.form == "messages" else "conversations"
    chats = [chatml(r[key]) for r in rows]
    aol = rules.assistant_only_loss
    if out.stops and aol:  # no template to render with: the masks are all zero
        template = None
    ids, masks = _apply(tok, chats, template, return_assistant_tokens_mask=aol)
    return ids, masks if aol else [None] * len(ids)


def chatml(messages: list[Any]) -> list[Any]:
    """TRL's maybe_convert_to_chatml: from/value renamed role/content, the roles as they are."""
    if all(isinstance(m, dict) and "from" not in m and "value" not in m for m in messages):
        return messages
    out = []
    for m in messages:
        if isinstance(m, dict) and ("from" in m or "value" in m):
            m = {("role" if k == "from" else "content" if k == "value" else k): v for k, v in m.items()}
        out.append(m)
    return out


def _prompt_completion_chats(
    rows: list[dict[str, Any]], tok: Any, rules: LabelRules, template: str | None, out: Built
) -> Any:
    prompts = [chatml(r["prompt"]) for r in rows]
    fulls = [p + chatml(r["completion"]) for p, r in zip(prompts, rows, strict=True)]
    p_ids, _ = _apply(tok, prompts, template, add_generation_prompt=True)
    aol = rules.assistant_only_loss
    f_ids, a_masks = _apply(tok, fulls, template, return_assistant_tokens_mask=aol)
    return _completion_masks(p_ids, f_ids, a_masks if aol else None, rules, out)


def _prompt_completion_text(rows: list[dict[str, Any]], tok: Any, rules: LabelRules, out: Built) -> Any:
    eos = tok.eos_token or ""
    completions = [c if c.endswith(eos) else c + eos for c in (str(r["completion"]) for r in rows)]
    prompts = [str(r["prompt"]) for r in rows]
    p_ids = tok(prompts)["input_ids"]
    f_ids = tok([p + c for p, c in zip(prompts, completions, strict=True)])["input_ids"]
    return _completion_masks(p_ids, f_ids, None, rules, out)


def _completion_masks(p_ids: Any, f_ids: Any, a_masks: Any, rules: LabelRules, out: Built) -> Any:
    """The completion starts where the prompt's ids and the whole example's part (TRL's
    common_prefix_length); with completion_only_loss (on by default here) it alone trains."""
    only = rules.completion_only_loss is not False
    ids, masks = [], []
    for i, (p, f) in enumerate(zip(p_ids, f_ids, strict=True)):
        x = np.asarray(f, dtype=np.int64)
        n = min(len(p), len(f))
        prefix = next((j for j in range(n) if p[j] != f[j]), n)
        m = np.ones(x.size, dtype=bool)
        if only:
            m[:prefix] = False
        if a_masks is not None:
            m &= np.asarray(a_masks[i], dtype=bool)
        ids.append(x)
        masks.append(m if (only or a_masks is not None) else None)
    if not only:
        out.notes.append("completion_only_loss off: the prompt trains too")
    return ids, masks


def _text(rows: list[dict[str, Any]], tok: Any, rules: LabelRules, out: Built) -> Any:
    eos = tok.eos_token or ""
    texts = [t if t.endswith(eos) else t + eos for t in (r[rules.text_field] for r in rows)]
    ids = [np.asarray(x, dtype=np.int64) for x in tok(texts)["input_ids"]]
    return ids, [None] * len(ids)


def fill(out: Built, ids: list[np.ndarray], masks: list[np.ndarray | None]) -> None:
    """Each example's labels (its ids outside the mask set to -100), length, tokens that would train
    and whether its mask is empty, computed over all examples at once (a loop of small numpy calls
    per example cost more than the tokenising)."""
    n = len(ids)
    if not n:
        return
    lengths = np.fromiter((x.size for x in ids), dtype=np.int64, count=n)
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    flat = np.concatenate(ids)
    masked = all(m is not None for m in masks)
    flat_mask = np.concatenate(masks) if masked else np.ones(flat.size, dtype=bool)  # type: ignore[arg-type]
    labels = np.where(flat_mask, flat, IGNORE)
    pairs = list(pairwise(bounds.tolist()))
    out.ids = [flat[a:b] for a, b in pairs]  # views, no copies
    out.labels = [labels[a:b] for a, b in pairs]
    out.length = lengths
    target = labels != IGNORE
    target[bounds[:-1][lengths > 0]] = False  # an example's first label is no prediction target
    out.trained_before = _segment_sums(target, bounds)
    if masked:
        out.mask_empty = _segment_sums(flat_mask, bounds) == 0


def _segment_sums(flags: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Per example, the true flags between its bounds (empty examples included)."""
    cs = np.concatenate([[0], np.cumsum(flags, dtype=np.int64)])
    return cs[bounds[1:]] - cs[bounds[:-1]]


def finish(out: Built, rules: LabelRules) -> None:
    """Truncation and the examples TRL drops (no packing), or what packing does to each example."""
    n = rules.max_length
    if n is None or not out.ids:
        return
    if rules.packing == "bfd_split":
        out.piece = n  # each example cut into pieces of max_length: every token stays
        return
    if rules.packing == "wrapped":
        for i in range(len(out.ids)):
            out.unknown[i] = "wrapped packing cuts examples across rows (counts depend on the row cuts)"
        return
    end = rules.packing is None and rules.truncation_mode == "keep_end"
    cut = slice(-n, None) if end else slice(None, n)
    if rules.packing is None:  # labels left in each example's window, all examples at once
        lengths = np.fromiter((y.size for y in out.labels), dtype=np.int64, count=len(out.labels))
        bounds = np.concatenate([[0], np.cumsum(lengths)])
        labelled = np.concatenate([[0], np.cumsum(np.concatenate(out.labels) != IGNORE, dtype=np.int64)])
        keep = np.minimum(lengths, n)
        lo = bounds[1:] - keep if end else bounds[:-1]
        left = labelled[lo + keep] - labelled[lo]
        before = labelled[bounds[1:]] - labelled[bounds[:-1]]
        for k in np.flatnonzero(left == 0).tolist():
            if out.dropped[k] is None:
                why = "no label left after truncation" if before[k] else "no label to train"
                out.dropped[k] = f"dropped by TRL: {why}"
    else:
        for i, y in enumerate(out.labels):
            if not y.size and out.dropped[i] is None:
                out.dropped[i] = "dropped by TRL's packing: no tokens"
    out.ids = [x[cut] for x in out.ids]
    out.labels = [y[cut] for y in out.labels]
