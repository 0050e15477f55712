"""Chats rendered and tokenised as `tokenizer.apply_chat_template(chats, tokenize=True, return_dict=True,
return_assistant_tokens_mask=...)` does in transformers 5.24, at the speed of the tokenizer alone:

- the same steps: messages with their None-valued keys dropped (`_normalize_chat_messages`), the
  template rendered by transformers' own `render_jinja_template` (with the tokenizer's special tokens
  as template variables), the text encoded without special tokens by the Rust tokenizer, and every
  token that overlaps an assistant span (`{% generation %}`) marked, as its per-token loop marks them;
- a span's tokens come from asking the encoding for the token of its first and last character, never
  from the offsets of every token (building those costs more than the tokenising).

A tokenizer that is not a fast one, or whose Rust side is set to truncate or pad, goes through
`apply_chat_template` itself. The label tests compare both paths, and the result against the batches
TRL's SFTTrainer collates.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from tuneproof.core.errors import TuneproofError

CHUNK = 512  # chats per render-and-encode step
MARKERS = re.compile(r"\{%-?\s*generation\s*-?%\}")  # transformers' own test (render_jinja_template)


def chat_ids(
    tok: Any, chats: list[list[dict[str, Any]]], template: str | None, masks: bool, **kw: Any
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Token ids of each chat (and, with `masks`, its assistant mask), in order."""
    ids: list[np.ndarray] = []
    out_masks: list[np.ndarray] = []
    if not fast(tok):
        for start in range(0, len(chats), CHUNK):
            x, m = _slow(tok, chats[start : start + CHUNK], template, masks, kw)
            ids.extend(x)
            out_masks.extend(m)
        return ids, out_masks
    marked = masks and MARKERS.search(tok.get_chat_template(template, None)) is not None
    for _, x, encodings, spans in rendered(tok, chats, template, marked, **kw):
        ids.extend(x)
        if marked:
            out_masks.extend(_masks(x, encodings, spans))
        elif masks:  # no {% generation %} markers: transformers' masks are all zero (and it warns)
            out_masks.extend(np.zeros(a.size, dtype=bool) for a in x)
    return ids, out_masks


def rendered(
    tok: Any, chats: list[Any], template: str | None, spans: bool = False, clean: bool = True, **kw: Any
) -> Iterator[Any]:
    """(texts, ids, encodings, assistant spans) per chunk of chats, a fast tokenizer's (the Rust
    `Encoding`s: `token_range` maps characters to tokens through them). Each chunk is rendered (Python)
    while the one before it is encoded (Rust, which releases the GIL): 7.1 s against 7.8 s taking
    turns, 100,000 chats on 2 cores (medians of two, inside this machine's run-to-run noise)."""
    from transformers.utils.chat_template_utils import render_jinja_template

    source = tok.get_chat_template(template, None)
    variables = {**tok.special_tokens_map, **kw}

    def render(part: list[Any]) -> tuple[list[str], list[Any]]:
        chats_ = [_messages(chat) for chat in part] if clean else part
        out: Any = render_jinja_template(  # (texts, generation spans), though typed as a str
            conversations=chats_, chat_template=source, return_assistant_tokens_mask=spans, **variables
        )
        return list(out[0]), list(out[1])

    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = None
        for start in range(0, len(chats), CHUNK):
            texts, where = _rendering(render, chats, start)
            if pending is not None:
                yield pending[0], *pending[1].result(), pending[2]
            pending = (texts, pool.submit(_encode, tok, texts), where)
        if pending is not None:
            yield pending[0], *pending[1].result(), pending[2]


def _messages(chat: Any) -> list[dict[str, Any]]:
    """transformers' normalisation: each message a dict, its None-valued keys dropped."""
    if not isinstance(chat, list) or not all(isinstance(m, dict) for m in chat):
        raise TypeError("its messages are not a list of objects")
    return [{k: v for k, v in m.items() if v is not None} for m in chat]


def _rendering(render: Any, chats: list[Any], start: int) -> tuple[list[str], list[Any]]:
    """One chunk rendered; a chat the template cannot render (or refuses: raise_exception) is named
    by its row, in one line."""
    try:
        texts, where = render(chats[start : start + CHUNK])
        return texts, where
    except Exception:  # the template's own error (jinja's, raise_exception's): find the row it is about
        for k, chat in enumerate(chats[start : start + CHUNK]):
            try:
                render([chat])
            except Exception as e:
                first = (str(e).splitlines() or [""])[0][:200]
                raise TuneproofError(
                    f"row {start + k + 1}: the chat template cannot render it ({type(e).__name__}: {first})",
                    "fix the row, or the template",
                ) from None
        raise


def fast(tok: Any) -> bool:
    """A fast tokenizer whose Rust side encodes as `tokenizer(text)` would (no truncation or padding set)."""
    raw = getattr(tok, "_tokenizer", None)
    return (
        raw is not None
        and getattr(tok, "is_fast", False)
        and raw.truncation is None
        and raw.padding is None
        and raw.encode_special_tokens == bool(getattr(tok, "split_special_tokens", False))
    )


def _encode(tok: Any, texts: list[str]) -> tuple[list[np.ndarray], list[Any]]:
    enc = tok._tokenizer.encode_batch(texts, add_special_tokens=False)
    return [np.asarray(e.ids, dtype=np.int64) for e in enc], enc


def token_range(enc: Any, lo: int, hi: int) -> tuple[int, int]:
    """[first, end) of the tokens that overlap characters [lo, hi): the tokens of the first and the last
    character in it that a token holds (`char_to_token`; whitespace a pre-tokenizer drops is in none).
    Asking a few characters is what makes this fast: the offsets of every token are never built."""
    first = next((t for c in range(lo, hi) if (t := enc.char_to_token(c)) is not None), None)
    if first is None:
        return 0, 0
    last = next(t for c in range(hi - 1, lo - 1, -1) if (t := enc.char_to_token(c)) is not None)
    return first, last + 1


def _masks(ids: list[np.ndarray], encodings: list[Any], spans: list[Any]) -> list[np.ndarray]:
    """Every token overlapping an assistant span, as transformers' per-token loop marks them."""
    out = []
    for x, enc, chat_spans in zip(ids, encodings, spans, strict=True):
        m = np.zeros(x.size, dtype=bool)
        for lo, hi in chat_spans:
            first, end = token_range(enc, lo, hi)
            m[first:end] = True
        out.append(m)
    return out


def _slow(tok: Any, part: list[Any], template: str | None, masks: bool, kw: dict[str, Any]) -> Any:
    enc = tok.apply_chat_template(
        part,
        tokenize=True,
        return_dict=True,
        chat_template=template,
        return_assistant_tokens_mask=masks,
        **kw,
    )
    ids = [np.asarray(x, dtype=np.int64) for x in enc["input_ids"]]
    return ids, [np.asarray(m, dtype=bool) for m in enc["assistant_masks"]] if masks else []
