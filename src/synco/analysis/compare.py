"""Learn / Retain decomposition of an evaluation gain (paper section D.3).

An eval directory holds ``raw/<benchmark>.jsonl`` (one object per example and
sample, with at least ``id`` and ``correct``) and ``accuracy.json``. The *base*
model's results split each benchmark into Learn (examples it got wrong) and
Retain (examples it got right); the *trained* model's accuracy on each subset
then says whether a gain comes from newly solved problems or from keeping old
ones.

Several samples per id: an example's correctness is the mean over its samples.
It counts as *solved* when that mean is >= 0.5 (a majority, ties solved); the
Learn/Retain split and the solved counts use this rule, accuracies use the
means. Only ids present in both directories count; the rest are reported as
dropped. The decomposition itself is ``synco.core.learn_retain`` (a run's
held-out Learn / Retain uses it too).
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from synco.analysis.rundata import AnalysisError
from synco.core.learn_retain import SOLVED_THRESHOLD, LearnRetain, learn_retain

__all__ = ["Comparison", "EvalResults", "LearnRetain", "compare", "learn_retain", "read_eval_dir", "read_raw"]


class EvalResults(BaseModel):
    """Per benchmark: example id -> mean correctness over its samples."""

    path: str
    benchmarks: dict[str, dict[str, float]]
    reported_accuracy: dict[str, float] = {}  # numbers found in accuracy.json, as written there


class Comparison(BaseModel):
    """``synco compare`` output (the --json file)."""

    base: str
    trained: str
    solved_threshold: float = SOLVED_THRESHOLD
    benchmarks: list[LearnRetain]
    pooled: LearnRetain
    only_in_base: list[str]  # benchmarks skipped: no raw file in the trained dir
    only_in_trained: list[str]
    base_reported_accuracy: dict[str, float] = {}
    trained_reported_accuracy: dict[str, float] = {}


def _correct_value(value: object, where: str) -> float:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and value in (0, 1):
        return float(value)
    raise AnalysisError(f"{where}: 'correct' must be true/false (or 0/1), got {value!r}")


def read_raw(path: Path) -> dict[str, float]:
    """Mean correctness per id of one raw/<benchmark>.jsonl file."""
    samples: dict[str, list[float]] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise AnalysisError(f"{where}: not JSON ({e.msg})") from e
        if not isinstance(obj, dict) or "id" not in obj or "correct" not in obj:
            raise AnalysisError(f"{where}: each line needs an 'id' and a 'correct' field")
        samples.setdefault(str(obj["id"]), []).append(_correct_value(obj["correct"], where))
    return {i: sum(v) / len(v) for i, v in samples.items()}


def _reported(path: Path) -> dict[str, float]:
    """Top-level numbers of accuracy.json (a number, or an object with 'accuracy'); {} if absent or other."""
    if not path.is_file():
        return {}
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise AnalysisError(f"{path}: not JSON ({e.msg})") from e
    out: dict[str, float] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, dict):
                v = v.get("accuracy")
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[str(k)] = float(v)
    return out


def read_eval_dir(path: str | Path) -> EvalResults:
    """Every raw/<benchmark>.jsonl of an eval directory, plus accuracy.json's numbers."""
    root = Path(path)
    raw = root / "raw"
    if not raw.is_dir():
        raise AnalysisError(f"{raw} not found: an eval directory needs raw/<benchmark>.jsonl files")
    files = sorted(raw.glob("*.jsonl"))
    if not files:
        raise AnalysisError(f"{raw} holds no <benchmark>.jsonl file")
    return EvalResults(path=str(root), benchmarks={f.stem: read_raw(f) for f in files},
                       reported_accuracy=_reported(root / "accuracy.json"))


def compare(base: EvalResults, trained: EvalResults) -> Comparison:
    """Learn / Retain per shared benchmark and pooled over them (ids keyed by benchmark)."""
    shared = [b for b in base.benchmarks if b in trained.benchmarks]
    rows = [learn_retain(b, base.benchmarks[b], trained.benchmarks[b]) for b in shared]
    pooled_base = {f"{b}\x00{i}": v for b in shared for i, v in base.benchmarks[b].items()}
    pooled_trained = {f"{b}\x00{i}": v for b in shared for i, v in trained.benchmarks[b].items()}
    return Comparison(
        base=base.path, trained=trained.path, benchmarks=rows,
        pooled=learn_retain("pooled", pooled_base, pooled_trained),
        only_in_base=[b for b in base.benchmarks if b not in trained.benchmarks],
        only_in_trained=[b for b in trained.benchmarks if b not in base.benchmarks],
        base_reported_accuracy=base.reported_accuracy, trained_reported_accuracy=trained.reported_accuracy,
    )


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def format_comparison(c: Comparison) -> str:
    """The terminal table of ``synco compare``."""
    head = (f"{'benchmark':<14} {'n':>6} {'drop':>5} {'accuracy':>16} {'Learn n':>8} {'Learn acc':>16} "
            f"{'Retain n':>9} {'Retain acc':>16} {'+learn':>7} {'-retain':>8} {'extra':>6}")
    lines = [f"base:    {c.base}", f"trained: {c.trained}",
             f"accuracies in %, base -> trained; solved = mean correctness over samples >= {c.solved_threshold:g}; "
             "drop = ids in only one directory", head, "-" * len(head)]
    for r in [*c.benchmarks, c.pooled]:
        if r is c.pooled:
            lines.append("-" * len(head))
        lines.append(
            f"{r.benchmark[:14]:<14} {r.n:>6} {r.dropped_base_only + r.dropped_trained_only:>5} "
            f"{_pct(r.base_accuracy):>6} -> {_pct(r.trained_accuracy):>6} {r.learn.n:>8} "
            f"{_pct(r.learn.base_accuracy):>6} -> {_pct(r.learn.trained_accuracy):>6} {r.retain.n:>9} "
            f"{_pct(r.retain.base_accuracy):>6} -> {_pct(r.retain.trained_accuracy):>6} "
            f"{r.learn_gain:>+7} {-r.retain_loss:>+8} {r.extra_solved:>+6}")
    p = c.pooled
    if p.learn_gain + p.retain_loss:
        lines.append(f"extra solved {p.extra_solved:+d} = Learn +{p.learn_gain} - Retain {p.retain_loss}")
    for name, skipped in (("only in base", c.only_in_base), ("only in trained", c.only_in_trained)):
        if skipped:
            lines.append(f"skipped benchmarks {name}: {', '.join(skipped)}")
    return "\n".join(lines)
