"""Every shipped preset validates; shared_base config checks name the offending field."""

from __future__ import annotations

from importlib import resources

import pytest

from synco.config import PRESETS, ConfigError, load_config

PRESET_FILES = sorted(f.name[: -len(".yaml")] for f in (resources.files("synco") / "presets").iterdir()
                      if f.name.endswith(".yaml"))


def test_every_preset_file_is_registered() -> None:
    assert set(PRESET_FILES) == set(PRESETS)


@pytest.mark.parametrize("name", PRESET_FILES)
def test_every_preset_validates(name: str) -> None:
    cfg = load_config(name)
    if cfg.shared_base:
        assert cfg.synthesizer.model_path == cfg.reasoner.model_path
        assert cfg.synthesizer.lora is not None and cfg.synthesizer.lora == cfg.reasoner.lora


def test_paper_1gpu_is_paper_with_shared_base_lora() -> None:
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
def test_shared_base_mismatch_names_the_field(override: str, field: str) -> None:
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
