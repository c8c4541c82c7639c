"""GRPO batches built from the step's records: the Reasoner's groups are a task's K attempts, the Synthesizer's
groups a context's cards. Every row comes from a record (an :class:`~synco.core.records.Attempt`, or a
:class:`~synco.core.records.TaskRecord`'s sample); nothing reaches an update through a list aligned by index."""

from __future__ import annotations

from collections.abc import Sequence

from synco.core.records import Attempt, TaskRecord
from synco.core.rewards import is_gradient_bearing
from synco.core.sampling import Completion, Experience
from synco.learn.grpo import group_advantages


def advantages(rewards: Sequence[float], scale_by_std: bool) -> list[float]:
    """GRPO advantages of one group's rewards (:func:`synco.learn.grpo.group_advantages`, in float64)."""
    import torch

    return group_advantages(torch.tensor(rewards, dtype=torch.float64), scale_by_std=scale_by_std).tolist()


def with_control(advs: Sequence[float], controls: Sequence[float]) -> list[float]:
    """A group's advantages with its control terms kept whole: each advantage plus the group's mean control term.

    ``controls`` are the off-target terms folded into the group's rewards (``SynthReward.control``: minus
    ``evosyn.control_penalty`` for a card that missed its cell, 0 for one that hit it). Centring removes a
    group's mean reward, and with it the part of the control term every card shares: when a whole group
    misses its cell (a context's cards share one prompt, so this is the usual miss) the penalty moves every
    reward alike and the update does not see it. Adding the mean back leaves the control term without a
    baseline (a REINFORCE term with baseline 0) while the rest of the reward keeps the group's baseline:
    without std scaling, ``r_i - mean(r) + mean(c)`` is exactly ``(r - c)_i - mean(r - c) + c_i``.
    """
    if len(advs) != len(controls):
        raise ValueError(f"a group of {len(advs)} advantages has {len(controls)} control terms")
    shift = sum(controls) / len(controls) if controls else 0.0
    return [a + shift for a in advs]


def group_experiences(samples: Sequence[Completion | Attempt | None], rewards: Sequence[float],
                      scale_by_std: bool, controls: Sequence[float] | None = None) -> list[Experience]:
    """One GRPO group's experiences: :func:`advantages` of its rewards, or all 0 when the rewards are equal
    (kept, so the loss is normalised over the whole batch); with ``controls``, :func:`with_control` of
    those. A sample that is None (a card of a fixed corpus, which no model wrote) gets no experience."""
    if len(samples) != len(rewards):
        raise ValueError(f"a group of {len(samples)} samples has {len(rewards)} rewards")
    advs = advantages(rewards, scale_by_std) if is_gradient_bearing(rewards) else [0.0] * len(rewards)
    if controls is not None and any(controls):
        advs = with_control(advs, controls)
    return [c.to_experience(a) for c, a in zip(samples, advs) if c is not None]


def groups_batch(groups: Sequence[Sequence[Completion | Attempt | None]], rewards: Sequence[Sequence[float]],
                 scale_by_std: bool, controls: Sequence[Sequence[float]] | None = None) -> tuple[list[Experience], int]:
    """The GRPO batch of several groups and the number of groups skipped (all advantages 0: equal rewards and,
    with ``controls``, no control term).

    Empty when no advantage is non-zero: then there is nothing to learn and no update is taken.
    """
    per_group = controls if controls is not None else [None] * len(rewards)
    batch = [e for group, rs, cs in zip(groups, rewards, per_group)
             for e in group_experiences(group, rs, scale_by_std, cs)]
    skipped = sum(not is_gradient_bearing(rs) and not any(cs or ()) for rs, cs in zip(rewards, per_group))
    if not any(e.advantage != 0.0 for e in batch):
        return [], skipped
    return batch, skipped


def attempts_batch(groups: Sequence[Sequence[Attempt]], scale_by_std: bool) -> tuple[list[Experience], int]:
    """The GRPO batch of groups of attempts, each rewarded as recorded."""
    return groups_batch(groups, [[a.reward for a in g] for g in groups], scale_by_std)


def reasoner_batch(records: Sequence[TaskRecord], scale_by_std: bool) -> tuple[list[Experience], int]:
    """The Reasoner's GRPO batch of a step: one group per solved task (its K attempts), tasks that consensus
    rejected after solving left out; and the groups skipped for equal rewards."""
    return attempts_batch([r.rollouts for r in records if r.valid and r.rollouts], scale_by_std)


def synth_batch(records: Sequence[TaskRecord], scale_by_std: bool,
                control_absolute: bool = False) -> tuple[list[Experience], int]:
    """The Synthesizer's GRPO batch of a step: one group per context (its cards' samples and rewards); and the
    groups skipped for equal rewards. ``control_absolute`` (``evosyn.control_absolute``): the off-target terms
    reach the advantages whole (:func:`with_control`), even where the whole group missed its cell."""
    by_context: dict[int, list[TaskRecord]] = {}
    for rec in records:
        by_context.setdefault(rec.context_id, []).append(rec)
    groups = list(by_context.values())
    controls = ([[r.synth_reward.control if r.synth_reward is not None else 0.0 for r in g] for g in groups]
                if control_absolute else None)
    return groups_batch([[r.sample for r in g] for g in groups],
                        [[r.synth_reward.total if r.synth_reward is not None else 0.0 for r in g] for g in groups],
                        scale_by_std, controls)
