"""Tiny tokenizers built here (nothing downloaded): a word-level vocabulary with the special tokens of a
Llama-3-like and a ChatML chat template, each with or without `{% generation %}` markers, and the small
chat datasets the label tests and the bench run on.

The templates follow the real ones' structure: Llama 3 ends every turn with <|eot_id|> after a header
<|start_header_id|>role<|end_header_id|>; ChatML wraps turns in <|im_start|>role ... <|im_end|>. An
"instruct" tokenizer's EOS is the template's end-of-turn token; a "base" one's is the end-of-text token
(<|end_of_text|>, <|endoftext|>), which the template never writes: the base-model trap.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

WORDS = [f"w{i}" for i in range(200)] + ["user", "assistant", "system", "hello", "bye"]
LLAMA_SPECIALS = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
]
CHATML_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

LLAMA3 = (
    "{{ bos_token }}{% for message in messages %}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{{ message['content'] | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
LLAMA3_GENERATION = (
    "{{ bos_token }}{% for message in messages %}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] | trim }}<|eot_id|>"
    "{% endgeneration %}{% else %}{{ message['content'] | trim }}<|eot_id|>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CHATML_GENERATION = (
    "{% for message in messages %}{% if message['role'] == 'assistant' %}<|im_start|>assistant\n"
    "{% generation %}{{ message['content'] }}<|im_end|>{% endgeneration %}\n{% else %}<|im_start|>"
    "{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TEMPLATES = {
    ("llama3", False): LLAMA3, ("llama3", True): LLAMA3_GENERATION,
    ("chatml", False): CHATML, ("chatml", True): CHATML_GENERATION,
}  # fmt: skip


def tokenizer(
    style: str = "chatml", markers: bool = True, eos: str | None = None, pad: str | None = "<pad>",
    extra: tuple[str, ...] = (),
) -> Any:  # fmt: skip
    """A word-level fast tokenizer for `style` (llama3 or chatml). `eos`: the EOS token (default the
    template's end-of-turn token); `pad`: the pad token (None: none; the EOS text: pad == eos);
    `extra`: tokens added after the vocabulary (past a model's rows when the model is sized without them)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = LLAMA_SPECIALS if style == "llama3" else CHATML_SPECIALS
    vocab = {t: i for i, t in enumerate(["<unk>", "<pad>", *specials, *WORDS])}
    raw = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    turn_end = "<|eot_id|>" if style == "llama3" else "<|im_end|>"
    tok = PreTrainedTokenizerFast(
        tokenizer_object=raw, unk_token="<unk>", eos_token=eos or turn_end, pad_token=pad,
        bos_token="<|begin_of_text|>" if style == "llama3" else None,
    )  # fmt: skip
    tok.add_special_tokens({"additional_special_tokens": specials})
    if extra:
        tok.add_tokens(list(extra), special_tokens=True)
    tok.chat_template = TEMPLATES[(style, markers)]
    return tok


def save(tok: Any, folder: Path, rows: int | None = None, tied: bool = False, stop_ids: Any = None) -> Path:
    """The tokenizer and a tiny Llama config (`rows` embedding rows, default the tokenizer's length)
    into `folder`, as a model folder holds them."""
    folder.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(folder)
    (folder / "config.json").write_text(json.dumps(tiny_config(rows or len(tok), tied)))
    if stop_ids is not None:
        (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": stop_ids}))
    return folder


def tiny_config(vocab: int, tied: bool = False) -> dict[str, Any]:
    return {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": vocab, "hidden_size": 32,
        "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
        "max_position_embeddings": 4096, "tie_word_embeddings": tied,
    }  # fmt: skip


def model_for(tok: Any, seed: int = 0) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        **{k: v for k, v in tiny_config(len(tok)).items() if k not in ("model_type", "architectures")}
    )
    return LlamaForCausalLM(cfg)


def words(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS[:200]) for _ in range(rng.randint(low, high)))


def chats(
    n: int, seed: int = 0, user: tuple[int, int] = (3, 12), answer: tuple[int, int] = (2, 10)
) -> list[dict[str, Any]]:
    """`n` rows of {"messages": [user, assistant]} (a system turn in every third)."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        turns = [{"role": "system", "content": words(rng, 2, 4)}] if i % 3 == 0 else []
        turns += [
            {"role": "user", "content": words(rng, *user)},
            {"role": "assistant", "content": words(rng, *answer)},
        ]
        rows.append({"messages": turns})
    return rows


def write_jsonl(rows: list[dict[str, Any]], path: Path) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
