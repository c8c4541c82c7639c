"""The Reflector: which factor explains Reasoner failure beyond the current cells?

For a candidate factor z the evidence is the conditional mutual information

    I(fail; z | C) = sum_c P(c) sum_z P(z | c) sum_y P(y | z, c) log [P(y | z, c) / P(y | c)]

between attempt failure y and z, given the cell C of the current space, estimated
from counts (each task contributes its K attempts). The plug-in estimate is biased
upward, and attempts at one task are not independent, so significance comes from a
**stratified permutation test at the task level**: the tasks' z values are shuffled
within each cell (a task's K attempts move together) and the CMI recomputed; the
p-value is (1 + #null >= observed) / (1 + B), and the *excess* CMI (observed minus the
null mean) is the bias-corrected information. A candidate is promoted only with enough
evidence (``min_tasks`` tasks, two buckets of ``min_bucket_tasks``), p <= alpha and
excess >= ``min_excess_cmi``; the best one per reflection. A promoted (experimental)
factor is re-tested given the *other* factors at the next reflection: confirmed when it
still explains failure, retired when its p-value rises above ``retire_alpha``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from synco.evosyn.config import ReflectorConfig
from synco.evosyn.space import FactorChange, FactorDef, FactorEvidence, FactorSpace, cell_key
from synco.core.records import TaskRecord


@dataclass(frozen=True)
class Observation:
    """One solved task: its factor values, attempts and failed attempts."""

    factors: dict[str, str]
    n: int
    fails: int


def observations(records: Sequence[TaskRecord]) -> list[Observation]:
    """Valid tasks with rollouts, with the domain-computed factor values of their cards."""
    return [Observation(dict(r.card.factors), len(r.rollouts), sum(not ro.correct for ro in r.rollouts))
            for r in records if r.valid and r.card is not None and r.rollouts]


def _entropy_terms(n: np.ndarray, f: np.ndarray) -> np.ndarray:
    """n * H(f / n) per entry (nats), 0 where n == 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(n > 0, f / np.maximum(n, 1), 0.0)
        h = -(np.where(q > 0, q * np.log(np.where(q > 0, q, 1)), 0.0)
              + np.where(q < 1, (1 - q) * np.log(np.where(q < 1, 1 - q, 1)), 0.0))
    return n * h


def cmi_from_codes(strata: np.ndarray, z: np.ndarray, n: np.ndarray, fails: np.ndarray,
                   n_strata: int, n_z: int) -> float:
    """I(fail; z | stratum) in nats from per-task integer codes, attempts and failures.

    = sum_c [n_c H(f_c / n_c) - sum_z n_cz H(f_cz / n_cz)] / N  (the expected drop in the
    failure entropy when z is known within each stratum).
    """
    total = n.sum()
    if total <= 0:
        return 0.0
    idx = strata * n_z + z
    n_cz = np.bincount(idx, weights=n, minlength=n_strata * n_z)
    f_cz = np.bincount(idx, weights=fails, minlength=n_strata * n_z)
    n_c = n_cz.reshape(n_strata, n_z).sum(1)
    f_c = f_cz.reshape(n_strata, n_z).sum(1)
    return float((_entropy_terms(n_c, f_c).sum() - _entropy_terms(n_cz, f_cz).sum()) / total)


def conditional_mi(obs: Sequence[Observation], z_of: Callable[[Observation], str | None],
                   stratum_of: Callable[[Observation], str | None]) -> float:
    """I(fail; z | stratum) of the observations where both are defined (see :func:`cmi_from_codes`)."""
    s, z, n, f, ns, nz = _codes(obs, z_of, stratum_of)
    return cmi_from_codes(s, z, n, f, ns, nz) if len(n) else 0.0


def _codes(obs: Sequence[Observation], z_of: Callable[[Observation], str | None],
           stratum_of: Callable[[Observation], str | None]):
    s_ids: dict[str, int] = {}
    z_ids: dict[str, int] = {}
    rows = []
    for o in obs:
        zv, sv = z_of(o), stratum_of(o)
        if zv is None or sv is None:
            continue
        rows.append((s_ids.setdefault(sv, len(s_ids)), z_ids.setdefault(zv, len(z_ids)), o.n, o.fails))
    arr = np.array(rows, dtype=np.int64).reshape(-1, 4)
    return arr[:, 0], arr[:, 1], arr[:, 2].astype(float), arr[:, 3].astype(float), max(1, len(s_ids)), max(1, len(z_ids))


def permutation_null(strata: np.ndarray, z: np.ndarray, n: np.ndarray, fails: np.ndarray, n_strata: int,
                     n_z: int, permutations: int, rng: np.random.Generator) -> np.ndarray:
    """CMI with z shuffled among the tasks of each stratum, ``permutations`` times."""
    out = np.empty(permutations)
    for b in range(permutations):
        order = np.lexsort((rng.random(len(z)), strata))  # tasks grouped by stratum, random within
        zp = np.empty_like(z)
        zp[order] = z[np.lexsort((np.arange(len(z)), strata))]  # each stratum keeps its own multiset of z
        out[b] = cmi_from_codes(strata, zp, n, fails, n_strata, n_z)
    return out


def factor_evidence(obs: Sequence[Observation], name: str, given: Sequence[str], permutations: int,
                    rng: np.random.Generator) -> FactorEvidence:
    """CMI of factor ``name`` with failure given the factors ``given``, its null and the per-bucket failure."""
    def z_of(o: Observation) -> str | None:
        return o.factors.get(name)

    def s_of(o: Observation) -> str | None:
        vals = [o.factors.get(g) for g in given]
        return None if any(v is None for v in vals) else cell_key(tuple(zip(given, vals)))  # type: ignore[arg-type]

    s, z, n, f, ns, nz = _codes(obs, z_of, s_of)
    observed = cmi_from_codes(s, z, n, f, ns, nz) if len(n) else 0.0
    null = permutation_null(s, z, n, f, ns, nz, permutations, rng) if len(n) else np.zeros(permutations)
    fail_by: dict[str, list[float]] = {}
    for o in obs:
        zv = z_of(o)
        if zv is not None and s_of(o) is not None:
            acc = fail_by.setdefault(zv, [0, 0, 0])
            acc[0] += 1
            acc[1] += o.n
            acc[2] += o.fails
    return FactorEvidence(
        cmi=observed, cmi_null=float(null.mean()),
        p_value=float((1 + (null >= observed - 1e-12).sum()) / (1 + permutations)),
        n_tasks=int(len(n)), n_attempts=int(n.sum()),
        failure_by_bucket={k: v[2] / v[1] for k, v in sorted(fail_by.items()) if v[1]},
        n_by_bucket={k: int(v[0]) for k, v in sorted(fail_by.items())},
    )


def enough_evidence(ev: FactorEvidence, cfg: ReflectorConfig) -> bool:
    """The minimum-evidence rule: enough tasks, and two buckets with enough tasks each."""
    return ev.n_tasks >= cfg.min_tasks and sum(k >= cfg.min_bucket_tasks for k in ev.n_by_bucket.values()) >= 2


@dataclass
class Reflection:
    """One reflection: the changes made and every candidate's evidence (for ``reflector.jsonl``)."""

    step: int
    changes: list[FactorChange]
    candidates: dict[str, FactorEvidence]
    n_tasks: int


def reflect(records: Sequence[TaskRecord], space: FactorSpace, defs: Sequence[FactorDef], builtin: Sequence[str],
            cfg: ReflectorConfig, step: int, seed: int,
            n_cells: Callable[[FactorSpace], int] | None = None) -> Reflection:
    """Re-test the promoted factors, then promote the best candidate; mutates ``space``.

    ``n_cells(space)`` counts the feasible cells of a space (to respect ``max_cells``);
    ``seed`` makes the permutations repeatable (e.g. the run seed plus the step).
    """
    rng = np.random.default_rng(seed)
    obs = observations(records)
    changes: list[FactorChange] = []
    evidence: dict[str, FactorEvidence] = {}
    if len(obs) < cfg.min_tasks:
        return Reflection(step, changes, evidence, len(obs))
    # 1. promoted factors: still informative given the other active factors?
    for f in list(space.active()):
        if f.origin != "promoted" or f.name in builtin:
            continue
        others = [g for g in space.active_names() if g != f.name]
        ev = factor_evidence(obs, f.name, others, cfg.permutations, rng)
        evidence[f.name] = ev
        if not enough_evidence(ev, cfg):
            continue
        if ev.p_value > cfg.retire_alpha:
            changes.append(space.retire(f.name, step, ev, note=f"p = {ev.p_value:.3f} > retire_alpha {cfg.retire_alpha}"))
        elif f.status == "experimental":
            changes.append(space.confirm(f.name, step, ev))
    # 2. candidates: not in use (never promoted, or retired), measured given the current cells.
    active = space.active_names()
    changed = {ch.factor for ch in changes}  # a factor retired just now is not a candidate again until the next reflection
    best: tuple[float, FactorDef, FactorEvidence] | None = None
    for d in defs:
        if d.name in active or d.name in changed:
            continue
        ev = factor_evidence(obs, d.name, active, cfg.permutations, rng)
        evidence[d.name] = ev
        if not enough_evidence(ev, cfg) or ev.p_value > cfg.alpha or ev.excess < cfg.min_excess_cmi:
            continue
        if n_cells is not None:
            trial = space.model_copy(deep=True)
            trial.promote(d, step, ev)
            if n_cells(trial) > cfg.max_cells:
                continue
        if best is None or ev.excess > best[0]:
            best = (ev.excess, d, ev)
    if best is not None:
        changes.append(space.promote(best[1], step, best[2]))
    return Reflection(step, changes, evidence, len(obs))


def python_seed(seed: int, step: int) -> int:
    """A per-reflection seed derived from the run seed (stable across resume)."""
    return random.Random(f"reflector:{seed}:{step}").getrandbits(32)
