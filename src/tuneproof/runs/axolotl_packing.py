"""Does `sample_packing` keep a packed row's documents apart? Axolotl 0.19's rule, read from its source
(the axolotl-0.19.0 wheel):

- `utils/schemas/enums.py` `ATTN_IMPLS_SUPPORTING_PACKING` (line 142): the backends that take packed rows
  by `position_ids` (varlen); `attn_impl_base` strips a hub kernel's `@revision` / `:kernel` first.
- `utils/schemas/config.py` `attn_decontaminates_packing` (line 1506): those backends, or exactly `sdpa`
  or `eager`, "isolate packed docs via the dropped-mask block-diagonal; others can't".
- `core/builders/causal.py` (line 275): `sample_packing_drop_attention_mask = attn_decontaminates_packing`;
  only then does the trainer drop the collator's `attention_mask`, so transformers rebuilds a per-document
  mask from the restarting `position_ids`.
- `utils/collators/batching.py` `V2BatchSamplerDataCollatorForSeq2Seq` (line 176) numbers the documents of
  a row `1, 2, 3` in that `attention_mask` (0 for padding; `BatchSamplerDataCollatorForSeq2Seq` leaves
  them all 1); only Axolotl's patched `get_unpad_data` (`monkeypatch/multipack.py`, remote-code models on a
  packing backend) reads the numbers.
- `utils/schemas/validation.py` `check_sample_packing_without_attention` (line 189) warns for every other
  config: the two warnings in `AXOLOTL_WARNINGS`.

Where the mask is kept, transformers 5.24 casts it to bool and looks for packed sequences in
`position_ids` only when no 2-D mask is given (`masking_utils._preprocess_mask_arguments`): each row
gets one causal mask across all of its documents.
"""

from __future__ import annotations

from dataclasses import dataclass

from tuneproof.runs.run import PACKS_ROWS, Run, attn_base

# Axolotl 0.19 attn_decontaminates_packing: these drop the mask too (compared as written, no suffix strip)
AXOLOTL_MASK_DROPPED_ATTN = ("sdpa", "eager")
AXOLOTL_WARNINGS = {  # validation.py check_sample_packing_without_attention: no backend set / one set
    "unset": "`sample_packing` without an attention backend does not handle cross-sample decontamination",
    "set": "`sample_packing` with `attn_implementation={attn!r}` does not handle "
    "cross-sample decontamination",
}
FIX = (
    "flash_attention: true (attn_implementation: flash_attention_2) or flex_attention: true, which take "
    "packed rows by position_ids; sdp_attention: true, for which Axolotl drops the mask and transformers "
    "builds the per-document mask; or sample_packing: false"
)


@dataclass(kw_only=True, frozen=True, slots=True)
class PackingIsolation:
    """Whether Axolotl keeps the documents of a packed row apart, and why; `warning` is Axolotl's own
    warning when it does not (None when it does)."""

    isolated: bool
    reason: str
    warning: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {"isolated": self.isolated, "reason": self.reason, "axolotl_warning": self.warning}


def packing_isolation(run: Run) -> PackingIsolation | None:
    """Axolotl 0.19's verdict on an Axolotl run with `sample_packing`; None for a run that does not pack
    (or is not Axolotl's: a tuneproof recipe never packs)."""
    if run.kind != "axolotl" or not run.packing:
        return None
    attn = run.attn
    if attn is not None and attn_base(attn) in PACKS_ROWS:
        return PackingIsolation(
            isolated=True,
            reason=f"{attn} takes packed rows by position_ids (Axolotl 0.19 ATTN_IMPLS_SUPPORTING_PACKING): "
            "the collator's attention_mask is dropped and each document attends to itself only",
        )
    if attn in AXOLOTL_MASK_DROPPED_ATTN:
        return PackingIsolation(
            isolated=True,
            reason=f"{attn}: Axolotl 0.19 drops the collator's attention_mask "
            "(sample_packing_drop_attention_mask) and transformers builds a per-document mask from the "
            "restarting position_ids",
        )
    backend = (
        "no attention option, so the model loads with transformers' default, sdpa"
        if attn is None
        else f"attn_implementation {attn}, not one Axolotl 0.19 packs for"
    )
    warning = AXOLOTL_WARNINGS["unset"] if attn is None else AXOLOTL_WARNINGS["set"].format(attn=attn)
    return PackingIsolation(
        isolated=False,
        reason=f"{backend}: Axolotl keeps the multipack collator's attention_mask (a row's documents "
        "numbered 1, 2, 3, 0 for padding: ids only Axolotl's patched flash path reads); transformers casts "
        "it to bool and, a 2-D mask being given, skips find_packed_sequence_indices: one causal mask across "
        "the row's documents",
        warning=warning,
    )


def contamination_finding(iso: PackingIsolation) -> str:
    """The finding for a run whose packed documents attend to each other."""
    assert not iso.isolated and iso.warning is not None
    return (
        "attention: sample_packing: the documents packed into a row attend to each other (cross-sample "
        f"contamination): {iso.reason}. Axolotl warns the same ('{iso.warning}', utils/schemas/"
        f"validation.py check_sample_packing_without_attention). Fix: {FIX}"
    )
