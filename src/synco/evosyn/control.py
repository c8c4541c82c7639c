"""The control check: does the Synthesizer follow a factor the Reflector promoted?

A promoted factor explains Reasoner failure, but the Designer can only steer by it if
the Synthesizer writes cards in the bucket it is asked for. When it cannot, every
request that names the factor risks a miss: the Designer's allocation lands elsewhere
and the miss penalty swamps the Synthesizer's teachability signal. In the arith world
the tiny warm start follows ``level`` (1.00) but ``answer_digits`` only 0.62 of the time
(0.35 by chance) and ``carries`` 0.42 (0.26), and 90 steps of RL did not improve either;
steering by both made the full loop's controllability 0.27 and its held-out gain lower
than with the Reflector off (``bench/cotrain_modes.py``).

So once a promoted, steered factor has ``min_control_cards`` targeted valid cards, its
*control rate* (the share whose realised bucket, recomputed by the domain, is the
requested one) decides: at or above ``min_control`` it stays a control (``steer``),
below it the factor is kept in use but *observed* only (``observe``): it still strata
the Reflector's tests and is reported, and the cells no longer split on it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from synco.evosyn.config import ReflectorConfig
from synco.evosyn.space import ControlEvidence, FactorChange, FactorSpace, parse_cell_key
from synco.core.records import TaskRecord


def factor_control(records: Sequence[TaskRecord], name: str, since_step: int = 0) -> ControlEvidence:
    """How often valid cards asked for a bucket of ``name`` (from step ``since_step`` on) realised it.

    ``chance`` is what a Synthesizer ignoring the request would score with the same request
    and realised-bucket frequencies: sum over buckets b of P(requested b) * P(realised b).
    """
    asked: Counter[str] = Counter()
    got: Counter[str | None] = Counter()
    hits = n = 0
    for rec in records:
        if rec.step < since_step or not rec.valid or rec.card is None or not rec.target:
            continue
        requested = dict(parse_cell_key(rec.target)).get(name)
        if requested is None:
            continue
        realised = rec.card.factors.get(name)
        n += 1
        hits += realised == requested
        asked[requested] += 1
        got[realised] += 1
    if n == 0:
        return ControlEvidence(rate=0.0, chance=0.0, n_cards=0)
    chance = sum(k * got[b] for b, k in asked.items()) / (n * n)
    return ControlEvidence(rate=hits / n, chance=chance, n_cards=n)


def pending(space: FactorSpace) -> list[str]:
    """Promoted, steered factors in use whose control has not been judged yet."""
    return [f.name for f in space.active() if f.origin == "promoted" and f.steered and f.control is None]


def check_control(records: Sequence[TaskRecord], space: FactorSpace, cfg: ReflectorConfig,
                  step: int) -> list[FactorChange]:
    """Judge every pending factor with enough targeted cards (mutates ``space``); the decisions made.

    ``min_control`` 0 keeps every promoted factor steered without measuring it.
    """
    changes: list[FactorChange] = []
    if cfg.min_control <= 0:
        return changes
    for name in pending(space):
        f = space.get(name)
        assert f is not None
        ev = factor_control(records, name, since_step=(f.since_step or 0) + 1)
        if ev.n_cards < cfg.min_control_cards:
            continue
        detail = f"control {ev.rate:.2f} (chance {ev.chance:.2f}) over {ev.n_cards} targeted cards"
        if ev.rate >= cfg.min_control:
            changes.append(space.steer(name, step, ev, note=f"{detail} >= min_control {cfg.min_control}"))
        else:
            changes.append(space.observe(name, step, ev, note=f"{detail} < min_control {cfg.min_control}: "
                                                             "kept observed only, out of the cells"))
    return changes
