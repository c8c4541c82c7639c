"""bench/gpu_smoke.py's smollm2-arith path, at toy size on CPU: a weightless model folder (config + tokenizer, what
``--export-frame`` writes for a device) is rebuilt with random weights and run through the preset's training."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "bench" / "gpu_smoke.py"
_spec = importlib.util.spec_from_file_location("gpu_smoke_bench", _PATH)
assert _spec is not None and _spec.loader is not None
smoke = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = smoke
_spec.loader.exec_module(smoke)


@pytest.mark.slow
def test_smollm2_arith_preset_runs_from_a_weightless_frame(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    frame = tmp_path / "frame"
    assert smoke.main(["--reasoner", "builtin:arith/reasoner", "--export-frame", str(frame)]) == 0
    assert (frame / "config.json").is_file() and (frame / "tokenizer.json").is_file()
    assert not list(frame.glob("*.safetensors"))
    argv = ["--preset", "smollm2-arith", "--device", "cpu", "--dtype", "float32", "--reasoner", str(frame),
            "--steps", "1", "--cards", "4", "--k", "2", "--out", str(tmp_path / "run")]
    assert smoke.main(argv) == 0
    out = capsys.readouterr().out
    assert "architecture with random weights" in out
    assert (tmp_path / "run" / "runs" / "smoke" / "metrics.jsonl").read_text().count("\n") == 1
    cfg = (tmp_path / "run" / "runs" / "smoke" / "config.yaml").read_text()
    assert "domain: arith-chat" in cfg and str(tmp_path / "run" / "models" / "reasoner") in cfg


def test_a_folder_without_weights_or_config_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="neither weights nor a config.json"):
        smoke.reasoner_weights(str(tmp_path), tmp_path / "models")


def test_rollout_engine_vllm_is_refused_in_one_line_where_vllm_is_missing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError, whatever is installed
    assert smoke.main(["--rollout-engine", "vllm", "--device", "cpu", "--out", str(tmp_path / "run")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert "--rollout-engine vllm needs vLLM" in err and "--rollout-engine hf" in err
    assert not (tmp_path / "run").exists()  # refused before anything was built
