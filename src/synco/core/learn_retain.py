"""Learn / Retain: split a gain into problems newly solved and problems kept (paper section D.3).

The *base* model's results split the examples into Learn (those it got wrong)
and Retain (those it got right); the *trained* model's results on each subset
say whether a gain comes from newly solved problems or from keeping old ones.
Used by ``synco compare`` (benchmark eval directories) and by every run's
held-out evaluation (``summary.json``'s ``heldout_learn_retain``).

An example's correctness is its mean over samples. It counts as *solved* when
that mean is at least :data:`SOLVED_THRESHOLD` (a majority, ties solved).
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel

SOLVED_THRESHOLD = 0.5
"""An example is solved when its mean correctness over samples is at least this."""


class Subset(BaseModel):
    """The trained model on the Learn or Retain subset."""

    n: int
    base_accuracy: float | None
    trained_accuracy: float | None
    solved_now: int  # examples of the subset the trained model solves


class LearnRetain(BaseModel):
    """Learn / Retain numbers of one benchmark, or of all pooled."""

    benchmark: str
    n: int  # ids in both directories
    dropped_base_only: int
    dropped_trained_only: int
    base_accuracy: float | None
    trained_accuracy: float | None
    delta: float | None  # trained - base accuracy
    learn: Subset
    retain: Subset
    learn_gain: int  # Learn examples now solved
    retain_loss: int  # Retain examples no longer solved
    extra_solved: int  # learn_gain - retain_loss = solved(trained) - solved(base)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def learn_retain(name: str, base: Mapping[str, float], trained: Mapping[str, float]) -> LearnRetain:
    """The decomposition for one benchmark (or pooled ids) from mean correctness per id."""
    common = [i for i in base if i in trained]
    learn = [i for i in common if base[i] < SOLVED_THRESHOLD]
    retain = [i for i in common if base[i] >= SOLVED_THRESHOLD]
    learn_gain = sum(trained[i] >= SOLVED_THRESHOLD for i in learn)
    retain_kept = sum(trained[i] >= SOLVED_THRESHOLD for i in retain)
    b_acc, t_acc = _mean([base[i] for i in common]), _mean([trained[i] for i in common])
    return LearnRetain(
        benchmark=name,
        n=len(common),
        dropped_base_only=len(base) - len(common),
        dropped_trained_only=sum(1 for i in trained if i not in base),
        base_accuracy=b_acc,
        trained_accuracy=t_acc,
        delta=t_acc - b_acc if b_acc is not None and t_acc is not None else None,
        learn=Subset(n=len(learn), base_accuracy=_mean([base[i] for i in learn]),
                     trained_accuracy=_mean([trained[i] for i in learn]), solved_now=learn_gain),
        retain=Subset(n=len(retain), base_accuracy=_mean([base[i] for i in retain]),
                      trained_accuracy=_mean([trained[i] for i in retain]), solved_now=retain_kept),
        learn_gain=learn_gain,
        retain_loss=len(retain) - retain_kept,
        extra_solved=learn_gain - (len(retain) - retain_kept),
    )
