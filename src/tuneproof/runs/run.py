"""The run, whatever wrote it: `Run`, the one run type. An Axolotl YAML (`runs.axolotl.from_axolotl`) or a
tuneproof recipe (`runs.from_recipe.from_recipe`) is read into one; what a micro-batch of it holds and
how its step trains is `runs.step.RunSpec`, the step type the ledger prices.

A `Run` is frozen: a reader builds it once, and what is learned later (the card has no bf16, the
recipe's attention auto on this device) makes a new one with `dataclasses.replace`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The backends Axolotl 0.19 takes packed rows on (micro_batch_size x sequence_len tokens in one row, by
# position_ids, no mask): its utils/schemas/enums.py ATTN_IMPLS_SUPPORTING_PACKING, verbatim, compared
# after `attn_base` (its attn_impl_base)
PACKS_ROWS = (
    "flash_attention_2", "flash_attention_3", "flash_attention_4", "flash_attention_torch", "flex_attention",
    "xformers", "sage", "kernels-community/flash-attn2", "kernels-community/flash-attn3",
    "kernels-community/sage-attention",
)  # fmt: skip


def attn_base(attn: str) -> str:
    """Axolotl's `attn_impl_base`: a hub kernel's name without its `@revision` or `:kernel` suffix."""
    return attn.split(":", 1)[0].split("@", 1)[0].strip()


@dataclass(kw_only=True, frozen=True, slots=True)
class DatasetRef:
    path: str
    kind: str  # Axolotl's `type` (chat_template, alpaca, completion, ...) or "text"
    local: Path | None  # the file or folder, when it exists here; None: a hub dataset (not read)
    field: str | None = None  # the text or messages field, when the config names one
    meant_local: bool = False  # written as a file path (absolute, ./, a file suffix) but not found here
    roles_to_train: tuple[str, ...] | None = None  # Axolotl's per-dataset roles_to_train (None: its default)
    train_on_eos: str | None = None  # Axolotl's per-dataset train_on_eos (None: "turn")
    train_on_eot: str | None = None  # Axolotl's per-dataset train_on_eot (None: as train_on_eos)
    message_keys: tuple[str, str] = ("role", "content")  # message_property_mappings' role and content


@dataclass(kw_only=True, frozen=True, slots=True)
class LabelOptions:
    """What decides which tokens train, as the run's config sets it: Axolotl's train_on_inputs,
    eot_tokens, excess_length_strategy and chat_template; a recipe's data.assistant_only_loss (its chat
    rows go through TRL's SFTTrainer)."""

    trainer: str = "axolotl"  # "axolotl" | "trl"
    train_on_inputs: bool = False
    eot_tokens: tuple[str, ...] | None = None
    excess_length: str = "drop"
    chat_template: str | None = None  # Axolotl's chat_template (None: tokenizer_default)
    assistant_only_loss: bool = False


@dataclass(kw_only=True, frozen=True, slots=True)
class TokenEdits:
    """What an Axolotl config adds to the tokenizer, and the options that decide what the embeddings
    do about it (Axolotl 0.19 loaders/tokenizer.py load_tokenizer, loaders/model.py
    _resize_token_embeddings)."""

    special: tuple[tuple[str, str], ...] = ()  # special_tokens: (bos/eos/pad/unk_token, text), then
    # ("additional_special_tokens", text) for each of that list
    added: tuple[str, ...] = ()  # tokens: added as plain tokens
    tokenizer: str | None = None  # tokenizer_config: the tokenizer Axolotl loads instead of the base's
    modules_to_save: tuple[str, ...] = ()  # lora_modules_to_save
    mean_resizing: bool | None = None  # mean_resizing_embeddings (None: transformers' default, True)
    resize_to_32x: bool = False  # resize_token_embeddings_to_32x

    @property
    def asked(self) -> tuple[tuple[str, str], ...]:
        """Every (key, text) the config adds, as its findings name them."""
        return (
            *((f"special_tokens.{k}", t) for k, t in self.special),
            *(("tokens", t) for t in self.added),
        )


@dataclass(kw_only=True, frozen=True, slots=True)
class Run:
    """What preflight needs from a run, whatever wrote it; `findings` are what is wrong in the config
    itself (unknown keys), `notes` what was read and how."""

    source: str
    kind: str  # "axolotl" | "recipe"
    base_model: str
    seq_len: int
    micro_batch: int = 1
    grad_accum: int = 1
    epochs: float = 1.0
    packing: bool = False
    pad_to_seq_len: bool | None = None
    attn: str | None = None  # attn_implementation as the trainer passes it (None: transformers' default)
    hybrid: bool = False  # gemma4_hybrid_attn_impl: non-sliding layers on SDPA
    grad_ckpt: bool = False
    offload: str | None = None
    adapter: str | None = None  # "lora" | "qlora" | None (every weight trains)
    lora_r: int = 8
    targets: tuple[str, ...] = ()  # PEFT target_modules names (exact or "."-suffix)
    target_regex: str | None = None  # a target_modules string: re.fullmatch on the full module name
    target_linear: bool = False
    target_parameters: tuple[str, ...] = ()
    load_in_4bit: bool = False
    load_in_8bit: bool = False
    optimizer: str | None = None  # the trainer's optimizer name as given (Axolotl's `optimizer`)
    quantize_experts: bool = False  # Axolotl's quantize_moe_experts: fused experts in 4 bits too
    torch_compile: bool = False
    plugins: tuple[str, ...] = ()
    fused_loss: str | None = None  # a plugin's fused cross-entropy (cut_cross_entropy, liger)
    fsdp: dict[str, Any] | None = None
    deepspeed: str | None = None
    dtype: str = "bf16"
    bf16_auto: bool = False  # Axolotl's bf16 "auto": bf16 where the card has it, else fp16
    datasets: tuple[DatasetRef, ...] = ()
    tokens: TokenEdits = TokenEdits()
    labels: LabelOptions = LabelOptions()
    findings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    seq_len_key: str = "sequence_len"  # how the source names the width (data.max_length in a recipe)
    auto_attention: bool = False  # tuneproof train's auto: flex_attention on CUDA, sdpa on the CPU

    @property
    def packs_rows(self) -> bool:
        """Axolotl packs micro_batch_size x sequence_len tokens into one row for this backend."""
        attn = self.attn or ""
        return self.packing and attn_base(attn) in PACKS_ROWS
