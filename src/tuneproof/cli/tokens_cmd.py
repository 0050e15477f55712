"""`tuneproof tokens INPUT`: the tokens that train, as the trainer will build them."""

from __future__ import annotations

from pathlib import Path

import click

from tuneproof.cli.common import PATH, command, finish, json_option, terminal_progress


@command()
@click.argument("source", metavar="INPUT", type=PATH)
@click.option(
    "--tokenizer",
    type=PATH,
    default=None,
    help="The tokenizer's folder (a model folder: its config.json gives the embedding rows).",
)
@click.option(
    "--trainer",
    type=click.Choice(["trl", "transformers", "axolotl"]),
    default="trl",
    show_default=True,
    help="Whose labels: TRL's SFTTrainer, transformers' Trainer with its DataCollatorForLanguageModeling, "
    "or Axolotl's chat_template and completion datasets.",
)
@click.option(
    "--max-length",
    type=int,
    default=1024,
    show_default=True,
    help="Truncation (TRL max_length, Axolotl sequence_len).",
)
@click.option(
    "--truncation-mode",
    type=click.Choice(["keep_start", "keep_end"]),
    default="keep_start",
    show_default=True,
    help="TRL's truncation_mode.",
)
@click.option("--assistant-only-loss", is_flag=True, help="TRL: the loss on the assistant's tokens only.")
@click.option(
    "--completion-only-loss",
    type=click.Choice(["auto", "true", "false"]),
    default="auto",
    show_default=True,
    help="TRL: prompt-completion rows train the completion only (auto: on).",
)
@click.option(
    "--packing",
    type=click.Choice(["bfd", "bfd_split"]),
    default=None,
    help="TRL's packing strategy (bfd turns padding-free on).",
)
@click.option("--text-field", default="text", show_default=True, help="The text column of text rows.")
@click.option("--train-on-inputs", is_flag=True, help="Axolotl: every turn trains.")
@click.option(
    "--roles-to-train",
    default="assistant",
    show_default=True,
    help="Axolotl: comma-separated roles whose turns train.",
)
@click.option(
    "--train-on-eos",
    type=click.Choice(["turn", "all", "last", "none"]),
    default="turn",
    show_default=True,
    help="Axolotl: which EOS tokens train.",
)
@click.option(
    "--dataset-type",
    type=click.Choice(["chat_template", "completion"]),
    default="chat_template",
    show_default=True,
    help="Axolotl: the dataset's type.",
)
@click.option(
    "--field-messages", default="messages", show_default=True, help="Axolotl: the field of a row's turns."
)
@click.option("--limit", type=int, default=None, help="Read at most this many rows per dataset.")
@json_option
def tokens(
    source: Path, tokenizer: Path | None, trainer: str, max_length: int, truncation_mode: str,
    assistant_only_loss: bool, completion_only_loss: str, packing: str | None, text_field: str,
    train_on_inputs: bool, roles_to_train: str, train_on_eos: str, dataset_type: str, field_messages: str,
    limit: int | None, json_out: bool,
) -> int:  # fmt: skip
    """Count the tokens that train (labels not -100, as the loss counts them) per example and in all,
    as TRL's SFTTrainer, transformers' Trainer or Axolotl will build them from INPUT: a dataset (JSONL,
    JSON, Parquet, a saved datasets folder) with --tokenizer, or a run config (an Axolotl YAML, a
    tuneproof recipe) whose own datasets, tokenizer and options are read. Findings: all-zero assistant
    masks, answers truncated away, an EOS that never trains, pad == eos under a collator that masks it,
    tokens past the embedding rows. Exit 0 clean, 1 findings, 2 bad input, 3 nothing modelled."""
    from tuneproof.commands.tokens import TokensSpec, prepare, run
    from tuneproof.labels.rules import LabelRules

    if source.suffix.lower() in (".yml", ".yaml", ".toml"):
        _run_config_alone(click.get_current_context())
    roles = tuple(r.strip() for r in roles_to_train.split(","))
    if not all(roles):
        raise click.BadParameter("an empty role name", param_hint="--roles-to-train")
    only = {"auto": None, "true": True, "false": False}[completion_only_loss]
    rules = LabelRules(
        trainer=trainer, max_length=max_length, truncation_mode=truncation_mode,
        assistant_only_loss=assistant_only_loss, completion_only_loss=only, packing=packing,
        text_field=text_field, train_on_inputs=train_on_inputs, roles_to_train=roles,
        train_on_eos=train_on_eos, dataset_type=dataset_type, field_messages=field_messages,
    )  # fmt: skip
    spec = TokensSpec(source=source, tokenizer=tokenizer, rules=rules, limit=limit)
    plan = prepare(spec)
    with terminal_progress() as update:
        result = run(plan, update)
    return finish(result, json_out)


def _run_config_alone(ctx: click.Context) -> None:
    """A run config brings its own tokenizer and trainer options: any of them given too is refused,
    by name (a default would otherwise look like a choice)."""
    from click.core import ParameterSource

    given = [
        p.opts[0] for p in ctx.command.params
        if isinstance(p, click.Option) and p.name not in ("limit", "json_out")
        and ctx.get_parameter_source(p.name or "") == ParameterSource.COMMANDLINE
    ]  # fmt: skip
    if given:
        raise click.UsageError(
            f"{', '.join(given)}: a run config gives its own tokenizer and trainer options; drop "
            f"{'it' if len(given) == 1 else 'them'}, or pass the dataset itself", ctx=ctx,
        )  # fmt: skip
