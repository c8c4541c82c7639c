"""The ``protocol`` setting and its sections: defaults, the mode each protocol runs, errors that name the field.

(Named ``test_protocol_config`` because ``tests/test_config.py`` exists: test files need distinct names.)
"""

from __future__ import annotations

import pytest

from synco.cli import main
from synco.config import ConfigError, load_config


def test_default_is_online_and_rft_runs_the_fixed_corpus() -> None:
    cfg = load_config("arith")
    assert (cfg.protocol, cfg.mode) == ("online", "cotrain")
    rft = load_config("arith", overrides=["protocol=rft"])
    assert (rft.protocol, rft.mode) == ("rft", "static")  # the config written to the run says so
    assert load_config("arith", overrides=["protocol=rounds", "mode=frozen"]).mode == "frozen"  # EvoSyn's setting


@pytest.mark.parametrize(("overrides", "names"), [
    (["protocol=evosyn"], ["protocol", "'evosyn'"]),
    (["rounds.steps_per_round=0"], ["rounds.steps_per_round", "0"]),
    (["rounds.update=ppo"], ["rounds.update", "'ppo'"]),
    (["rounds.target=answers"], ["rounds.target", "'answers'"]),
    (["rounds.lr=-1"], ["rounds.lr", "-1"]),
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
