"""Pre-flight's parts: what a run's own config (an Axolotl YAML or a tuneproof recipe, read by
`tuneproof.runs`) will do, section by section (`sections`), its LoRA coverage on the real module tree
(`coverage`) and its batches on local datasets (`batches`); `tuneproof.commands.preflight` is the command."""
