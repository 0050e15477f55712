"""What one training step holds, the one step type every tool prices: `Rows` (what a micro-batch
holds: its rows, the documents packed into each, the padding after them) and `RunSpec` (the rows plus
how the step trains: the attention path, forward/full/LoRA, the adapters, checkpointing).

A run's config (`tuneproof.runs.run.Run`, from an Axolotl YAML or a recipe) gives its step through
`Run.step`; the CLI builds one from flags, the train callback from the model it wraps (`from_model`
in `tuneproof.train.read_run`), probe and doctor from their own specs.
"""

from __future__ import annotations

from dataclasses import dataclass

from tuneproof.core import validate
from tuneproof.core.errors import TuneproofError, field_error

# The attention paths transformers can take, by the names its attn_implementation uses; their records
# (mask rules, pairs, kernels) are `tuneproof.attention.paths.PATHS`, in this order.
ATTENTION_PATHS = ("eager", "sdpa", "flash_attention_2", "flex_attention")


def attention_path_name(name: object, field: str = "attn") -> str:
    """`name` if it is a known attention path; an unknown name is refused, naming the known ones."""
    if not isinstance(name, str) or name not in ATTENTION_PATHS:
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


@dataclass(kw_only=True, frozen=True, slots=True)
class RunSpec:
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
    modules PEFT copies and trains whole beside the adapters (modules_to_save, e.g. lm_head).
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
        attention_path_name(self.attn)
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
        if not self.lora_targets and not self.lora_target_parameters:
            raise TuneproofError(
                "{lora_targets} is empty",
                "give module names, all-linear, or {lora_target_parameters}",
                fields=("lora_targets", "lora_target_parameters"),
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
        self.rows()  # the geometry itself is checked by Rows

    def rank_of(self, path: str) -> int:
        """The adapter rank on the module or parameter at `path` (inside a layer): the first entry of
        `lora_ranks` it matches (exact or '.'-suffix, PEFT's semantics), else `lora_rank`."""
        from tuneproof.arch.targets import peft_matches

        return next(
            (rank for pattern, rank in self.lora_ranks if peft_matches(path, (pattern,))), self.lora_rank
        )

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

    def document_lengths(self) -> list[int]:
        """Every document's length, row by row (one per row unless packed)."""
        return [n for row in self.rows().docs for n in row]

    def real_lengths(self) -> list[int]:
        """Real (unpadded) tokens in each row."""
        return [sum(row) for row in self.rows().docs]

    @property
    def real_tokens(self) -> int:
        return sum(self.real_lengths())

    @property
    def padded_tokens(self) -> int:
        return self.batch * self.seq_len


def _names(field: str, value: object, kind: str, example: str) -> None:
    """A tuple of non-empty names; a bare string is refused (it would be read letter by letter), and
    so is all-linear among parameters (PEFT's all-linear names modules)."""
    names = list(value) if isinstance(value, tuple | list) else [None]
    if not all(isinstance(t, str) and t for t in names) or (kind == "parameter" and "all-linear" in names):
        noun = "nn.Linear names" if kind == "module" else "fused expert parameter names"
        raise field_error(field, f"must be {kind} names, got {value!r}", f"a tuple of {noun}, e.g. {example}")
