"""The Axolotl plugin's `tuneproof_*` config keys, as the pydantic model Axolotl mixes into its
config schema (`TuneproofPlugin.get_input_args`). Without it Axolotl's validation drops these keys:
its schema ignores unknown fields.

Imported by Axolotl alone (through the dotted name), so pydantic is Axolotl's, never tuneproof's.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, model_validator


class TuneproofArgs(BaseModel):
    """Input args for tuneproof's Axolotl plugin."""

    tuneproof_bucketing: bool | None = Field(
        default=None,
        json_schema_extra={"description": "batch with tuneproof's BucketBatchSampler (length buckets)"},
    )
    tuneproof_preflight: bool | None = Field(
        default=None,
        json_schema_extra={"description": "log tuneproof's pre-flight of this config at start (default on)"},
    )
    tuneproof_gpu: str | None = Field(
        default=None,
        json_schema_extra={"description": "GPU name for the peak behind MFU (default: the device's own)"},
    )
    tuneproof_peak_tflops: float | None = Field(
        default=None,
        gt=0,
        json_schema_extra={"description": "peak TFLOP/s behind MFU, for a device the GPU table lacks"},
    )

    @model_validator(mode="before")
    @classmethod
    def _bucketing_needs_unpadded_batches(cls, data: Any) -> Any:
        """Bucketing pads each micro-batch to its own longest row; packing builds its own batches and
        `pad_to_sequence_len` pads every batch to the full width, so with either it would change
        nothing (or fight the packing sampler): refused, naming the keys."""
        if isinstance(data, dict) and data.get("tuneproof_bucketing"):
            for key in ("sample_packing", "pad_to_sequence_len"):
                if data.get(key):
                    raise ValueError(
                        f"tuneproof_bucketing has no effect with {key}: true; set one of them to false"
                    )
        return data
