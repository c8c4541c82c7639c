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
    with pytest.raises(ValueError, match="synth_rewards.learnability=effect needs a domain with a factor space"):
        check_effect_feedback(no_space, load_config("arith", overrides=["synth_rewards.learnability=effect"]))
    with pytest.raises(ValueError, match="evosyn.designer_settings.effect=true"):
        check_effect_feedback(no_space, load_config("arith", overrides=["evosyn.designer_settings.effect=true"]))
    check_effect_feedback(no_space, load_config("arith"))  # nothing asked of it


def test_silent_endpoints_are_checked_at_once_each_named() -> None:
    """Two hosts that accept connections and never answer: both fields named in one error, within about one check's
    deadline (8 s), not one per endpoint."""
    import socket
    import time

    from synco.config import ConfigError
    from synco.run.setup import check_endpoints

    silent = [socket.socket() for _ in range(2)]
    try:
        for s in silent:
            s.bind(("127.0.0.1", 0))
            s.listen(8)  # the kernel accepts the connection; nobody ever reads or answers
        a, b = (f"http://127.0.0.1:{s.getsockname()[1]}/v1" for s in silent)
        cfg = load_config("arith", overrides=[
            "mode=frozen", "synthesizer.rollout_engine=served", f"synthesizer.served.base_url={a}",
            "synthesizer.served.model=m", "synthesizer.served.endpoint=chat", "reasoner.rollout_engine=served",
            f"reasoner.served.base_url={b}", "reasoner.served.model=m", "reasoner.lora.rank=8",
            "reasoner.lora.alpha=16", "reasoner.lora.target_modules=[q_proj,v_proj]"])
        t = time.monotonic()
        with pytest.raises(ConfigError) as err:
            check_endpoints(cfg)
        took = time.monotonic() - t
    finally:
        for s in silent:
            s.close()
    assert "synthesizer.served.base_url" in str(err.value) and "reasoner.served.base_url" in str(err.value)
    assert took < 14, took  # one after the other: 16 s or more
