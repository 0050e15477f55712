"""What one training step holds, the one step type every tool prices: `Rows` (what a micro-batch
holds: its rows, the documents packed into each, the padding after them) and `Step` (the rows plus how
the step trains: the attention path, forward/full/LoRA and what the LoRA targets, checkpointing, how it
holds its numbers (`Precision`) and what steps the weights (`Training`)).

A run (`tuneproof.runs.run.Run`: from a command's flags, an Axolotl YAML, a recipe, a Trainer's model
and arguments) gives its steps through `Run.step()`; no other module builds one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tuneproof.core import validate
from tuneproof.core.dtypes import BY_SHORT, LOW_PRECISION, MODEL_DTYPES, check_dtype
from tuneproof.core.errors import TuneproofError, field_error

if TYPE_CHECKING:
    from tuneproof.arch.targets import LoraTargets

# The attention paths transformers can take, by the names its attn_implementation uses; their records
# (mask rules, pairs, kernels) are `tuneproof.attention.paths.PATHS`, in this order, then UNKNOWN_PATH's.
ATTENTION_PATHS = ("eager", "sdpa", "flash_attention_2", "flex_attention")
# What a run's attention implementation prices as when no rule models it (`runs.implementations`): never
# a name a user passes for a path, never costed as the nearest known one
UNKNOWN_PATH = "unknown"
PRICED_PATHS = (*ATTENTION_PATHS, UNKNOWN_PATH)


def attention_path_name(name: object, field: str = "attn", unknown: bool = False) -> str:
    """`name` if it is a known attention path (or, with `unknown`, the unknown path a run's
    implementation may price as); any other name is refused, naming the known ones."""
    if not isinstance(name, str) or name not in (PRICED_PATHS if unknown else ATTENTION_PATHS):
        raise field_error(
            field, f"{name!r} is not a known attention path", "use one of: " + ", ".join(ATTENTION_PATHS)
        )
    return name


@dataclass(frozen=True, slots=True)
class Rows:
    """A batch as attention sees it: `docs[r]` are the documents of row r, back to back from slot 0;
    every row has `width` slots, the slots after its documents are padding. One document per row
    unless packed. A packed row may end in padding (a collator's pad_to_multiple_of after packing,
    Axolotl's multipack); the plans of `tuneproof.data.packing` fill every packed row."""

    width: int
    docs: tuple[tuple[int, ...], ...]
    compiled: bool = False  # the model runs under torch.compile: transformers builds a mask for every row

    def __post_init__(self) -> None:
        if self.width < 1 or not self.docs or any(not row or min(row) < 1 for row in self.docs):
            raise TuneproofError(
                f"empty rows or documents in a batch of width {self.width}", "give lengths >= 1"
            )
        for row in self.docs:
            if sum(row) > self.width:
                raise field_error("lengths", f"hold {sum(row)} tokens in a row of width {self.width}")

    @classmethod
    def padded(cls, width: int, lengths: list[int] | tuple[int, ...], compiled: bool = False) -> Rows:
        return cls(width, tuple((int(n),) for n in lengths), compiled)

    @property
    def num_rows(self) -> int:
        return len(self.docs)

    @property
    def is_padded(self) -> bool:
        return any(sum(row) < self.width for row in self.docs)

    @property
    def is_packed(self) -> bool:
        return any(len(row) > 1 for row in self.docs)


MODES = ("forward", "full", "lora")
MAX_BATCH = 1 << 20
# The names of how a step holds its numbers and what steps it; their sizes are the memory ledger's
# (`tuneproof.memory.states.QUANT` and `OPTIMIZERS`, keyed by these names in this order)
QUANT_NAMES = ("8bit", "4bit", "4bit-dq")  # bitsandbytes as transformers loads it (QLoRA: 4bit-dq)
OPTIMIZER_NAMES = ("adamw", "adamw_amsgrad", "sgd", "sgd_momentum", "adamw_8bit")
OPTIMIZER_IMPLS = ("fused", "foreach", "for-loop")  # torch's AdamW implementations
PARALLEL = ("none", "ddp", "fsdp")


@dataclass(kw_only=True, frozen=True, slots=True)
class Precision:
    """How the step holds its numbers. `dtype`: the weights as loaded; `autocast`: the activations'
    dtype under torch.autocast (the Trainer's bf16/fp16 flag), None to run in the weights' dtype;
    `quant`: the base's nn.Linear weights loaded by bitsandbytes (QLoRA)."""

    dtype: str = "bf16"
    autocast: str | None = "bf16"
    quant: str | None = None
    quant_experts: bool = False  # the fused experts quantised too (Axolotl's quantize_moe_experts)

    def __post_init__(self) -> None:
        check_dtype(self.dtype)
        validate.choice("dtype", self.dtype, MODEL_DTYPES)
        if self.autocast is not None:
            validate.choice("autocast", self.autocast, LOW_PRECISION)
        if self.quant is not None:
            validate.choice("quant", self.quant, QUANT_NAMES)

    @property
    def activation_bytes(self) -> int:
        return BY_SHORT[self.autocast or self.dtype].bytes

    @property
    def weight_copies(self) -> bool:
        """fp32 weights under a low-precision autocast: every GEMM reads a low-precision copy of its
        weight, made in forward and kept by the GEMM for its input's gradient."""
        return self.dtype == "fp32" and self.autocast is not None


@dataclass(kw_only=True, frozen=True, slots=True)
class Training:
    """What steps the weights and across how many ranks. `optimizer_impl`: torch's AdamW
    implementation (fused: HF Trainer's default `adamw_torch_fused`); `grad_accum`: micro-batches per
    optimizer step (gradients live through every forward after the first); `parallel` over
    `world_size` ranks: DDP keeps every weight and a bucketed copy of the gradients per rank, FSDP2
    shards weights, gradients and states and gathers one layer (and prefetches the next)."""

    optimizer: str = "adamw"
    optimizer_impl: str = "fused"
    grad_accum: int = 1
    parallel: str = "none"
    world_size: int = 1
    step_on_device: bool = False  # AdamW's step scalars on the device (capturable, or the CPU)

    def __post_init__(self) -> None:
        validate.choice("optimizer", self.optimizer, OPTIMIZER_NAMES)
        validate.choice("optimizer_impl", self.optimizer_impl, OPTIMIZER_IMPLS)
        validate.integer("grad_accum", self.grad_accum, high=1 << 16, hint="micro-batches per step")
        validate.choice("parallel", self.parallel, PARALLEL)
        if self.optimizer == "adamw_8bit" and self.optimizer_impl != "fused":
            raise TuneproofError(
                f"{{optimizer}} adamw_8bit with {{optimizer_impl}} {self.optimizer_impl}",
                "bitsandbytes steps in one kernel: leave the implementation fused",
                fields=("optimizer", "optimizer_impl"),
            )
        validate.integer("world_size", self.world_size, high=1 << 16, hint="ranks")
        if (self.parallel == "none") != (self.world_size == 1):
            raise TuneproofError(
                "{parallel} and {world_size} disagree",
                "give ddp or fsdp with more than one rank, none with one",
                fields=("parallel", "world_size"),
            )


@dataclass(kw_only=True, frozen=True, slots=True)
class Step:
    """One micro-batch step.

    `seq_len` is the padded width T every row of the micro-batch has. Real lengths come from
    `lengths` (one per row) when given, from `documents` (per row, the documents packed into it) for a
    packed batch, else from `padding_fraction` (share of the B*T token slots that are padding, spread
    evenly over the rows). `mode`: forward (no backward), full (every weight trains), lora (frozen base,
    adapters of `lora_rank` on `lora_targets`, PEFT target_modules semantics, "all-linear" = every
    nn.Linear but the LM head; `lora_target_parameters`: fused 3-D expert parameters adapted in place
    by PEFT's target_parameters, each a parameter path or its '.'-suffix such as
    "mlp.experts.gate_up_proj", rank `lora_rank` per expert; `lora_targets` may then be empty).
    `lora_ranks`: (module or parameter path or its '.'-suffix, rank) for the adapters whose rank is not
    `lora_rank` (PEFT's rank_pattern, or the ranks a PEFT model really holds); `lora_modules_to_save`:
    modules PEFT copies and trains whole beside the adapters (modules_to_save, e.g. lm_head);
    `lora_regex`: target_modules as a regular expression over full module paths (then `lora_targets` is
    not read); `lora_linear_leaves`: Axolotl's lora_target_linear (every nn.Linear's last name added to
    `lora_targets`). What a LoRA of these adapts is `tuneproof.arch.targets`' (`Step.lora`), PEFT's own
    resolution. `precision` and `training` are what the memory ledger sizes (the FLOP ledger reads neither).
    """

    seq_len: int
    batch: int = 1
    attn: str = "sdpa"
    padding_fraction: float = 0.0
    mode: str = "full"
    lora_rank: int = 16
    lora_targets: tuple[str, ...] = ("all-linear",)
    lora_target_parameters: tuple[str, ...] = ()
    grad_ckpt: bool = False
    lora_ranks: tuple[tuple[str, int], ...] = ()
    lora_modules_to_save: tuple[str, ...] = ()
    lengths: tuple[int, ...] | None = None
    documents: tuple[tuple[int, ...], ...] | None = None
    compiled: bool = False  # torch.compile: SDPA gets a mask on every layer (attention.paths)
    lora_regex: str | None = None
    lora_linear_leaves: bool = False
    precision: Precision = Precision()
    training: Training = Training()

    def __post_init__(self) -> None:
        validate.integer("seq_len", self.seq_len, hint="pass the padded width in tokens")
        # the same bound as buckets' and plan's --micro-batch: a larger batch is a typo, and rows are
        # priced one by one
        validate.integer("batch", self.batch, high=MAX_BATCH, hint="pass sequences per micro-batch")
        validate.real(
            "padding_fraction",
            self.padding_fraction,
            low=0.0,
            high=1.0,
            high_open=True,
            hint="pass the share of token slots that are padding, e.g. 0.3",
        )
        attention_path_name(self.attn, unknown=True)
        validate.choice("mode", self.mode, MODES)
        validate.integer("lora_rank", self.lora_rank, high=1 << 20, hint="pass the adapter rank r")
        _names("lora_targets", self.lora_targets, "module", "('q_proj', 'v_proj')")
        _names(
            "lora_target_parameters", self.lora_target_parameters, "parameter", "('mlp.experts.down_proj',)"
        )
        _names("lora_modules_to_save", self.lora_modules_to_save, "module", "('lm_head',)")
        for entry in self.lora_ranks:
            if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], str) and entry[0]):
                raise field_error(
                    "lora_ranks",
                    f"must be (path, rank) pairs, got {entry!r}",
                    "e.g. (('mlp.experts.gate_up_proj', 32),)",
                )
            validate.integer("lora_ranks", entry[1], high=1 << 20, hint="pass each adapter's rank r")
        if self.lora_regex is not None:
            _regex(self.lora_regex)
        if not (
            self.lora_targets or self.lora_target_parameters or self.lora_regex or self.lora_linear_leaves
        ):
            raise TuneproofError(
                "{lora_targets} is empty",
                "give module names, all-linear, or {lora_target_parameters}",
                fields=("lora_targets", "lora_target_parameters"),
            )
        if self.precision.quant is not None and self.mode != "lora":
            raise TuneproofError(
                f"{{quant}} {self.precision.quant} with {self.mode} fine-tuning",
                "quantised weights do not train: use LoRA (QLoRA)",
                fields=("quant",),
            )
        if self.grad_ckpt and self.mode == "forward":
            raise TuneproofError(
                "{grad_ckpt} needs a backward pass", "use mode full or lora", fields=("grad_ckpt",)
            )
        given = [name for name in ("lengths", "documents") if getattr(self, name) is not None]
        if self.padding_fraction and given:
            raise TuneproofError(
                f"{{padding_fraction}} and {given[0]} together",
                "give real lengths or a padding share, not both",
                fields=("padding_fraction",),
            )
        if len(given) == 2:
            raise TuneproofError("lengths and documents together", "documents already fix each row's length")
        rows = self.lengths if self.lengths is not None else self.documents
        if rows is not None and len(rows) != self.batch:
            raise field_error("batch", f"is {self.batch} but {len(rows)} rows of {given[0]} were given")
        if self.lengths is not None:
            validate.integers("lengths", self.lengths, high=self.seq_len)
        if self.documents is not None:
            for row in self.documents:
                validate.integers("documents", row, high=self.seq_len)
        _ = self.rows  # the geometry itself is checked by Rows

    @property
    def lora(self) -> LoraTargets:
        """What the LoRA is asked to adapt, in PEFT's words (`tuneproof.arch.targets`)."""
        from tuneproof.arch.targets import LoraTargets

        return LoraTargets(
            modules=self.lora_targets, regex=self.lora_regex, linear_leaves=self.lora_linear_leaves,
            parameters=self.lora_target_parameters, rank=self.lora_rank, ranks=self.lora_ranks,
            saved=self.lora_modules_to_save,
        )  # fmt: skip

    def rank_of(self, path: str) -> int:
        """The adapter rank on the module or parameter at `path`: the first `lora_ranks` key matching it
        as PEFT's rank_pattern matches (`(.*\\.)?(key)$`), else `lora_rank`."""
        from tuneproof.arch.targets import pattern_rank

        return pattern_rank(path, self.lora_ranks, self.lora_rank)

    @property
    def rows(self) -> Rows:
        """The batch as attention sees it."""
        if self.documents is not None:
            docs = tuple(tuple(int(n) for n in row) for row in self.documents)
            return Rows(self.seq_len, docs, self.compiled)
        if self.lengths is not None:
            return Rows.padded(self.seq_len, self.lengths, self.compiled)
        real = round(self.batch * self.seq_len * (1.0 - self.padding_fraction))
        real = max(real, self.batch)
        base, extra = divmod(real, self.batch)
        lengths = [base + (1 if i < extra else 0) for i in range(self.batch)]
        return Rows.padded(self.seq_len, lengths, self.compiled)

    @property
    def document_lengths(self) -> list[int]:
        """Every document's length, row by row (one per row unless packed)."""
        return [n for row in self.rows.docs for n in row]

    @property
    def real_lengths(self) -> list[int]:
        """Real (unpadded) tokens in each row."""
        return [sum(row) for row in self.rows.docs]

    @property
    def real_tokens(self) -> int:
        return sum(self.real_lengths)

    @property
    def padded_tokens(self) -> int:
        return self.batch * self.seq_len


# the name every caller of the library knew before the run became the spine (issue 47)
RunSpec = Step


def _regex(pattern: str) -> None:
    import re

    try:
        re.compile(pattern)
    except re.error as e:
        raise field_error(
            "lora_targets", f"the regex {pattern!r} does not compile ({e})", "fix the pattern"
        ) from None


def _names(field: str, value: object, kind: str, example: str) -> None:
    """A tuple of non-empty names; a bare string is refused (it would be read letter by letter), and
    so is all-linear among parameters (PEFT's all-linear names modules)."""
    names = list(value) if isinstance(value, tuple | list) else [None]
    if not all(isinstance(t, str) and t for t in names) or (kind == "parameter" and "all-linear" in names):
        noun = "nn.Linear names" if kind == "module" else "fused expert parameter names"
        raise field_error(field, f"must be {kind} names, got {value!r}", f"a tuple of {noun}, e.g. {example}")
