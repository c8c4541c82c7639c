"""The GRPO batch builders of a step (``synco.cotrain.batches``), on hand-computed advantages: every row comes
from a record."""

from __future__ import annotations

import pytest

from synco.core.records import Attempt, SynthReward, TaskRecord, Verdict
from synco.core.sampling import Completion
from synco.cotrain.batches import advantages, group_experiences, groups_batch, reasoner_batch, synth_batch, with_control


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


def attempt(token: int, reward: float) -> Attempt:
    return Attempt(text=str(token), reward=reward, prompt_ids=[1], completion_ids=[token], logprobs=[-0.5])


def record(valid: bool, rewards: list[float], context: int = 0, synth: float = 0.0, first: int = 1,
           card: int | None = None) -> TaskRecord:
    return TaskRecord(step=0, slot=0, context_id=context, raw="", verdict=Verdict(valid=valid),
                      rollouts=[attempt(first + i, r) for i, r in enumerate(rewards)], synth_reward=SynthReward(total=synth),
                      sample=None if card is None else sample(card))


def test_reasoner_batch_leaves_out_a_task_consensus_rejected_after_solving() -> None:
    records = [record(True, [1.0, 0.0], first=1), record(False, [1.0, 0.0], first=3), record(True, [0.0, 0.0], first=5)]
    batch, skipped = reasoner_batch(records, False)
    assert skipped == 1 and [(e.completion_ids[0], e.advantage) for e in batch] == [(1, 0.5), (2, -0.5), (5, 0.0),
                                                                                     (6, 0.0)]


def test_synth_batch_groups_the_cards_of_one_context() -> None:
    records = [record(True, [], context=0, synth=1.0, card=1), record(True, [], context=1, synth=0.2, card=2),
               record(False, [], context=0, synth=-0.5, card=3), record(True, [], context=1, synth=0.2, card=4)]
    batch, skipped = synth_batch(records, False)
    # context 0: rewards (1.0, -0.5), mean 0.25; context 1: equal, advantage 0
    assert skipped == 1 and [(e.completion_ids[0], e.advantage) for e in batch] == [(1, 0.75), (3, -0.75), (2, 0.0),
                                                                                     (4, 0.0)]


def test_with_control_adds_the_groups_mean_control_term_back() -> None:
    # two of four cards missed their cell (control -0.3 each): mean -0.15 added to every advantage
    assert with_control([0.5, -0.5, 0.25, -0.25], [-0.3, -0.3, 0.0, 0.0]) == pytest.approx([0.35, -0.65, 0.1, -0.4])
    assert with_control([0.0, 0.0], [0.0, 0.0]) == [0.0, 0.0]
    with pytest.raises(ValueError, match="a group of 2 advantages has 1 control terms"):
        with_control([0.0, 0.0], [0.0])


def test_with_control_is_the_control_term_unbaselined_without_std_scaling() -> None:
    # rewards r = base + control; r_i - mean(r) + mean(c) == base_i - mean(base) + c_i
    base, control = [0.6, 0.2, 0.4], [-0.3, 0.0, -0.3]
    r = [b + c for b, c in zip(base, control)]  # 0.3, 0.2, 0.1: mean 0.2
    got = with_control(advantages(r, False), control)  # (0.1, 0.0, -0.1) - 0.2
    assert got == pytest.approx([0.6 - 0.4 - 0.3, 0.2 - 0.4, 0.4 - 0.4 - 0.3])  # base centred (mean 0.4) + c
    assert got == pytest.approx([-0.1, -0.2, -0.3])


def synth_record(context: int, total: float, control: float, card: int) -> TaskRecord:
    return TaskRecord(step=0, slot=0, context_id=context, raw="", verdict=Verdict(valid=True),
                      synth_reward=SynthReward(total=total, penalty=control, control=control), sample=sample(card))


def test_synth_batch_with_control_absolute_pushes_a_group_that_missed_its_cell_as_a_whole() -> None:
    # context 0: both cards off target, equal rewards 0.2 - 0.3; context 1: on target, equal rewards 0.4
    records = [synth_record(0, -0.1, -0.3, 1), synth_record(0, -0.1, -0.3, 2), synth_record(1, 0.4, 0.0, 3),
               synth_record(1, 0.4, 0.0, 4)]
    assert synth_batch(records, True) == ([], 2)  # centred away: nothing to learn (the bug)
    batch, skipped = synth_batch(records, True, control_absolute=True)
    assert skipped == 1 and [(e.completion_ids[0], e.advantage) for e in batch] == [
        (1, pytest.approx(-0.3)), (2, pytest.approx(-0.3)), (3, 0.0), (4, 0.0)]
    # a mixed group, only centred: rewards (-0.1, 0.4) -> (-0.25, 0.25); kept whole: plus the mean control -0.15
    mixed = [synth_record(0, -0.1, -0.3, 1), synth_record(0, 0.4, 0.0, 2)]
    plain, _ = synth_batch(mixed, False)
    kept, _ = synth_batch(mixed, False, control_absolute=True)
    assert [e.advantage for e in plain] == pytest.approx([-0.25, 0.25])
    assert [e.advantage for e in kept] == pytest.approx([-0.4, 0.1])  # = base (0.2, 0.4) centred + (-0.3, 0)


def test_an_attempt_is_its_own_grpo_row_with_environment_ids_masked() -> None:
    from synco.core.episodes import Turn

    a = Attempt(text="ab", prompt_ids=[1, 2], completion_ids=[7, 8, 9], logprobs=[-0.1, 0.0, -0.3],
                turns=[Turn(role="agent", text="a", n_tokens=1), Turn(role="env", text="b", n_tokens=1),
                       Turn(role="agent", text="", n_tokens=1)])
    e = a.to_experience(0.5)
    assert (e.prompt_ids, e.completion_ids, e.old_logprobs, e.loss_mask, e.advantage) == (
        [1, 2], [7, 8, 9], [-0.1, 0.0, -0.3], [1, 0, 1], 0.5)
    one = Attempt(text="x", prompt_ids=[1], completion_ids=[4], logprobs=[-1.0])
    assert one.to_experience(1.0).loss_mask is None  # a one-turn answer: every id sampled
    done = Attempt(text="x", prompt_ids=[1], completion_ids=[4], logprobs=[-1.0], turns=[Turn(role="agent", text="x",
                                                                                               n_tokens=1)])
    assert done.to_experience(1.0).loss_mask is None  # an episode that ended on its first turn: no environment ids
    with pytest.raises(ValueError, match="no prompt ids"):
        Attempt(text="x", completion_ids=[4]).to_experience(1.0)  # read back from the pool
