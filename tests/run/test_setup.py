"""Checks ``setup_run`` makes before any model loads."""

from __future__ import annotations

import pytest

from synco.config import load_config
from synco.run.setup import check_effect_feedback


def test_learning_effect_feedback_needs_a_factor_space() -> None:
    """A domain without factor cells cannot measure a cell's learning effect: the field is named."""
    no_space = object()
    with pytest.raises(ValueError, match="synth_rewards.learnability=progress needs a domain with a factor space"):
        check_effect_feedback(no_space, load_config("arith", overrides=["synth_rewards.learnability=progress"]))
    with pytest.raises(ValueError, match="evosyn.designer_settings.effect=true"):
        check_effect_feedback(no_space, load_config("arith", overrides=["evosyn.designer_settings.effect=true"]))
    check_effect_feedback(no_space, load_config("arith"))  # nothing asked of it
