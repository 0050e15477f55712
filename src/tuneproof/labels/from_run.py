"""The label rules of one dataset of a run: an Axolotl config's (its train_on_inputs, the dataset's
type, roles_to_train, train_on_eos and train_on_eot, eot_tokens, excess_length_strategy, sequence_len),
or a tuneproof recipe's (its chat rows through TRL's SFTTrainer with data.assistant_only_loss, no
packing; its text rows tokenised with an EOS appended, labels by position, as TRL's)."""

from __future__ import annotations

from tuneproof.labels.rules import LabelRules
from tuneproof.runs.run import DatasetRef, Run

AXOLOTL_TYPES = ("chat_template", "completion")


def rules_for(run: Run, ds: DatasetRef) -> tuple[LabelRules | None, str | None]:
    """(the rules, None), or (None, why this dataset's labels are not modelled)."""
    o = run.labels
    if o.trainer == "trl":
        rules = LabelRules(
            trainer="trl", max_length=run.seq_len, assistant_only_loss=o.assistant_only_loss,
            text_field=ds.field or "text",
        )  # fmt: skip
        return rules, None
    kind = ds.kind
    if kind not in AXOLOTL_TYPES:
        return None, f"Axolotl's {kind} prompt format is not modelled here (chat_template and completion are)"
    if kind == "chat_template" and o.chat_template is not None:
        return None, f"chat_template {o.chat_template}: Axolotl's own named template is not read here"
    rules = LabelRules(
        trainer="axolotl", max_length=run.seq_len, train_on_inputs=o.train_on_inputs,
        roles_to_train=ds.roles_to_train if ds.roles_to_train is not None else ("assistant",),
        train_on_eos=ds.train_on_eos or "turn", train_on_eot=ds.train_on_eot, eot_tokens=o.eot_tokens,
        excess_length=o.excess_length, dataset_type=kind, field_messages=ds.field or "messages",
        message_keys=ds.message_keys,
        text_field=ds.field or "text",
    )  # fmt: skip
    return rules, None
