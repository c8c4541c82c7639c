"""The public GRPO batch builders of a step (``synco.cotrain.engine``), on hand-computed advantages."""

from __future__ import annotations

import pytest

from synco.core.records import Rollout, SynthReward, TaskRecord, Verdict
from synco.core.sampling import Completion
from synco.cotrain.engine import advantages, group_experiences, groups_batch, reasoner_batch, synth_batch


def sample(token: int) -> Completion:
    return Completion(text=str(token), prompt_ids=[1], completion_ids=[token], logprobs=[-0.5], truncated=False,
                      finish_reason="stop")


def test_advantages_scale_by_the_sample_std_or_only_centre() -> None:
    # one of four right: mean 0.25, sample std 0.5 -> (0.75, -0.25) / 0.5 (eps 1e-6 aside)
    assert advantages([1.0, 0.0, 0.0, 0.0], True) == pytest.approx([1.5, -0.5, -0.5, -0.5], rel=1e-5)
    assert advantages([0.5, -0.5], False) == [0.5, -0.5]


def test_a_group_with_equal_rewards_stays_with_advantage_zero_and_a_missing_sample_is_left_out() -> None:
    group = [sample(5), sample(6), sample(7), sample(8)]
    assert [e.advantage for e in group_experiences(group, [0.3] * 4, True)] == [0.0] * 4
    got = group_experiences([sample(5), None, sample(7)], [1.0, 0.0, 0.0], False)
    assert [(e.completion_ids, e.advantage) for e in got] == [([5], pytest.approx(2 / 3)), ([7], pytest.approx(-1 / 3))]
    with pytest.raises(ValueError, match="a group of 2 samples has 3 rewards"):
        group_experiences([sample(5), sample(6)], [1.0, 0.0, 0.0], True)


def test_groups_batch_counts_equal_groups_and_is_empty_when_nothing_is_learnt() -> None:
    batch, skipped = groups_batch([[sample(1), sample(2)], [sample(3), sample(4)]], [[1.0, 1.0], [1.0, 0.0]], False)
    assert skipped == 1 and [(e.completion_ids[0], e.advantage) for e in batch] == [(1, 0.0), (2, 0.0), (3, 0.5),
                                                                                     (4, -0.5)]
    assert groups_batch([[sample(1), sample(2)]], [[0.0, 0.0]], True) == ([], 1)


def record(valid: bool, rewards: list[float], context: int = 0, synth: float = 0.0) -> TaskRecord:
    return TaskRecord(step=0, slot=0, context_id=context, raw="", verdict=Verdict(valid=valid),
                      rollouts=[Rollout(text="", reward=r) for r in rewards], synth_reward=SynthReward(total=synth))


def test_reasoner_batch_leaves_out_a_task_consensus_rejected_after_solving() -> None:
    records = [record(True, [1.0, 0.0]), record(False, [1.0, 0.0]), record(True, [0.0, 0.0])]
    attempts = [[sample(1), sample(2)], [sample(3), sample(4)], [sample(5), sample(6)]]
    batch, skipped = reasoner_batch(records, [0, 1, 2], attempts, False)
    assert skipped == 1 and [(e.completion_ids[0], e.advantage) for e in batch] == [(1, 0.5), (2, -0.5), (5, 0.0),
                                                                                     (6, 0.0)]


def test_synth_batch_groups_the_cards_of_one_context() -> None:
    records = [record(True, [], context=0, synth=1.0), record(True, [], context=1, synth=0.2),
               record(False, [], context=0, synth=-0.5), record(True, [], context=1, synth=0.2)]
    batch, skipped = synth_batch(records, [sample(1), sample(2), sample(3), sample(4)], False)
    # context 0: rewards (1.0, -0.5), mean 0.25; context 1: equal, advantage 0
    assert skipped == 1 and [(e.completion_ids[0], e.advantage) for e in batch] == [(1, 0.75), (3, -0.75), (2, 0.0),
                                                                                     (4, 0.0)]
