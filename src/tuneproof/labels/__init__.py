"""The tokens that train: the labels a trainer builds from a dataset (TRL's SFTTrainer, transformers'
Trainer with its language-modelling collator, Axolotl's chat_template and completion datasets), counted
per example and judged: truncated-away answers, all-zero assistant masks, an EOS that never trains,
pad == eos under a collator that masks it, tokens past the embedding rows. `report.check` is the entry."""
