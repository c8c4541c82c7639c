"""A one-step τ² smoke run is pinned (τ²'s own mock domain, solo, its training tasks as a static corpus, a tiny
random char model as both agents): pool rows (episodes, their ids and τ²'s rewards) and metrics must not move in a
refactor (see ``pins.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from synco.learn.charlm import char_tokenizer, tiny_llama

from pins import check_pin

pytest.importorskip("tau2")

COMMAND = ("synco train --preset tau2-smollm2 steps=1 mode=static n_cards=4 k=2 seed=0 heldout_per_group=0 "
           "threads=1 reasoner.sampling.max_new_tokens=16 max_turns=2 max_episode_tokens=200 synth_decoding=free "
           "synthesizer.model_path=TINY reasoner.model_path=TINY")


@pytest.mark.slow
def test_tau2_smoke_run_records_the_pinned_numbers(tmp_path: Path) -> None:
    tiny = tmp_path / "tiny"
    tok = char_tokenizer()
    tiny_llama(tok, seed=1, hidden_size=32, num_layers=1, max_positions=4096).save_pretrained(tiny)
    tok.save_pretrained(tiny)
    argv = COMMAND.replace("TINY", str(tiny)).split()[1:] + [f"runs_dir={tmp_path}", "run_id=pin", "progress=false",
                                                              "tensorboard=false"]
    diffs = check_pin("tau2_run_pinned", COMMAND, argv, tmp_path / "pin")
    assert diffs == [], "\n".join(diffs[:20])
