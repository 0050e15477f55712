"""The labels Axolotl 0.19 builds for its `chat_template` and `completion` datasets
(axolotl/prompt_strategies/chat_template.py, completion.py, prompt_tokenizers.py; utils/trainer.py and
utils/data/utils.py for what it drops):

- chat_template: the conversation rendered with the tokenizer's chat template and tokenised without
  special tokens; a turn trains when `train_on_inputs` is on or its role is in `roles_to_train` (default
  ["assistant"]; roles read from the message_property_mappings keys, human/gpt mapped to user/assistant
  as Axolotl's default `roles` do; a message's own `training` key is read only with
  message_field_training, not modelled). A trained turn's tokens are its content's (Axolotl locates the
  content's characters and takes the tokens that overlap them), so the template's own tokens around it
  do not train. The end-of-turn token (`eot_tokens`, default the tokenizer's EOS) and the EOS found
  within 3 tokens after a turn train by `train_on_eot` / `train_on_eos` (default "turn": after trained
  turns). A base model whose EOS is not the template's end-of-turn token never trains that token.
- completion: the text tokenised (special tokens added), EOS appended when it does not end the text,
  every token a label, and cut into pieces of `sequence_len` (each its own example).
- Rows longer than `sequence_len` are dropped (`excess_length_strategy` drop, the default), cut
  (truncate) or refused (raise); rows left with no label are dropped ("Dropped N samples with no
  trainable tokens").

Other dataset types (alpaca and the instruction formats) are not modelled: their examples are counted
as unknown, with the reason.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tuneproof.labels.rules import AXOLOTL_VERIFIED, IGNORE, Built, LabelRules, empty, row_error, trained

ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system",
         "tool": "tool"}  # fmt: skip  # Axolotl's default `roles` mapping
EOT_REACH = 3  # Axolotl: an EOT/EOS counts for a turn when it is at most 3 tokens after the turn's end


def build(rows: list[dict[str, Any]], tok: Any, rules: LabelRules) -> Built:
    kind = rules.dataset_type
    out = empty(len(rows), kind)
    out.notes.append(f"as Axolotl {AXOLOTL_VERIFIED}'s {kind} strategy builds them")
    if kind == "chat_template":
        _chat_template(rows, tok, rules, out)
    elif kind == "completion":
        _completion(rows, tok, rules, out)
    else:
        for i in range(len(rows)):
            out.unknown[i] = f"Axolotl's {kind} prompt format is not modelled here"
        return out
    _lengths(out, rules)
    return out


def _turns(row: dict[str, Any], field: str, keys: tuple[str, str]) -> list[dict[str, Any]] | None:
    """The row's turns as Axolotl reads them: under `field_messages`, role and content from the
    message_property_mappings keys, roles mapped by Axolotl's default `roles`."""
    messages = row.get(field)
    if not isinstance(messages, list):
        return None
    turns = []
    for m in messages:
        if not isinstance(m, dict):
            return None
        role, content = m.get(keys[0]), m.get(keys[1])
        turns.append(
            {"role": ROLES.get(str(role), str(role)), "content": content if isinstance(content, str) else ""}
        )
    return turns


def _chat_template(rows: list[dict[str, Any]], tok: Any, rules: LabelRules, out: Built) -> None:
    if not getattr(tok, "chat_template", None):
        out.stops.append("the tokenizer has no chat template (Axolotl's chat_template: tokenizer_default)")
        return
    chats: dict[int, list[dict[str, Any]]] = {}
    for i, row in enumerate(rows):
        turns = _turns(row, rules.field_messages, rules.message_keys)
        if not turns:
            keys = ", ".join(sorted(row)) or "none"
            raise row_error(
                i, f"no list of turns under {rules.field_messages!r} (its keys: {keys}); Axolotl stops "
                "('Messages is null. Please check `field_messages`.')",
                "set field_messages (text rows are Axolotl's completion type)",
            )  # fmt: skip
        chats[i] = turns
    order = list(chats)
    eot = _eot_ids(tok, rules)
    eos = tok.eos_token_id
    done = 0
    for texts, ids, encodings, _ in _rendered(tok, [chats[i] for i in order]):
        for j, i in enumerate(order[done : done + len(texts)]):
            x = ids[j]
            y = _turn_labels(texts[j], x, encodings[j], chats[i], rules, eot, eos)
            if y is None:
                out.unknown[i] = "a turn's content was not found in the rendered template"
                continue
            out.ids[i], out.labels[i] = x, y
            out.length[i], out.trained_before[i] = x.size, trained(y)
        done += len(texts)


def _rendered(tok: Any, chats: list[Any]) -> Any:
    """(texts, ids, encodings, _) per chunk: the conversation rendered (no generation prompt) and
    tokenised without special tokens, as Axolotl's turn locator does; an encoding maps a character
    to its token (`char_to_token`)."""
    from tuneproof.labels.render import CHUNK, fast, rendered

    if fast(tok):
        yield from rendered(tok, chats, None, clean=False)  # the turns are built here: no None values
        return
    for start in range(0, len(chats), CHUNK):
        texts = tok.apply_chat_template(chats[start : start + CHUNK], tokenize=False)
        enc = tok(texts, add_special_tokens=False)
        ids = [np.asarray(x, dtype=np.int64) for x in enc["input_ids"]]
        yield texts, ids, [_Chars(enc, i) for i in range(len(texts))], None


class _Chars:
    """One example of a BatchEncoding, answering `char_to_token` as a Rust Encoding does."""

    def __init__(self, enc: Any, i: int) -> None:
        self.enc, self.i = enc, i

    def char_to_token(self, c: int) -> int | None:
        t: int | None = self.enc.char_to_token(self.i, c)
        return t


def _eot_ids(tok: Any, rules: LabelRules) -> set[int]:
    """Axolotl's eot_tokens (default the EOS), those that encode to one token."""
    names = rules.eot_tokens if rules.eot_tokens is not None else (tok.eos_token,) if tok.eos_token else ()
    ids = set()
    for name in names:
        enc = tok.encode(name, add_special_tokens=False)
        if len(enc) == 1:
            ids.add(int(enc[0]))
    return ids


def _turn_labels(
    text: str, x: np.ndarray, enc: Any, turns: list[dict[str, Any]], rules: LabelRules,
    eot: set[int], eos: int | None,
) -> np.ndarray | None:  # fmt: skip
    from tuneproof.labels.render import token_range

    y = np.full(x.size, IGNORE, dtype=np.int64)
    on_eot = rules.train_on_eot or rules.train_on_eos
    last = {"EOT": -1, "EOS": -1}
    cursor = 0
    for turn in turns:
        should = rules.train_on_inputs or turn["role"] in rules.roles_to_train
        content = turn["content"]
        at = text.find(content, cursor) if content else -1
        if content and at < 0:
            return None
        if at >= 0:
            cursor = at + len(content)
        if not should and rules.train_on_eos != "all" and on_eot != "all":
            continue
        if at < 0:
            continue  # an empty turn: Axolotl finds no span (start == end) and trains nothing of it
        lo, hi = token_range(enc, at, at + len(content))  # Axolotl: tokens overlapping the content
        if hi <= lo:
            continue
        if should:
            y[lo:hi] = x[lo:hi]
        for name, ids, option in (
            ("EOT", eot, on_eot),
            ("EOS", {eos} if eos is not None else set(), rules.train_on_eos),
        ):
            # Axolotl finds the first one after the turn and keeps it within EOT_REACH: the same as
            # looking no further than that
            near = x[hi : hi + EOT_REACH + 1].tolist()
            hit = next((hi + k for k, t in enumerate(near) if t in ids), -1)
            if hit != -1:
                last[name] = hit
                if option == "all" or (option == "turn" and should):
                    y[hit] = x[hit]
    for name, option in (("EOT", on_eot), ("EOS", rules.train_on_eos)):
        if option == "last" and last[name] != -1:
            y[last[name]] = x[last[name]]
    return y


def _completion(rows: list[dict[str, Any]], tok: Any, rules: LabelRules, out: Built) -> None:
    seq = rules.max_length or 2048
    texts = []
    for i, row in enumerate(rows):
        t = row.get(rules.text_field)
        if not isinstance(t, str):
            shown = type(t).__name__ if rules.text_field in row else "missing"
            raise row_error(
                i, f"text field {rules.text_field!r} is {shown}, not text", "fix the row, or set field"
            )
        texts.append(t)
    enc = tok(texts, truncation=True, max_length=seq * 64)["input_ids"]
    eos = tok.eos_token_id
    for i, ids in enumerate(enc):
        x = list(ids)
        if x and eos is not None and x[-1] != eos and len(x) < seq * 64:
            x.append(eos)
        arr = np.asarray(x, dtype=np.int64)
        out.ids[i], out.labels[i] = arr, arr.copy()
        out.length[i] = arr.size
        out.trained_before[i] = sum(trained(arr[j : j + seq]) for j in range(0, arr.size, seq))
    out.piece = seq  # Axolotl cuts each text into examples of sequence_len


def _lengths(out: Built, rules: LabelRules) -> None:
    n = rules.max_length
    for i, (x, y) in enumerate(zip(out.ids, out.labels, strict=True)):
        if i in out.unknown:
            continue
        if n is not None and x.size > n and out.piece is None:
            if rules.excess_length == "raise":
                out.stops.append(
                    f"Axolotl stops (excess_length_strategy raise): row {i + 1} has {x.size} tokens, past "
                    f"sequence_len {n}"
                )
                return
            if rules.excess_length == "drop":
                out.dropped[i] = f"dropped by Axolotl: longer than sequence_len {n}"
                continue
            out.ids[i], out.labels[i] = x[:n], y[:n]
        elif out.trained_before[i] > 0:
            continue  # untruncated, with a trained token: it keeps its labels
        if not (out.labels[i] != IGNORE).any():
            out.dropped[i] = "dropped by Axolotl: no trainable tokens"
