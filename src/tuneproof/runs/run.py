"""The run, whatever wrote it: `Run`, the one run type, and `Run.step()`, the one conversion to the step
every tool prices (`runs.step.Step`: the micro-batch, the attention path, forward/full/LoRA and its
targets, checkpointing, precision, and what steps the weights, as the memory ledger sizes it).

Readers: an Axolotl YAML (`runs.axolotl.from_axolotl`), a tuneproof recipe (`runs.from_recipe`), a live
model and a Trainer's arguments (`runs.trainer.from_trainer`), a command's flags (`Run.of_flags`).
A `Run` is frozen: a reader builds it once, and what is learned later (the card has no bf16, the
recipe's attention auto on this device: `on_device`) makes a new one with `dataclasses.replace`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tuneproof.core import validate
from tuneproof.core.errors import TuneproofError
from tuneproof.runs.implementations import implementation
from tuneproof.runs.step import MODES, Precision, Step, Training, attention_path_name

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
    mode: str | None = None  # forward, full or lora; None: lora with an adapter, full without
    lora_ranks: tuple[tuple[str, int], ...] = ()  # PEFT's rank_pattern, or the ranks a PEFT model holds
    # how the step holds its numbers and what steps it, where the source says so itself (a command's
    # flags, a Trainer's model); None: derived from dtype, the quantisation flags and the optimizer name
    precision: Precision | None = None
    training: Training | None = None

    @property
    def packs_rows(self) -> bool:
        """Axolotl packs micro_batch_size x sequence_len tokens into one row for this backend."""
        attn = self.attn or ""
        return self.packing and attn_base(attn) in PACKS_ROWS

    @classmethod
    def of_flags(cls, *, attn: str, mode: str, **fields: Any) -> Run:
        """A run as a command's flags give it: the attention path and mode by the names a user passes
        (refused otherwise, naming the known ones)."""
        attention_path_name(attn)
        validate.choice("mode", mode, MODES)
        fields.setdefault("source", "the command line")
        fields.setdefault("base_model", "")
        fields.setdefault("targets", ("all-linear",))  # PEFT's all-linear unless the flags name targets
        adapter = "lora" if mode == "lora" else None
        return cls(kind="flags", attn=attn, mode=mode, adapter=adapter, **fields)

    def on_device(self, cuda: bool) -> Run:
        """The run as it will train on this device: the recipe's attention auto decided (flex_attention on
        CUDA, sdpa on the CPU: `tuneproof train`'s rule)."""
        if not self.auto_attention:
            return self
        return replace(self, attn=auto_attention(cuda), auto_attention=False)

    def widths(self) -> tuple[int, int]:
        """(rows, width) of one micro-batch as the trainer builds it."""
        if self.packs_rows:
            return 1, self.micro_batch * self.seq_len
        return self.micro_batch, self.seq_len

    def step(
        self,
        *,
        width: int | None = None,
        rows: int | None = None,
        padding: float = 0.0,
        lengths: tuple[int, ...] | None = None,
        documents: tuple[tuple[int, ...], ...] | None = None,
        padded: bool = False,
        packed: bool = False,
        targets: tuple[str, ...] | None = None,
    ) -> Step:
        """One micro-batch of the run: at the run's width (`widths`) unless `width` and `rows` say
        otherwise, with its padding share, real lengths or packed documents; `targets` replaces the run's
        LoRA targets (preflight's fallback when they adapt nothing). The attention implementation is the
        path it runs (`runs.implementations`), the precision and optimizer are the memory ledger's.
        `padded`: the last row one token short; `packed`: every row two documents (the mask rules read
        only whether there is padding or packing: the explainer's geometries)."""
        own_rows, own_width = self.widths()
        rows, width = own_rows if rows is None else rows, own_width if width is None else width
        if padded or packed:
            lengths, documents = _geometry(rows, width, padded, packed)
        mode = self.mode or ("lora" if self.adapter else "full")
        lora = mode == "lora"
        asked = lora or self.kind == "flags"  # a command's LoRA flags are checked in every mode
        modules = self.targets if targets is None else targets
        return Step(
            seq_len=width,
            batch=rows,
            attn=implementation(self.attn).path,
            padding_fraction=padding,
            lengths=lengths,
            documents=documents,
            mode=mode,
            lora_rank=self.lora_r,
            lora_targets=modules if asked else ("all-linear",),
            lora_regex=self.target_regex if lora and targets is None else None,
            lora_linear_leaves=self.target_linear and lora and targets != ("all-linear",),
            lora_target_parameters=self.target_parameters if asked else (),
            lora_ranks=self.lora_ranks if lora else (),
            lora_modules_to_save=self.tokens.modules_to_save if lora else (),
            grad_ckpt=self.grad_ckpt,
            compiled=self.torch_compile,
            precision=self.precision or self._precision(),
            training=self.training or self._training(),
        )

    def _precision(self) -> Precision:
        quant = (
            "4bit-dq"
            if (self.load_in_4bit or self.adapter == "qlora")
            else "8bit"
            if self.load_in_8bit
            else None
        )
        return Precision(
            dtype=self.dtype,
            autocast=self.dtype if self.dtype != "fp32" else None,
            quant=quant,
            quant_experts=self.quantize_experts and quant is not None,
        )

    def _training(self) -> Training:
        optimizer, impl, _ = ledger_optimizer(self.optimizer)
        return Training(grad_accum=max(self.grad_accum, 1), optimizer=optimizer, optimizer_impl=impl)

    @property
    def names_targets(self) -> bool:
        """The run names what its LoRA adapts (modules, a regex, Axolotl's lora_target_linear or
        target parameters)."""
        return bool(self.targets or self.target_regex or self.target_linear or self.target_parameters)

    @property
    def optimizer_note(self) -> str | None:
        """A line when the run's optimizer is not one the memory ledger sizes (sized as AdamW)."""
        return None if self.training is not None else ledger_optimizer(self.optimizer)[2]


def _geometry(
    rows: int, width: int, padded: bool, packed: bool
) -> tuple[tuple[int, ...] | None, tuple[tuple[int, ...], ...] | None]:
    """(lengths, documents) of a batch that is padded (its last row one token short) or packed (each
    row two documents)."""
    if padded and packed:
        raise TuneproofError(
            "{padded} and {packed} together",
            "a packed batch has no padding; pick one",
            fields=("padded", "packed"),
        )
    if packed:
        if width < 2:
            raise TuneproofError("a packed row of width 1 holds one document", "pack rows of width 2 or more")
        half = width // 2
        return None, ((half, width - half),) * rows
    return (width,) * (rows - 1) + (max(1, width - 1),), None


def auto_attention(cuda: bool) -> str:
    """`tuneproof train`'s attention auto: flex_attention (with kernel options that fit the card and a
    recompile guard) on CUDA, sdpa on the CPU (flex has no backward there)."""
    return "flex_attention" if cuda else "sdpa"


def ledger_optimizer(name: str | None) -> tuple[str, str, str | None]:
    """A trainer's optimizer name as the memory ledger sizes it: (optimizer, torch implementation, a line
    when the name is not one it sizes). transformers' names (TrainingArguments.optim): adamw_torch_fused
    (its default), adamw_torch (foreach on CUDA), the 8-bit AdamWs of bitsandbytes and torchao, sgd."""
    if name is None or name == "adamw_torch_fused":
        return "adamw", "fused", None
    if "8bit" in name and "adam" in name:
        return "adamw_8bit", "fused", None
    if name in ("adamw_torch", "adamw_hf", "adamw"):
        return "adamw", "foreach", None
    if name == "sgd":
        return "sgd", "fused", None
    return "adamw", "fused", f"optimizer {name} is not one the ledger sizes: its states are sized as AdamW's"
