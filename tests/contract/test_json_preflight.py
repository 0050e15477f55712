"""The library and the command tell one story for preflight: the library result's `to_dict()` is
exactly what `tuneproof preflight --json` prints."""

from __future__ import annotations

import json
from pathlib import Path

from tuneproof.cli.app import main
from tuneproof.core.io import dumps


def test_preflight_json_is_the_library_result(tmp_path: Path, capsys) -> None:
    from tuneproof.commands.preflight import PreflightSpec, prepare, run

    cfg = tmp_path / "run.yml"
    cfg.write_text(
        "base_model: tiny\nsequence_len: 256\nmicro_batch_size: 2\nadapter: lora\nlora_target_linear: true\n"
    )
    assert main(["preflight", str(cfg), "--gpu", "H100", "--json"]) in (0, 1)
    printed = json.loads(capsys.readouterr().out)
    result = run(prepare(PreflightSpec(run_file=cfg, gpu="H100")))
    assert json.loads(dumps(result.to_dict())) == printed
    assert printed["sections"]["flops"]["width"] == 256 and printed["sections"]["flops"]["rows"] == 2
