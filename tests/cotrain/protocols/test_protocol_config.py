"""The ``protocol`` setting and its sections: defaults, the mode each protocol runs, errors that name the field.

(Named ``test_protocol_config`` because ``tests/test_config.py`` exists: test files need distinct names.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from synco.cli import main
from synco.config import ConfigError, load_config
from synco.cotrain.protocols.config import SFT_LR, RoundsConfig
from synco.cotrain.protocols.registry import build_protocol


def test_default_is_online_and_rft_runs_the_fixed_corpus() -> None:
    cfg = load_config("arith")
    assert (cfg.protocol, cfg.mode) == ("online", "cotrain")
    rft = load_config("arith", overrides=["protocol=rft"])
    assert (rft.protocol, rft.mode, rft.run_mode) == ("rft", "cotrain", "static")  # mode is read, never rewritten
    assert load_config("arith", overrides=["protocol=rft", "mode=static"]).run_mode == "static"
    rounds = load_config("arith", overrides=["protocol=rounds", "mode=frozen"])  # EvoSyn's setting
    assert (rounds.mode, rounds.run_mode) == ("frozen", "frozen")


@pytest.mark.parametrize(("overrides", "names"), [
    (["protocol=evosyn"], ["protocol", "'evosyn'"]),
    (["rounds.steps_per_round=0"], ["rounds.steps_per_round", "0"]),
    (["rounds.update=ppo"], ["rounds.update", "'ppo'"]),
    (["rounds.target=answers"], ["rounds.target", "'answers'"]),
    (["rounds.lr=-1"], ["rounds.lr", "-1"]),
    (["rounds.sft_lr=0"], ["rounds.sft_lr", "0"]),
    (["rounds.update=grpo", "rounds.lr=0.01"], ["rounds.lr=0.01", "rounds.update=sft"]),
    (["rounds.epochs=2.5"], ["rounds.epochs"]),
    (["rounds.shuffle=true"], ["rounds.shuffle"]),
    (["alternating.phase_steps=0"], ["alternating.phase_steps", "0"]),
    (["alternating.first=checker"], ["alternating.first", "'checker'"]),
    (["protocol=alternating", "mode=frozen"], ["protocol=alternating", "mode='frozen'"]),
    (["protocol=rft", "mode=uniform"], ["protocol=rft", "mode='uniform'"]),
])
def test_a_bad_protocol_config_names_the_field(overrides: list[str], names: list[str]) -> None:
    with pytest.raises(ConfigError) as err:
        load_config("arith", overrides=overrides)
    for name in names:
        assert name in str(err.value)


def test_cli_says_which_field(tmp_path, capsys) -> None:  # noqa: ANN001
    assert main(["train", f"runs_dir={tmp_path}", "protocol=alternating", "alternating.phase_steps=-2"]) == 2
    err = capsys.readouterr().err
    assert "alternating.phase_steps" in err and "-2" in err
    assert not any(tmp_path.iterdir())  # nothing was started


# --------------------------------------------------------------------------- the supervised learning rate


def test_the_sft_rate_is_its_own_setting_not_the_grpo_rate() -> None:
    assert RoundsConfig().sft_lr == SFT_LR == 1e-5  # the default: a supervised fine-tuning rate
    assert load_config(None).rounds.sft_lr == SFT_LR  # no preset: the default
    arith = load_config("arith")
    assert arith.rounds.sft_lr == 5e-5  # the preset's own (the rate the README's protocol tables ran at)
    wider = load_config("arith", overrides=["reasoner.grpo.lr=1e-3"])
    assert wider.rounds.sft_lr == 5e-5  # changing the GRPO rate leaves it alone
    assert load_config("paper").rounds.sft_lr == SFT_LR
    assert load_config("paper-1gpu").rounds.sft_lr == 1e-4  # LoRA: ten times the full-weight rate
    assert load_config("arith", overrides=["rounds.sft_lr=null"]).rounds.sft_lr is None  # the GRPO rate, opt-in


def test_rounds_lr_still_sets_the_sft_rate_in_every_layer(tmp_path: Path) -> None:
    assert RoundsConfig(lr=0.01).sft_lr == 0.01  # the former name, in code
    assert RoundsConfig.model_validate({"lr": None}).sft_lr is None  # lr: null meant the GRPO rate: it still does
    over = load_config("arith", overrides=["rounds.lr=1e-4"])  # an override wins over the preset's sft_lr
    assert over.rounds.sft_lr == 1e-4 and "lr" not in over.rounds.model_dump()
    old = tmp_path / "old.yaml"
    old.write_text("rounds:\n  lr: 0.002\n  steps_per_round: 3\n")
    from_file = load_config("arith", path=old)  # a config file of an older release wins over the preset too
    assert (from_file.rounds.sft_lr, from_file.rounds.steps_per_round) == (0.002, 3)
    assert load_config("arith", path=old, overrides=["rounds.sft_lr=0.003"]).rounds.sft_lr == 0.003  # later wins
    both = tmp_path / "both.yaml"
    both.write_text("rounds: {lr: 0.002, sft_lr: 0.003}\n")
    with pytest.raises(ConfigError, match=r"both.yaml: rounds.lr=0.002 is the old name of rounds.sft_lr=0.003"):
        load_config("arith", path=both)


def test_a_checkpoint_that_saved_rounds_lr_resumes_with_the_same_rate() -> None:
    cfg = load_config("arith", overrides=["protocol=rounds", "rounds.lr=0.001"])
    saved = build_protocol(cfg).checkpoint(0)
    legacy = {k: v for k, v in saved["settings"]["rounds"].items() if k != "sft_lr"} | {"lr": 0.001}
    before = {**saved, "settings": {"rounds": legacy}}  # what an older release wrote into its checkpoint
    assert build_protocol(cfg).resume_problem(before) is None
    other = load_config("arith", overrides=["protocol=rounds", "rounds.sft_lr=0.002"])
    assert "rounds.sft_lr=0.002 (was 0.001)" in (build_protocol(other).resume_problem(before) or "")
    grpo_rate = {**saved, "settings": {"rounds": {**legacy, "lr": None}}}  # lr: null, the GRPO rate
    null = load_config("arith", overrides=["protocol=rounds", "rounds.sft_lr=null"])
    assert build_protocol(null).resume_problem(grpo_rate) is None
