"""The tokens that train, counted and judged: `check(rows, tokenizer, rules, model)` builds the labels
as the trainer will (`labels.trl`, `labels.plain`, `labels.axolotl`) and returns a `TokenReport`, with a
finding for each way a run can train on nothing or never learn to stop:

- `trainer_stops`: the trainer will refuse the dataset (TRL's missing generation markers, Axolotl's
  excess_length_strategy raise), in its own words;
- `assistant_mask_empty`: examples whose assistant mask is all zero (the template marks no assistant
  tokens), so nothing in them trains;
- `truncated_away`: examples that had tokens to train and lose all of them to truncation or to the
  trainer's length filter;
- `nothing_to_train`: examples with no token to train even before truncation (no assistant turn);
- `eos_untrained`: no example trains a stop token (the tokenizer's EOS, the model's generation_config
  eos_token_id): the model never learns to stop;
- `pad_is_eos`: the pad id is the EOS and the collator masks the pad id, so every EOS is masked;
- `added_tokens`: the data uses tokens past the model's embedding rows: the trainer must resize them
  and their rows start untrained (tied: the output head's too).

Rows are numbered from 1, as a person counts the lines of a JSONL file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tuneproof.core.verdict import CANNOT_JUDGE, NoWarnings, Verdict, counted
from tuneproof.labels.rules import Built, LabelRules

SHOWN = 10  # rows named per finding
ABOUT, CLEAN = "about the tokens that train", "no finding about the tokens that train"


@dataclass(kw_only=True, frozen=True, slots=True)
class Finding:
    kind: str
    count: int
    text: str
    rows: tuple[int, ...] = ()  # the rows it is about, from 1
    tokens: int | None = None  # the tokens it costs (truncated_away: the trained tokens lost)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "count": self.count, "text": self.text, "rows": list(self.rows),
                "tokens": self.tokens}  # fmt: skip


@dataclass(kw_only=True, frozen=True, slots=True)
class ModelFacts:
    """What the model's folder says about its vocabulary: embedding rows (config vocab_size), tied
    embeddings, and the stop tokens of its generation_config (eos_token_id, an int or a list)."""

    rows: int | None = None
    tied: bool | None = None
    stop_ids: tuple[int, ...] = ()
    source: str | None = None

    @classmethod
    def from_folder(cls, folder: Path | None) -> ModelFacts:
        if folder is None:
            return cls()
        config, generation = _json(folder / "config.json"), _json(folder / "generation_config.json")
        inner = config.get("text_config")
        text: dict[str, Any] = inner if isinstance(inner, dict) else config
        rows = text.get("vocab_size") if isinstance(text.get("vocab_size"), int) else None
        tied = config.get("tie_word_embeddings", text.get("tie_word_embeddings"))
        stops = [*_ids(generation.get("eos_token_id")), *_ids(config.get("eos_token_id"))]
        return cls(
            rows=rows,
            tied=tied if isinstance(tied, bool) else None,
            stop_ids=tuple(dict.fromkeys(stops)),
            source=str(folder),
        )


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _ids(value: Any) -> list[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    return [v for v in value if isinstance(v, int)] if isinstance(value, list) else []


@dataclass(kw_only=True, slots=True)
class TokenReport(NoWarnings):
    source: str
    rules: LabelRules
    built: Built
    counts: np.ndarray  # per example, the tokens that train
    tokens: int  # real tokens of the kept examples, as the collator receives them
    stop_names: dict[int, str]
    stop_rows: int  # examples that train a stop token
    findings: list[Finding] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    longer: int = 0  # examples longer than the length limit
    vocab: tuple[int, int] | None = None  # (the tokenizer's tokens, the model's embedding rows), when known

    @property
    def trained(self) -> int:
        return int(self.counts.sum())

    @property
    def kept(self) -> int:
        return int(np.count_nonzero(self.kept_mask()))

    @property
    def verdict(self) -> Verdict:
        if not self.findings and len(self.built.unknown) == len(self.built.ids):
            return Verdict(outcome="UNKNOWN", reason="no example could be modelled", exit_code=CANNOT_JUDGE)
        return counted(len(self.findings), ABOUT, CLEAN)

    def to_dict(self) -> dict[str, Any]:
        b = self.built
        dropped: dict[str, int] = {}
        for d in b.dropped:
            if d is not None:
                dropped[d] = dropped.get(d, 0) + 1
        return {
            "source": self.source,
            "rules": self.rules.to_dict(),
            "form": b.form,
            "examples": len(b.ids),
            "kept": self.kept,
            "dropped": dropped,
            "unknown": {str(i + 1): why for i, why in sorted(b.unknown.items())[:SHOWN]},
            "unknown_count": len(b.unknown),
            "tokens": self.tokens,
            "trained_tokens": self.trained,
            "trained_share": self.trained / self.tokens if self.tokens else None,
            "longer_than_limit": self.longer,
            "tokenizer_tokens": self.vocab[0] if self.vocab else None,
            "embedding_rows": self.vocab[1] if self.vocab else None,
            "stop_tokens": {str(k): v for k, v in self.stop_names.items()},
            "examples_training_a_stop_token": self.stop_rows,
            "trainer_stops": list(b.stops),
            "notes": list(b.notes),
            "per_example": _spread(self.counts[self.kept_mask()]),
            "findings": [f.to_dict() for f in self.findings],
            "verdict": self.verdict.outcome,
            "exit_code": self.verdict.exit_code,
        }

    def kept_mask(self) -> np.ndarray:
        return np.array(
            [d is None and i not in self.built.unknown for i, d in enumerate(self.built.dropped)], dtype=bool
        )

    def render(self, console: Any) -> None:
        self.render_body(console)
        v = self.verdict
        console.print(f"verdict: {v.outcome} ({v.reason}; exit {v.exit_code})")

    def render_body(self, console: Any) -> None:
        """The dataset's lines and findings, without the verdict (a command with several datasets
        prints one verdict for all)."""
        from rich.markup import escape

        head = f"{escape(self.source)}: {escape(self.built.form)} rows, {escape(_trainer(self.rules))}"
        console.print(head)
        for line in self.lines:
            console.print(f"  {escape(line)}")
        if self.findings:
            console.print("findings")
            for f in self.findings:
                console.print(f"  - {escape(f.text)}")


def _spread(counts: np.ndarray) -> dict[str, Any]:
    if counts.size == 0:
        return {"min": None, "median": None, "max": None}
    return {"min": int(counts.min()), "median": float(np.median(counts)), "max": int(counts.max())}


def _trainer(rules: LabelRules) -> str:
    if rules.trainer == "trl":
        opts = [f"max_length {rules.max_length}", rules.truncation_mode]
        opts += ["assistant_only_loss"] if rules.assistant_only_loss else []
        opts += (
            [f"completion_only_loss {rules.completion_only_loss}"]
            if rules.completion_only_loss is not None
            else []
        )
        opts += [f"packing {rules.packing}"] if rules.packing else []
        opts += ["padding_free"] if rules.padding_free_on else []
        return "TRL SFTTrainer (" + ", ".join(opts) + ")"
    if rules.trainer == "transformers":
        return f"transformers Trainer + DataCollatorForLanguageModeling (max_length {rules.max_length})"
    roles = ", ".join(rules.roles_to_train)
    return (
        f"Axolotl {rules.dataset_type} (sequence_len {rules.max_length}, train_on_inputs "
        f"{str(rules.train_on_inputs).lower()}, roles_to_train [{roles}], train_on_eos {rules.train_on_eos})"
    )


def rows_text(rows: list[int] | tuple[int, ...], total: int) -> str:
    shown = ", ".join(str(r) for r in rows[:SHOWN])
    return f"row{'s' * (total != 1)} {shown}" + (f" and {total - SHOWN:,} more" if total > SHOWN else "")


def check(
    rows: list[dict[str, Any]], tok: Any, rules: LabelRules, model: ModelFacts, source: str
) -> TokenReport:
    """The labels of `rows` as `rules`' trainer builds them, counted, with the findings above."""
    from tuneproof.labels import axolotl, plain, trl
    from tuneproof.labels.findings import judge

    builder = {"trl": trl.build, "transformers": plain.build, "axolotl": axolotl.build}[rules.trainer]
    built = builder(rows, tok, rules)
    counts = built.counts()
    kept = [i for i, d in enumerate(built.dropped) if d is None and i not in built.unknown]
    tokens = int(sum(built.ids[i].size for i in kept))
    stops = {int(i): str(tok.convert_ids_to_tokens(int(i))) for i in _stop_ids(tok, model)}
    stop_rows = _stop_rows([built.labels[i] for i in kept], np.array(sorted(stops), dtype=np.int64))
    report = TokenReport(
        source=source,
        rules=rules,
        built=built,
        counts=counts,
        tokens=tokens,
        stop_names=stops,
        stop_rows=stop_rows,
    )
    judge(report, tok, model)
    return report


def _stop_rows(labels: list[np.ndarray], stops: np.ndarray) -> int:
    """Examples whose trained labels (after the first) hold a stop token, in one pass over all of them."""
    labels = [y for y in labels if y.size > 1]
    if not labels or not stops.size:
        return 0
    flat = np.concatenate(labels)
    starts = np.cumsum([0, *(y.size for y in labels[:-1])])
    hit = np.isin(flat, stops)
    hit[starts] = False  # an example's first label is no prediction target
    return int(np.count_nonzero(np.add.reduceat(hit, starts)))


def _stop_ids(tok: Any, model: ModelFacts) -> list[int]:
    ids = [tok.eos_token_id] if tok.eos_token_id is not None else []
    return list(dict.fromkeys([*ids, *model.stop_ids]))
