"""A co-training step on τ²'s own environment (``domain: tau2``, the mock domain, solo): episodes of tool calls
parsed from the agent's text, observations as chat tool messages with loss mask 0, rewards from τ²'s evaluator,
all in the pool."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from synco.config import load_config
from synco.cotrain.engine import cotrain_step
from synco.learn.charlm import char_tokenizer, tiny_llama
from synco.run.setup import setup_run

pytest.importorskip("tau2")
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny_agents(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One random tiny char model (both agents): the policy and tool schemas make a ~2.5k-character prompt."""
    root = tmp_path_factory.mktemp("models") / "tiny"
    tok = char_tokenizer()
    model = tiny_llama(tok, seed=1, hidden_size=32, num_layers=1, max_positions=4096)
    model.save_pretrained(root)
    tok.save_pretrained(root)
    return root


def test_a_tau2_step_records_episodes_with_tau2_rewards(tmp_path: Path, tiny_agents: Path) -> None:
    cfg = load_config("tau2-smollm2", overrides=[
        "mode=static", "n_cards=2", "k=2", "seed=0", f"runs_dir={tmp_path}", "run_id=t", "heldout_per_group=0",
        "tensorboard=false", "progress=false", "threads=1", f"synthesizer.model_path={tiny_agents}",
        f"reasoner.model_path={tiny_agents}", "reasoner.sampling.max_new_tokens=16", "max_turns=2",
        "max_episode_tokens=200", "synth_decoding=free"])
    run = setup_run(cfg)
    stats = cotrain_step(run.state, 0)
    records = run.state.pool.by_step(0, token_ids=True)
    # τ²'s own training tasks verify (mock has 4 in a solo run, two of them near-copies: duplicate_in_step)
    assert all(r.verdict.valid or r.verdict.reasons[0].startswith("duplicate") for r in records)
    assert stats.n_valid >= 1 and sum((stats.episodes.finishes or {}).values()) == stats.n_valid * 2
    rollouts = [ro for rec in records for ro in rec.rollouts]
    assert len(rollouts) == stats.n_valid * 2
    for ro in rollouts:
        assert ro.turns is not None and ro.turns[0].role == "agent"
        assert ro.loss_mask is not None and ro.completion_ids is not None
        assert len(ro.loss_mask) == len(ro.completion_ids) and ro.n_tokens == sum(ro.loss_mask)
        assert ro.reward_parts is not None and "stop" in ro.reward_parts  # τ²'s evaluator's parts + the stop
        assert ro.episode_info is not None and ro.episode_info["user"] == "solo"
        assert ro.reward == 0.0  # a random model solves nothing
    env_turns = [t for ro in rollouts for t in ro.turns or [] if t.role == "env"]
    from synco.domains.tau2.calls import CALL_PREFIX

    # a tool message (no chat template: a plain label), then the next call's prefilled opening (tool_choice: required)
    assert env_turns and all(t.text.startswith("\ntool: ") and t.text.endswith(CALL_PREFIX) for t in env_turns)
    assert all(ro.turns[0].tool_call is not None or ro.reward_parts.get("stop") == 0.0 for ro in rollouts)


def test_a_tau2_cards_gold_episode_replays_and_passes_tau2s_grade(tmp_path: Path, tiny_agents: Path) -> None:
    """τ² has replayable gold episodes (HasGoldTurns: τ²'s gold agent's script), so EvoSyn's SFT on verified
    trajectories (rounds.target=reference) runs there: each verified task's gold episode passes τ²'s own evaluator,
    its observations in the ids with mask 0."""
    from synco.core.episodes import EpisodeLimits
    from synco.domains.base import HasGoldTurns
    from synco.rollout.gold import gold_episodes

    cfg = load_config("tau2-smollm2", overrides=[
        "mode=static", "n_cards=4", "k=1", "seed=0", f"runs_dir={tmp_path}", "run_id=g", "heldout_per_group=0",
        "tensorboard=false", "progress=false", "threads=1", f"synthesizer.model_path={tiny_agents}",
        f"reasoner.model_path={tiny_agents}", "reasoner.sampling.max_new_tokens=8", "max_turns=1",
        "max_episode_tokens=64", "synth_decoding=free", "protocol=rft", "rounds.target=reference"])
    run = setup_run(cfg)
    assert isinstance(run.state.domain, HasGoldTurns)
    cotrain_step(run.state, 0)
    valid = [r for r in run.state.pool.by_step(0) if r.valid and r.card is not None]
    assert valid
    episodes = gold_episodes(run.state.reasoner, run.state.domain, [r.card for r in valid],  # type: ignore[misc]
                             [r.verdict.reference or "" for r in valid], EpisodeLimits(12, 4000))
    assert all(ep is not None and ep.grade is not None and ep.grade.correct for ep in episodes)
    assert all(0 in ep.mask and 1 in ep.mask for ep in episodes if ep is not None)
