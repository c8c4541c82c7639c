"""Every shipped preset validates; shared_base config checks name the offending field; the paper presets
screen against `synco data`'s benchmark folder: describing them works without it, running them fails clearly."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from synco.config import PRESETS, ConfigError, check_runnable, load_config, run_input_problems

PRESET_FILES = sorted(f.name[: -len(".yaml")] for f in (resources.files("synco") / "presets").iterdir()
                      if f.name.endswith(".yaml"))


PAPER_PRESETS = ("paper", "paper-1gpu")


@pytest.fixture()
def with_benchmarks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The current folder holds data/benchmarks/gsm8k/test.jsonl, as `synco data` leaves it."""
    path = tmp_path / "data" / "benchmarks" / "gsm8k" / "test.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"id": "g1", "question": "Tom has 3 apples and buys 4 more. How many now?",
                                "answer": "7"}) + "\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return path.parent.parent


def test_every_preset_file_is_registered() -> None:
    assert set(PRESET_FILES) == set(PRESETS)


@pytest.mark.parametrize("name", PRESET_FILES)
def test_every_preset_validates(name: str, with_benchmarks: Path) -> None:
    cfg = load_config(name)
    if cfg.shared_base:
        assert cfg.synthesizer.model_path == cfg.reasoner.model_path
        assert cfg.synthesizer.lora is not None and cfg.synthesizer.lora == cfg.reasoner.lora


def test_paper_1gpu_is_paper_with_shared_base_lora(with_benchmarks: Path) -> None:
    paper, one = load_config("paper"), load_config("paper-1gpu")
    assert not paper.shared_base and one.shared_base
    for role in ("synthesizer", "reasoner"):
        lora = getattr(one, role).lora
        assert lora is not None and (lora.rank, lora.alpha, lora.target_modules) == (64, 128.0, "all-linear")
        assert getattr(one, role).model_path == getattr(paper, role).model_path
        assert getattr(one, role).sampling == getattr(paper, role).sampling
    assert (one.domain, one.mode, one.steps, one.n_cards, one.k) == (paper.domain, paper.mode, paper.steps, paper.n_cards, paper.k)


@pytest.mark.parametrize("override,field", [
    ("reasoner.model_path=other", "reasoner.model_path"),
    ("reasoner.lora.rank=8", "reasoner.lora.rank"),
    ("reasoner.lora.target_modules=[q_proj]", "reasoner.lora.target_modules"),
    ("reasoner.dtype=float32", "reasoner.dtype"),
    ("reasoner.lora=null", "reasoner.lora"),
])
def test_shared_base_mismatch_names_the_field(override: str, field: str, with_benchmarks: Path) -> None:
    with pytest.raises(ConfigError, match="shared_base") as err:
        load_config("paper-1gpu", overrides=[override])
    assert field in str(err.value)


def test_shared_base_is_off_by_default_and_needs_lora() -> None:
    assert load_config("arith").shared_base is False
    with pytest.raises(ConfigError, match="synthesizer.lora is not set"):
        load_config("arith", overrides=["shared_base=true", "reasoner.model_path=builtin:arith/synthesizer"])
    cfg = load_config("arith", overrides=["shared_base=true", "reasoner.model_path=builtin:arith/synthesizer",
                                          "synthesizer.lora.rank=4", "reasoner.lora.rank=4"])
    assert cfg.shared_base and cfg.reasoner.lora is not None and cfg.reasoner.lora.rank == 4


@pytest.mark.parametrize("name", PAPER_PRESETS)
def test_paper_presets_screen_against_the_synco_data_folder(name: str, with_benchmarks: Path) -> None:
    cfg = load_config(name)
    assert cfg.verifier.benchmark_paths == ["data/benchmarks"] and cfg.verifier.reject_contaminated


@pytest.mark.parametrize("name", PAPER_PRESETS)
def test_paper_presets_without_the_data_folder_say_to_run_synco_data(name: str, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = load_config(name)  # describing the config needs no data folder; running it does
    with pytest.raises(ConfigError) as err:
        check_runnable(cfg)
    message = str(err.value)
    assert message.startswith("invalid configuration:\n  verifier.benchmark_paths")
    assert "'data/benchmarks' not found" in message
    assert "synco data --out data/benchmarks" in message and str(tmp_path) in message
    # an empty folder is no better than none
    (tmp_path / "data" / "benchmarks").mkdir(parents=True)
    with pytest.raises(ConfigError, match="holds no test.jsonl"):
        check_runnable(load_config(name))
    # screening can be turned off explicitly
    off = load_config(name, overrides=["verifier.benchmark_paths=[]"])
    assert off.verifier.benchmark_paths == [] and run_input_problems(off) == []


def test_runnable_with_the_data_folder(with_benchmarks: Path) -> None:
    cfg = load_config("paper")
    assert run_input_problems(cfg) == []
    check_runnable(cfg)


def test_the_default_run_configures_no_benchmarks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no data folder: the embedded arith run does not need one
    for name in ("arith", "smollm2"):
        assert load_config(name).verifier.benchmark_paths == []
        check_runnable(load_config(name))
    with pytest.raises(ConfigError, match="verifier.benchmark_paths: 'gone' not found"):
        check_runnable(load_config("arith", overrides=["verifier.benchmark_paths=[gone]"]))


def test_smollm2_arith_is_the_arith_world_with_smollm2_as_reasoner() -> None:
    """Two different models: the shipped tiny char Synthesizer writes arith cards, SmolLM2 answers them in words."""
    cfg = load_config("smollm2-arith")
    assert cfg.domain == "arith-chat" and cfg.mode == "cotrain"
    assert cfg.reasoner.model_path == "smollm2" and cfg.synthesizer.model_path == "builtin:arith/synthesizer"
    assert cfg.reasoner.sampling.max_new_tokens <= 8 and cfg.threads == 1 and not cfg.shared_base
    assert cfg.reasoner_rewards.correct_unboxed == cfg.reasoner_rewards.correct_boxed  # answers are never boxed
