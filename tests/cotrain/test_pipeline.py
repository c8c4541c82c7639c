"""The asynchronous pipeline's pure parts: staleness counted in published versions, what each learner may train
on, and when the pipeline collects ahead."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from synco.core.records import CARD_FIELDS, Attempt, TaskCard, TaskRecord, Verdict
from synco.cotrain.pipeline import Pipeline, fresh, mean_staleness, staleness
from synco.cotrain.protocols.base import TrainingProtocol
from synco.cotrain.protocols.config import RoundsConfig
from synco.cotrain.protocols.online import Online
from synco.cotrain.protocols.rounds import Rounds


def test_staleness_counts_distinct_published_versions_newer_than_the_sample():
    assert staleness(3, [0, 1, 2, 3]) == 0
    assert staleness(1, [0, 1, 2, 3]) == 2
    assert staleness(1, [1, 2, 2, 2]) == 1  # a publish without an optimizer step is not a new version
    assert staleness(None, [0, 5]) == 0  # not recorded: current
    assert staleness(0, []) == 0


def record(version: int | None, synth: int | None, k: int = 2) -> TaskRecord:
    card = TaskCard(**{f: "x" for f in CARD_FIELDS})
    return TaskRecord(step=0, slot=0, raw="r", card=card, verdict=Verdict(valid=True), synth_version=synth,
                      rollouts=[Attempt(text="t", correct=True, policy_version=version) for _ in range(k)])


def test_fresh_drops_whole_groups_and_cards_beyond_max_staleness():
    published = [0, 1, 2, 3]
    recs = [record(3, 3), record(2, 2), record(1, 1), record(0, None)]  # 0, 1, 2, 3 versions behind
    for_r, for_s, attempts, cards = fresh(recs, 1, published, published)
    assert [len(r.rollouts) for r in for_r] == [2, 2, 0, 0]
    assert [r.synth_version for r in for_s] == [3, 2, None]  # an unrecorded version counts as current
    assert (attempts, cards) == (4, 1)
    assert [len(r.rollouts) for r in recs] == [2, 2, 2, 2]  # the step's own records are untouched
    assert fresh(recs, 3, published, published)[2:] == (0, 0)
    assert mean_staleness(recs, published) == pytest.approx((0 + 1 + 2 + 3) / 4)
    assert mean_staleness([], published) is None


def pipeline(max_staleness: int, steps: int, protocol: TrainingProtocol | None = None) -> Pipeline:
    state = SimpleNamespace(reasoner=SimpleNamespace(policy_version=0), synthesizer=SimpleNamespace(policy_version=0))
    return Pipeline(state, max_staleness, steps, protocol or Online(steps=steps),  # type: ignore[arg-type]
                    learners=[])


def test_collects_ahead_up_to_max_staleness_within_the_run_and_never_across_a_boundary():
    p = pipeline(1, 5)
    assert [p._next_to_collect(s) for s in range(5)] == [1, 2, 3, 4, None]
    p2 = pipeline(2, 6)
    assert p2._next_to_collect(0) == 1
    p2.pending.append(SimpleNamespace(step=1))  # type: ignore[arg-type]
    assert p2._next_to_collect(0) == 2 and p2._next_to_collect(4) is None  # 4 + 1 pending + 1 = the run's end
    p2.pending.append(SimpleNamespace(step=2))  # type: ignore[arg-type]
    assert p2._next_to_collect(0) is None  # two pending: full
    rounds = pipeline(1, 6, Rounds(steps=6, rounds=RoundsConfig(steps_per_round=3)))  # trained after 2 and 5
    assert [rounds._next_to_collect(s) for s in range(6)] == [1, 2, None, 4, 5, None]
    with pytest.raises(ValueError, match="max_staleness >= 1"):
        pipeline(0, 5)


def test_checkpoint_keeps_pending_steps_and_recent_versions():
    p = pipeline(1, 5)
    p.published = {"reasoner": [0, 1, 2, 3], "synthesizer": [0, 0, 1, 2]}
    p.pending.append(SimpleNamespace(step=4))  # type: ignore[arg-type]
    saved = p.checkpoint()
    assert saved["published"] == {"reasoner": [2, 3], "synthesizer": [1, 2]} and saved["max_staleness"] == 1
    q = pipeline(1, 5)
    q.restore(saved)
    assert [c.step for c in q.pending] == [4] and q.published == saved["published"]
