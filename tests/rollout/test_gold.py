"""Gold episodes: a verified card's gold trajectory replayed through the episode loop, with the ids a rollout has."""

from __future__ import annotations

import json
import random

import pytest
import torch

from synco.core.episodes import EpisodeLimits
from synco.core.policy import PolicyConfig
from synco.core.records import TaskCard
from synco.domains.tools import ToolsDomain
from synco.domains.tools.settings import ToolsSettings
from synco.learn.charlm import char_tokenizer, tiny_llama
from synco.learn.hf_policy import HFPolicy
from synco.domains.tools.tasks import task_of_instruction
from synco.domains.tools.warm_start import gold_segments
from synco.learn.pretrain import segment_ids
from synco.rollout.gold import gold_episodes

torch.set_num_threads(1)

LIMITS = EpisodeLimits(8, 400)


@pytest.fixture(scope="module")
def policy() -> HFPolicy:
    tok = char_tokenizer()
    return HFPolicy(tiny_llama(tok, seed=0, hidden_size=16, num_layers=1, max_positions=768), tok,
                    PolicyConfig(model_path="tiny", device="cpu", add_bos=False))


def cards(domain: ToolsDomain, n: int, seed: int = 0) -> list[TaskCard]:
    return [TaskCard(**json.loads(text)) for text in domain.static_cards(random.Random(seed), n)]


def test_a_gold_episode_has_the_ids_the_warm_start_trains_on_and_passes_its_grade(policy: HFPolicy) -> None:
    """Replayed through run_episodes, each card's gold episode is graded correct, its agent turns are mask 1 and the
    observations mask 0, and its ids after the prompt are exactly those of the warm start's gold rows (built from
    the same task by another path: segments encoded directly), so what a round trains is what the agent sees."""
    domain = ToolsDomain()
    batch = cards(domain, 40)
    refs = [domain.oracle(c) for c in batch]
    episodes = gold_episodes(policy, domain, batch, refs, LIMITS)
    assert all(ep is not None for ep in episodes)
    for card, ep in zip(batch, episodes):
        assert ep is not None and ep.finish == "done" and ep.grade is not None and ep.grade.correct
        solved = task_of_instruction(domain.db, card.payload.prompt_text())
        assert solved is not None
        ids, mask = segment_ids(policy.tokenizer, gold_segments(domain, solved[1])[1:])
        assert ep.completion_ids == ids and ep.mask == mask
        agent = [t for t in ep.turns if t.role == "agent"]
        assert len(agent) == len(domain.gold_actions(card)) + 1 and agent[-1].text.startswith("done(")
        assert ep.prompt_ids == policy.encode_prompt(policy.format_prompt(domain.reasoner_prompt(card.payload.prompt_text())))


def test_a_card_without_a_passing_gold_episode_gives_none(policy: HFPolicy) -> None:
    """Unparsable actions, wrong outputs (the grade fails) or a budget the episode does not fit: None, never a crash."""
    domain = ToolsDomain()
    [card] = cards(domain, 1, seed=3)
    ref = domain.oracle(card)
    broken = card.with_fields(solution="[not an action list")
    out = gold_episodes(policy, domain, [card, broken, card], [ref, ref, '["999"]'], LIMITS)
    assert out[0] is not None and out[1] is None and out[2] is None
    assert gold_episodes(policy, domain, [card], [ref], EpisodeLimits(8, 5)) == [None]  # no room for one call


def test_on_database_variants_the_gold_episode_is_the_variants_task(policy: HFPolicy) -> None:
    """With tools.db_variants the environment of attempt 0 may be a variant, where the gold is the instruction
    re-solved there: the replayed turns follow it, so every gold episode still passes."""
    domain = ToolsDomain(ToolsSettings(db_variants=4))
    batch = cards(domain, 30, seed=5)
    episodes = gold_episodes(policy, domain, batch, [domain.oracle(c) for c in batch], LIMITS)
    assert all(ep is not None and ep.grade is not None and ep.grade.correct for ep in episodes)
    assert any(ep is not None and ep.grade is not None and ep.grade.info["db_variant"] != "0" for ep in episodes)
