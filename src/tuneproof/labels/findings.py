"""The lines and findings of a `TokenReport` (the list is in `labels.report`'s docstring), each counted
and naming the rows it is about."""

from __future__ import annotations

from typing import Any

import numpy as np

from tuneproof.labels.report import Finding, ModelFacts, TokenReport, rows_text
from tuneproof.labels.rules import IGNORE


def judge(r: TokenReport, tok: Any, model: ModelFacts) -> None:
    b = r.built
    n = len(b.ids)
    share = f" ({r.trained / r.tokens:.1%})" if r.tokens else ""
    if b.stops:
        r.lines.append("the trainer stops before it trains (the findings); below, the labels it would build")
    r.lines.append(
        f"{_n(n, 'example')}, {r.kept:,} kept: {r.trained:,} of their {r.tokens:,} tokens train{share}"
        if r.kept
        else f"{_n(n, 'example')}, none kept: no token trains"
    )
    kept = r.kept_mask()
    if kept.any():
        c = r.counts[kept]
        r.lines.append(
            f"per example: {int(c.min()):,} to {int(c.max()):,} tokens train, median {np.median(c):,.0f}"
        )
    for note in b.notes:
        r.lines.append(note)
    for why, count in _tally(b.dropped).items():
        r.lines.append(f"{count:,} {why}")
    if b.unknown:
        first = next(iter(b.unknown.values()))
        r.lines.append(f"{_n(len(b.unknown), 'example')} not modelled ({first})")
    for text in b.stops:
        r.findings.append(Finding(kind="trainer_stops", count=n, text=f"the trainer stops: {text}"))
    _masks(r)
    _truncation(r)
    _stops(r, tok)
    _pad(r, tok)
    _added(r, tok, model)


def _n(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'s' * (count != 1)}"


def _tally(dropped: list[str | None]) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in dropped:
        if d is not None:
            out[d] = out.get(d, 0) + 1
    return out


def _rows(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) + 1 for i in np.flatnonzero(mask))


def _masks(r: TokenReport) -> None:
    b = r.built
    known = np.array([i not in b.unknown for i in range(len(b.ids))], dtype=bool)
    target = ~b.no_target if b.no_target is not None else np.ones(len(b.ids), dtype=bool)
    empty = b.mask_empty & known & target
    if empty.any():
        rows = _rows(empty)
        what = "assistant" if r.rules.assistant_only_loss else "completion"
        r.findings.append(Finding(
            kind="assistant_mask_empty", count=len(rows),
            text=f"{len(rows):,} of {_n(len(b.ids), 'example')} have an all-zero {what} mask "
            f"({rows_text(rows, len(rows))}): no token of theirs trains" + (
                "; the chat template marks no assistant tokens ({% generation %} ... {% endgeneration %})"
                if what == "assistant" else ""
            ), rows=rows,
        ))  # fmt: skip
    nothing = (b.trained_before == 0) & known & ~empty
    if nothing.any():
        rows = _rows(nothing)
        why = "no turn of a trained role, or nothing past the prompt"
        if b.form == "conversations" and r.rules.trainer == "trl":
            why = (
                "TRL keeps ShareGPT's roles as they are (human, gpt), so no turn is the 'assistant' it trains"
            )
        r.findings.append(Finding(
            kind="nothing_to_train", count=len(rows),
            text=f"{_n(len(rows), 'example')} {'has' if len(rows) == 1 else 'have'} no token to train "
            f"even before truncation ({rows_text(rows, len(rows))}): {why}", rows=rows,
        ))  # fmt: skip


def _truncation(r: TokenReport) -> None:
    b = r.built
    lost = np.array(
        [b.trained_before[i] > 0 and r.counts[i] == 0 and i not in b.unknown for i in range(len(b.ids))],
        dtype=bool,
    )
    cut = int(
        sum(
            1
            for i in range(len(b.ids))
            if i not in b.unknown and b.length[i] > (r.rules.max_length or b.length[i])
        )
    )
    r.longer = cut
    if cut:
        limit = "sequence_len" if r.rules.trainer == "axolotl" else "max_length"
        r.lines.append(f"{_n(cut, 'example')} longer than {limit} {r.rules.max_length}")
    if not lost.any():
        return
    rows = _rows(lost)
    tokens = int(b.trained_before[lost].sum())
    fate = _fate(r, lost)
    verb = "loses every token it" if len(rows) == 1 else "lose every token they"
    r.findings.append(Finding(
        kind="truncated_away", count=len(rows),
        text=f"{_n(len(rows), 'example')} {verb} would train ({tokens:,} tokens) to the length limit "
        f"{r.rules.max_length} ({rows_text(rows, len(rows))}): {fate}", rows=rows, tokens=tokens,
    ))  # fmt: skip


def _fate(r: TokenReport, lost: np.ndarray) -> str:
    b = r.built
    first = (
        next(b.dropped[i] for i in np.flatnonzero(lost))
        if any(b.dropped[i] for i in np.flatnonzero(lost))
        else None
    )
    if first is not None and "longer than sequence_len" in first:
        return "Axolotl drops them (excess_length_strategy drop); truncate keeps what fits"
    if first is not None:
        return "TRL drops them without a word; a longer max_length or truncation_mode keep_end keeps them"
    if r.rules.trainer == "transformers":
        return "they stay in the data and train nothing; a micro-batch of only such rows gives a NaN loss"
    return "packing keeps them, each taking room in its row and training nothing"


def _stops(r: TokenReport, tok: Any) -> None:
    names = ", ".join(f"{v} (id {k})" for k, v in r.stop_names.items())
    if not r.stop_names:
        r.lines.append("no EOS token: the tokenizer names none")
        return
    kept = r.kept
    if kept:
        r.lines.append(f"{r.stop_rows:,} of {_n(kept, 'kept example')} train a stop token ({names})")
    if kept and r.stop_rows == 0 and r.trained:
        r.findings.append(Finding(
            kind="eos_untrained", count=kept,
            text=f"no example trains a stop token ({names}): the model never learns to stop"
            + _why_no_stop(r, tok), rows=(),
        ))  # fmt: skip


def _why_no_stop(r: TokenReport, tok: Any) -> str:
    rules = r.rules
    b = r.built
    stop = np.array(list(r.stop_names), dtype=np.int64)
    present = any(np.isin(b.ids[i], stop).any() for i in range(len(b.ids)) if b.dropped[i] is None)
    end = _turn_end(r, tok)
    ends = f"; {end}" if end else ""
    if not present and end and end.startswith("the trained spans end with"):
        return (
            f"; {end}, which is no stop token: make it the EOS, or add it to generation_config's eos_token_id"
        )
    if not present:
        if rules.trainer == "transformers" or b.form == "text":
            return "; no example holds one: the tokenizer adds none, append the EOS to each text"
        return (
            f"; no example holds one: the chat template ends turns with another token{ends}: make that token "
            "the EOS (or a stop token in generation_config), or train the template's own"
        )
    if rules.trainer == "transformers" and tok.pad_token_id in r.stop_names:
        return "; the pad id is the EOS and the collator masks the pad id (the pad_is_eos finding)"
    if end and end.startswith("the trained spans end with"):
        return (
            f"; {end}, which is no stop token: make it the EOS, or add it to generation_config's eos_token_id"
        )
    if rules.trainer == "axolotl":
        return (
            f"; the stop token falls outside the trained turns{ends}: set train_on_eos (or eot_tokens) so "
            "Axolotl trains it"
        )
    return f"; the stop token falls outside the trained labels{ends} (the assistant mask ends before it)"


def _turn_end(r: TokenReport, tok: Any) -> str | None:
    """Where the trained spans end, from the most common last trained label of the examples: the
    token itself when it is a special one (the template's end-of-turn, trained), else the token right
    after it (the end-of-turn left untrained)."""
    special = set(getattr(tok, "all_special_ids", [])) | set(tok.get_added_vocab().values())
    seen: dict[tuple[str, int], int] = {}
    for i, (x, y) in enumerate(zip(r.built.ids, r.built.labels, strict=True)):
        where = np.flatnonzero(y != IGNORE)
        if r.built.dropped[i] is not None or not where.size:
            continue
        last = int(x[where[-1]])
        key = (
            ("with", last)
            if last in special
            else ("before", int(x[where[-1] + 1]))
            if where[-1] + 1 < x.size
            else None
        )
        if key is not None:
            seen[key] = seen.get(key, 0) + 1
    if not seen:
        return None
    how, t = max(seen, key=lambda k: seen[k])
    return f"the trained spans end {how} {tok.convert_ids_to_tokens(t)} (id {t})"


def _pad(r: TokenReport, tok: Any) -> None:
    pad = tok.pad_token_id
    if pad is None or pad not in r.stop_names:
        if pad is None and r.rules.trainer == "trl":
            r.lines.append(
                "no pad token: TRL pads with the EOS, and masks the padding by position (EOS still trains)"
            )
        return
    if r.rules.trainer != "transformers":
        r.lines.append(
            f"pad == {r.stop_names[pad]}: harmless here, the collator masks padding by position, not by id"
        )
        return
    b = r.built
    masked = np.array(
        [
            d is None and bool(((b.ids[i] == pad) & (b.labels[i] == IGNORE)).any())
            for i, d in enumerate(b.dropped)
        ],
        dtype=bool,
    )
    rows = _rows(masked)
    if not rows:
        r.lines.append(
            f"pad == {r.stop_names[pad]} and the collator masks the pad id: an EOS in the data would never "
            "train (none is there)"
        )
        return
    r.findings.append(Finding(
        kind="pad_is_eos", count=len(rows),
        text=f"the pad token is the stop token {r.stop_names[pad]} (id {pad}) and "
        f"DataCollatorForLanguageModeling masks every label equal to the pad id: {len(rows):,} examples "
        "lose their EOS labels"
        + f" ({rows_text(rows, len(rows))}); give the tokenizer a pad token of its own",
        rows=rows,
    ))  # fmt: skip


def _added(r: TokenReport, tok: Any, model: ModelFacts) -> None:
    if model.rows is None:
        r.lines.append("embedding rows unknown (no model config.json): added tokens not checked")
        return
    size = len(tok)
    b = r.built
    r.vocab = (size, model.rows)
    if size > model.rows:
        r.lines.append(f"the tokenizer has {size:,} tokens, the model {model.rows:,} embedding rows")
    used: dict[int, int] = {}
    kept = [x for i, x in enumerate(b.ids) if b.dropped[i] is None and x.size]
    flat = np.concatenate(kept) if kept else np.zeros(0, dtype=np.int64)
    users: list[int] = []
    if (flat >= model.rows).any():  # only then, example by example: how many use each
        for i, x in enumerate(b.ids):
            if b.dropped[i] is not None or not (x >= model.rows).any():
                continue
            users.append(i + 1)
            for t in np.unique(x[x >= model.rows]):
                used[int(t)] = used.get(int(t), 0) + 1
    if not used:
        return
    names = ", ".join(
        f"{tok.convert_ids_to_tokens(t)} (id {t}, {_n(n, 'example')})" for t, n in sorted(used.items())[:5]
    )
    tied = (
        "; the embeddings are tied to the output head, so the head predicts them from those rows too"
        if model.tied
        else ""
    )
    r.findings.append(Finding(
        kind="added_tokens", count=len(used),
        text=f"{_n(len(used), 'token')} past the model's {model.rows:,} embedding rows in the data: {names}: "
        "the embeddings must be resized (resize_token_embeddings), and the new rows start at the old "
        f"rows' mean, never trained{tied}; train the embeddings (modules_to_save) or keep to the model's "
        "vocabulary", rows=tuple(users),
    ))  # fmt: skip
