"""What decides which tokens train: the trainer and its options (`LabelRules`), and what a trainer made
of a dataset (`Built`: each example's token ids and labels as its collator receives them, and what it
dropped or refused).

A token trains when its label is not -100 and it is a prediction target: causal-LM losses shift the
labels (the logits at position i predict label i+1), so an example's first label never trains.
transformers 5.24's Trainer counts the step's tokens the same way (`num_items_in_batch` over
`labels[..., 1:]`), and TRL's padding-free collator masks each packed document's first label for the
same reason, so the per-example count below is what the loss averages over, packed or not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tuneproof.core.errors import TuneproofError

IGNORE = -100
TRAINERS = ("trl", "transformers", "axolotl")
TRAINER_NAMES = {"trl": "TRL's SFTTrainer", "axolotl": "Axolotl", "transformers": "transformers' Trainer"}
TRL_VERIFIED = "1.16"  # the TRL whose SFTTrainer the rules below were read from (trl/trainer/sft_trainer.py)
AXOLOTL_VERIFIED = "0.19.0"
PACKING = ("bfd", "bfd_split", "wrapped")
TRUNCATION = ("keep_start", "keep_end")
EXCESS = ("drop", "truncate", "raise")  # Axolotl's excess_length_strategy
EOS_OPTIONS = ("turn", "all", "last", "none")  # Axolotl's train_on_eos / train_on_eot
TRL_ONLY: dict[str, Any] = {
    "truncation_mode": "keep_start", "assistant_only_loss": False, "completion_only_loss": None,
    "packing": None, "padding_free": False,
}  # fmt: skip
AXOLOTL_ONLY: dict[str, Any] = {
    "train_on_inputs": False, "roles_to_train": ("assistant",), "train_on_eos": "turn",
    "train_on_eot": None, "eot_tokens": None, "excess_length": "drop", "dataset_type": "chat_template",
    "field_messages": "messages", "message_keys": ("role", "content"),
}  # fmt: skip


@dataclass(kw_only=True, frozen=True, slots=True)
class LabelRules:
    """How a trainer builds labels. TRL's `SFTTrainer` (trainer "trl", `SFTConfig`'s defaults):
    `max_length` 1024, `truncation_mode` keep_start, `assistant_only_loss` off, `completion_only_loss`
    None (on for prompt-completion rows), `packing` None or a strategy (bfd turns on padding-free),
    `text_field` "text". transformers' `Trainer` with its `DataCollatorForLanguageModeling(mlm=False)`
    (trainer "transformers"): every token trains except those equal to the pad id, rows truncated at
    `max_length`. Axolotl's `chat_template` and `completion` datasets (trainer "axolotl"):
    `train_on_inputs`, `roles_to_train`, `train_on_eos`, `train_on_eot`, `eot_tokens`, rows longer than
    `max_length` (its sequence_len) handled by `excess_length` (drop, Axolotl's default)."""

    trainer: str = "trl"
    max_length: int | None = 1024
    truncation_mode: str = "keep_start"
    assistant_only_loss: bool = False
    completion_only_loss: bool | None = None
    packing: str | None = None
    padding_free: bool = False
    text_field: str = "text"
    train_on_inputs: bool = False
    roles_to_train: tuple[str, ...] = ("assistant",)
    train_on_eos: str = "turn"
    train_on_eot: str | None = None
    eot_tokens: tuple[str, ...] | None = None
    excess_length: str = "drop"
    dataset_type: str = "chat_template"  # Axolotl's datasets[].type
    field_messages: str = "messages"
    message_keys: tuple[str, str] = ("role", "content")  # Axolotl's message_property_mappings role, content

    def __post_init__(self) -> None:
        checks = (
            ("trainer", self.trainer, TRAINERS), ("truncation_mode", self.truncation_mode, TRUNCATION),
            ("train_on_eos", self.train_on_eos, EOS_OPTIONS), ("excess_length", self.excess_length, EXCESS),
        )  # fmt: skip
        for name, value, allowed in checks:
            if value not in allowed:
                raise TuneproofError(
                    f"{{{name}}} is {value!r}", f"use one of {', '.join(allowed)}", fields=(name,)
                )
        if self.packing is not None and self.packing not in PACKING:
            raise TuneproofError(
                f"{{packing}} is {self.packing!r}", f"use one of {', '.join(PACKING)}", fields=("packing",)
            )
        if self.train_on_eot is not None and self.train_on_eot not in EOS_OPTIONS:
            raise TuneproofError(
                f"{{train_on_eot}} is {self.train_on_eot!r}", f"use one of {', '.join(EOS_OPTIONS)}",
                fields=("train_on_eot",),
            )  # fmt: skip
        if self.max_length is not None and (isinstance(self.max_length, bool) or self.max_length < 1):
            raise TuneproofError(
                f"{{max_length}} is {self.max_length!r}", "give a whole number of tokens, at least 1",
                fields=("max_length",),
            )  # fmt: skip
        for name in ("text_field", "field_messages"):
            if not getattr(self, name):
                raise TuneproofError(f"{{{name}}} is empty", "name the column", fields=(name,))
        self._only("trl", TRL_ONLY)
        self._only("axolotl", AXOLOTL_ONLY)
        if self.packing is not None and self.max_length is None:
            raise TuneproofError(
                "packing needs {max_length} (TRL refuses packing without it)", "give max_length",
                fields=("max_length",),
            )  # fmt: skip

    def _only(self, trainer: str, defaults: dict[str, Any]) -> None:
        """Options of one trainer, set for another, are refused (they would change nothing)."""
        if self.trainer == trainer:
            return
        for name, default in defaults.items():
            if getattr(self, name) != default:
                raise TuneproofError(
                    f"{{{name}}} is an option of {TRAINER_NAMES[trainer]}; the {{trainer}} is {self.trainer}",
                    f"drop it, or use trainer {trainer}", fields=(name, "trainer"),
                )  # fmt: skip

    @property
    def padding_free_on(self) -> bool:
        """TRL turns padding-free on for bfd packing (sft_trainer.py: `padding_free or packing in bfd`)."""
        return self.padding_free or self.packing in ("bfd", "bfd_split")

    def to_dict(self) -> dict[str, Any]:
        """The options of this trainer (another trainer's are left out: they do not apply)."""
        other = {
            **({} if self.trainer == "trl" else TRL_ONLY),
            **({} if self.trainer == "axolotl" else AXOLOTL_ONLY),
        }
        out = {k: getattr(self, k) for k in self.__slots__ if k not in other}
        for k in ("roles_to_train", "eot_tokens", "message_keys"):
            if k in out and out[k] is not None:
                out[k] = list(out[k])
        return out


@dataclass(kw_only=True, slots=True)
class Built:
    """A dataset as a trainer builds it: per example its token ids and labels as the collator receives
    them (empty when dropped), the tokens before truncation, `dropped` (why the trainer drops it; None:
    kept), `mask_empty` (the assistant or completion mask is all zero before truncation), `unknown`
    (examples not modelled, with why) and `stops` (the trainer's own refusal of the whole dataset, in its
    words, when it refuses it)."""

    ids: list[np.ndarray]
    labels: list[np.ndarray]
    length: np.ndarray  # tokens before truncation
    trained_before: np.ndarray  # tokens that would train before truncation
    dropped: list[str | None]
    mask_empty: np.ndarray
    form: str  # "messages", "prompt-completion", "text", ...
    no_target: np.ndarray | None = None  # chats: the row has no turn the trainer trains (no assistant)
    notes: list[str] = field(default_factory=list)
    stops: list[str] = field(default_factory=list)
    unknown: dict[int, str] = field(default_factory=dict)
    template: str | None = None  # the chat template the trainer renders with, when it swapped one in
    piece: int | None = None  # TRL's bfd_split: each example cut into documents of this many tokens

    def counts(self) -> np.ndarray:
        """Tokens each example trains as the collator receives it (0 when dropped or not modelled)."""
        out = np.zeros(len(self.ids), dtype=np.int64)
        kept = [i for i, why in enumerate(self.dropped) if why is None and i not in self.unknown]
        if self.piece is not None:
            for i in kept:
                y, n = self.labels[i], self.piece
                out[i] = sum(trained(y[j : j + n]) for j in range(0, y.size, n))
            return out
        kept = [i for i in kept if self.labels[i].size > 1]
        if kept:  # every kept example at once: its labels after the first that are not -100
            flat = np.concatenate([self.labels[i] for i in kept])
            starts = np.cumsum([0, *(self.labels[i].size for i in kept[:-1])])
            train = flat != IGNORE
            train[starts] = False
            out[kept] = np.add.reduceat(train, starts)
        return out


def row_error(i: int, what: str, hint: str) -> TuneproofError:
    """A row the trainer cannot read, named as a person counts a file's rows (from 1)."""
    return TuneproofError(f"row {i + 1}: {what}", hint)


def trained(labels: np.ndarray) -> int:
    """Tokens of one sequence the loss averages over: its labels after the first that are not -100."""
    return int(np.count_nonzero(labels[1:] != IGNORE))


def empty(n: int, form: str) -> Built:
    """A Built for `n` examples, to be filled in."""
    none = np.zeros(0, dtype=np.int64)
    return Built(
        ids=[none] * n, labels=[none] * n, length=np.zeros(n, dtype=np.int64),
        trained_before=np.zeros(n, dtype=np.int64), dropped=[None] * n,
        mask_empty=np.zeros(n, dtype=bool), form=form, no_target=np.zeros(n, dtype=bool),
    )  # fmt: skip
