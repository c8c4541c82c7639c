"""What every world's warm-start data shares: the example shapes, the report-like prompt prefix, weighted factor draws.

A world's warm start is data (its own module: ``arith_warm_start``, ``tools.warm_start``, ``rgym.warm_start``);
training two tiny agents on it is the learner's (:mod:`synco.learn.pretrain`), and the recipe that joins them is the
run layer's (:mod:`synco.run.pretrain`). Pure Python: nothing here imports torch.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

Pair = tuple[str, str]
"""A ``(prompt, completion)`` training example: the loss on the completion (and the EOS after it) only."""

Segments = list[tuple[str, bool]]
"""A training row as ``(text, is_target)`` pieces: targets are the agent's turns (each followed by EOS), the rest
(prompt, what the environment answered) is context only."""


def random_report(rng: random.Random, levels: Sequence[str]) -> str:
    """A capability-report-like one-liner (``weak:l5,l6|easy:l1|hard:l9|ok:0.41``) or a start marker.

    The Synthesizer's warm start sees these as prefixes with cards that ignore
    them, so co-training starts from a uniform level choice under any report.
    """
    roll = rng.random()
    if roll < 0.15:
        return ""
    if roll < 0.3:
        return "no data"
    names = [lv.lower() for lv in levels]
    rng.shuffle(names)
    parts = []
    for label in ("weak", "easy", "hard"):
        k = rng.randint(0, 3)
        if k:
            parts.append(label + ":" + ",".join(names[:k]))
            names = names[k:]
    parts.append("ok:" + format(rng.random(), ".2f"))
    if rng.random() < 0.2:
        parts.append("valid:" + format(rng.random() * 0.5, ".2f"))
    return "|".join(parts)


def draw_factors(rng: random.Random, candidates: Sequence[str], weights: Mapping[str, float], k: int) -> list[str]:
    """``k`` distinct candidates drawn one by one with probability proportional to their weight (default 1)."""
    pool, out = list(candidates), []
    for _ in range(k):
        pick = rng.choices(pool, weights=[weights.get(c, 1.0) for c in pool])[0]
        pool.remove(pick)
        out.append(pick)
    return out
