"""The run's summary: before/after held-out accuracy and the task statistics, from the run's files
(``summary.json``), and the table ``synco train`` prints at the end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from synco.run.files import jsonl_rows
from synco.core.learn_retain import LearnRetain, learn_retain
from synco.run.heldout import HeldoutScores, evaluate_heldout_both, group_key, mean
from synco.run.state import Run
from synco.cotrain.protocols.rounds import round_training
from synco.core.text import counted


class RunSummary(BaseModel):
    """What ``synco train`` prints at the end (also ``summary.json``)."""

    run_dir: str
    steps: int
    heldout_before: dict[str, float] = {}
    heldout_after: dict[str, float] = {}
    heldout_sampled_before: dict[str, float] = {}  # mean over heldout_samples answers at the training temperature
    heldout_sampled_after: dict[str, float] = {}
    heldout_learn_retain: LearnRetain | None = None  # greedy, per held-out item: newly solved vs forgotten
    heldout_by_family: dict[str, dict[str, Any]] = {}  # groups named FAMILY/PART (rgym): per family, see family_rows
    heldout_curve: dict[int, float] = {}  # step -> greedy held-out mean, from heldout.jsonl (heldout_every)
    gradient_share_first: float = 0.0
    gradient_share_last: float = 0.0
    valid_rate: float = 0.0
    group_factor: str = "level"  # the card factor the task distribution is over (the config's group_factor)
    groups_first: dict[str, float] = {}
    groups_last: dict[str, float] = {}
    sec_per_step: float = 0.0
    overlapped: bool = False  # asynchronous (max_staleness >= 1): sec_per_step is the wall time, not the phases' sum
    sec_generate: float = 0.0
    sec_train: float = 0.0
    sec_other: float = 0.0
    n_tasks: int = 0
    n_valid_tasks: int = 0
    controllability_first: float | None = None  # EvoSyn: share of valid targeted cards on their cell, first 10 %
    controllability_last: float | None = None
    factor_coverage: float | None = None  # mean over steps
    factor_balance: float | None = None
    allocation_gap_spearman: float | None = None  # mean over Designer steps of rho(cell need, cell slots)
    factor_changes: list[dict[str, Any]] = []  # factors.jsonl: promotions / confirmations / retirements / control checks
    alerts: int = 0  # health alerts fired (alerts.jsonl)
    alerts_by_check: dict[str, int] = {}
    protocol: str = "online"  # synco.cotrain.protocols
    round_training: list[dict[str, Any]] = []  # rounds / rft: what each round's training did
    protocol_notes: list[str] = []  # the summary's lines about the protocol's rounds or phases


def summarize(run: Run, before_path: Path) -> RunSummary:
    """Before/after held-out accuracy and the run's task statistics, from the run's files."""
    rows = jsonl_rows(run.dir / "metrics.jsonl")
    summary = RunSummary(run_dir=str(run.dir), steps=len(rows), group_factor=run.cfg.group_factor)
    if run.heldout:
        _summarize_heldout(summary, run, before_path, len(rows))
    if rows:
        _summarize_steps(summary, rows, run.dir)
        summary.protocol_notes = run.protocol.describe(rows)
    for alert in jsonl_rows(run.dir / "alerts.jsonl"):
        summary.alerts += 1
        summary.alerts_by_check[alert["check"]] = summary.alerts_by_check.get(alert["check"], 0) + 1
    return summary


def _summarize_heldout(summary: RunSummary, run: Run, before_path: Path, n_steps: int) -> None:
    """Held-out accuracy before (from ``before_path``) and after (evaluated now, or the curve's last point when
    it was taken at the end; written per item to ``heldout_after.json``) and the greedy curve of ``heldout.jsonl``."""
    before = json.loads(before_path.read_text())
    if "greedy" not in before:  # a run directory written before sampled evaluation existed
        before = {"greedy": before}
    curve = jsonl_rows(run.dir / "heldout.jsonl")
    last = curve[-1] if curve and curve[-1]["step"] == n_steps and "greedy_items" in curve[-1] else None
    at_end = HeldoutScores(last["greedy"], last["greedy_items"]) if last else None  # no second greedy pass
    after = evaluate_heldout_both(run, greedy=at_end)
    (run.dir / "heldout_after.json").write_text(json.dumps(after))  # per item, like heldout_before.json
    summary.heldout_before, summary.heldout_after = before["greedy"], after["greedy"]
    if "greedy_items" in before:  # absent from a run directory written before Learn / Retain existed
        summary.heldout_learn_retain = learn_retain("heldout", before["greedy_items"], after["greedy_items"])
        summary.heldout_by_family = family_rows(before["greedy"], after["greedy"], before["greedy_items"],
                                                after["greedy_items"])
    if "sampled" in before and "sampled" in after:
        summary.heldout_sampled_before, summary.heldout_sampled_after = before["sampled"], after["sampled"]
    if curve:
        summary.heldout_curve = {0: mean(before["greedy"]), **{c["step"]: c["mean"] for c in curve},
                                 n_steps: mean(after["greedy"])}


def family_rows(before: dict[str, float], after: dict[str, float], before_items: dict[str, float],
                after_items: dict[str, float]) -> dict[str, dict[str, Any]]:
    """Per family of groups named ``FAMILY/PART`` (rgym: ``chain_sum/L0``, ``chain_sum/default``): greedy accuracy
    before and after over its level groups and over its ``default`` group (the transfer set), and Learn / Retain
    over its items. {} when no group has a ``/``."""
    families = sorted({g.split("/", 1)[0] for g in before if "/" in g})
    out: dict[str, dict[str, Any]] = {}
    for family in families:
        levels = [g for g in before if g.startswith(family + "/") and not g.endswith("/default")]
        transfer = f"{family}/default"

        def items(scores: dict[str, float]) -> dict[str, float]:
            return {k: v for k, v in scores.items() if k.split(":", 1)[-1].startswith(family + "/")}

        lr = learn_retain(family, items(before_items), items(after_items))
        out[family] = {
            "levels_before": mean({g: before[g] for g in levels}), "levels_after": mean({g: after.get(g, 0.0) for g in levels}),
            "transfer_before": before.get(transfer), "transfer_after": after.get(transfer),
            "learn": f"{lr.learn_gain}/{lr.learn.n}", "retain_lost": f"{lr.retain_loss}/{lr.retain.n}"}
    return out


def _summarize_steps(summary: RunSummary, rows: list[dict[str, Any]], run_dir: Path) -> None:
    """The task statistics of metrics.jsonl's ``rows`` (at least one): first and last 10 % of the steps,
    rates, timings, EvoSyn's factor space and the protocol's rounds."""
    w = max(1, len(rows) // 10)
    first, last = rows[:w], rows[-w:]

    def share(rs: list[dict[str, Any]]) -> float:
        return sum(r["n_gradient_bearing"] for r in rs) / max(1, sum(r["n_valid"] for r in rs))

    def groups(rs: list[dict[str, Any]]) -> dict[str, float]:
        tot: dict[str, int] = {}
        for r in rs:
            for g, n in r["groups"].items():
                tot[g] = tot.get(g, 0) + n
        n = max(1, sum(tot.values()))
        return {g: tot[g] / n for g in sorted(tot, key=group_key)}

    summary.gradient_share_first, summary.gradient_share_last = share(first), share(last)
    summary.groups_first, summary.groups_last = groups(first), groups(last)
    summary.valid_rate = sum(r["n_valid"] for r in rows) / max(1, sum(r["n_cards"] for r in rows))
    n = len(rows)
    summary.sec_generate = sum(r["t_generate"] for r in rows) / n
    summary.sec_train = sum(r["t_train"] for r in rows) / n
    summary.sec_other = sum(r["t_other"] for r in rows) / n
    walls = [r["t_step"] for r in rows if r.get("t_step") is not None]  # asynchronous: the phases overlap
    summary.sec_per_step = (sum(walls) / len(walls) if len(walls) == n
                            else summary.sec_generate + summary.sec_train + summary.sec_other)
    summary.overlapped = len(walls) == n
    summary.n_tasks = sum(r["n_cards"] for r in rows)
    summary.n_valid_tasks = sum(r["n_valid"] for r in rows)
    _summarize_evosyn(summary, rows, first, last, run_dir)
    summary.protocol = rows[0].get("protocol", "online")
    summary.round_training = round_training(rows)


def _summarize_evosyn(summary: RunSummary, rows: list[dict[str, Any]], first: list[dict[str, Any]],
                      last: list[dict[str, Any]], run_dir: Path) -> None:
    """Controllability, coverage, balance, the allocation-gap rho and the factor-space changes."""
    def mean_of(rs: list[dict[str, Any]], key: str) -> float | None:
        xs = [r[key] for r in rs if r.get(key) is not None]
        return sum(xs) / len(xs) if xs else None

    summary.controllability_first = mean_of(first, "controllability")
    summary.controllability_last = mean_of(last, "controllability")
    summary.factor_coverage = mean_of(rows, "factor_coverage")
    summary.factor_balance = mean_of(rows, "factor_balance")
    summary.allocation_gap_spearman = mean_of(rows, "allocation_gap_spearman")
    summary.factor_changes = jsonl_rows(run_dir / "factors.jsonl")


def format_summary(s: RunSummary) -> str:
    """The end-of-run table printed by ``synco train``."""
    out = [f"run: {s.run_dir}  ({counted(s.steps, 'step')}, {counted(s.n_tasks, 'card')}, {s.n_valid_tasks} valid)"]
    if s.heldout_before:
        sampled = bool(s.heldout_sampled_before)
        out.append("held-out accuracy per group, before -> after: greedy" + ("  |  sampled" if sampled else ""))
        nan = float("nan")
        width = max(6, *(len(g) for g in s.heldout_before))
        for g in [*s.heldout_before, "mean"]:
            if g == "mean":
                b, a = mean(s.heldout_before), mean(s.heldout_after)
                sb, sa = mean(s.heldout_sampled_before), mean(s.heldout_sampled_after)
                nd = 3
            else:
                b, a = s.heldout_before[g], s.heldout_after.get(g, nan)
                sb, sa = s.heldout_sampled_before.get(g, nan), s.heldout_sampled_after.get(g, nan)
                nd = 2
            line = f"  {g:>{width}}: {b:.{nd}f} -> {a:.{nd}f}  ({a - b:+.{nd}f})"
            if sampled:
                line += f"  |  {sb:.{nd}f} -> {sa:.{nd}f}  ({sa - sb:+.{nd}f})"
            out.append(line)
    lr = s.heldout_learn_retain
    if lr is not None and lr.n:
        out.append(f"held-out items, greedy: {lr.learn_gain} of {lr.learn.n} unsolved before now solved (Learn), "
                   f"{lr.retain_loss} of {lr.retain.n} solved before now failed (Retain); net {lr.extra_solved:+d}")
    if s.heldout_by_family:
        out.append("held-out per family, greedy before -> after: levels | transfer (default difficulty) | "
                   "Learn (unsolved now solved) | Retain (solved now failed)")
        width = max(len(f) for f in s.heldout_by_family)
        for family, r in s.heldout_by_family.items():
            transfer = ("-" if r["transfer_before"] is None else
                        f"{r['transfer_before']:.2f} -> {r['transfer_after'] or 0.0:.2f}")
            out.append(f"  {family:>{width}}: {r['levels_before']:.2f} -> {r['levels_after']:.2f} | {transfer} | "
                       f"learn {r['learn']} | lost {r['retain_lost']}")
    if len(s.heldout_curve) > 2:
        out.append("held-out greedy mean by step: " + "  ".join(f"{k}:{v:.3f}" for k, v in s.heldout_curve.items()))
    out.append(f"gradient-bearing share of valid tasks: first 10% of steps {s.gradient_share_first:.2f} -> "
               f"last 10% {s.gradient_share_last:.2f}")
    out.append(f"verification pass rate: {s.valid_rate:.2%}")
    out.extend(s.protocol_notes)
    out.append("health alerts: " + (f"{s.alerts} (" + ", ".join(f"{k} {v}" for k, v in s.alerts_by_check.items())
                                    + f"), see {Path(s.run_dir) / 'alerts.jsonl'}" if s.alerts else "none"))
    if s.groups_first:
        keys = list(dict.fromkeys([*s.groups_first, *s.groups_last]))
        keys.sort(key=group_key)
        out.append(f"task distribution over {s.group_factor} values (first 10% -> last 10% of steps):")
        out.append("  " + "  ".join(f"{g}:{s.groups_first.get(g, 0):.2f}->{s.groups_last.get(g, 0):.2f}" for g in keys))
    if s.factor_coverage is not None:
        ctrl = ("" if s.controllability_first is None else
                f"controllability {s.controllability_first:.2f} -> {s.controllability_last or 0:.2f}, ")
        rho = "" if s.allocation_gap_spearman is None else f", allocation-gap rho {s.allocation_gap_spearman:.2f}"
        out.append(f"factor space: {ctrl}coverage {s.factor_coverage:.2f}, balance {s.factor_balance or 0:.2f}{rho}")
        for ch in s.factor_changes:
            ev = ch.get("evidence") or {}
            ctl = ch.get("control") or {}
            out.append(f"  step {ch['step']}: {ch['action']} {ch['factor']}"
                       + (f" (CMI {ev['cmi']:.4f} nats, null {ev['cmi_null']:.4f}, p {ev['p_value']:.3f}, "
                          f"n {ev['n_tasks']})" if ev else "")
                       + (f" (control {ctl['rate']:.2f}, chance {ctl['chance']:.2f}, {ctl['n_cards']} cards)"
                          if ctl else ""))
    if s.overlapped:
        out.append(f"time per step: {s.sec_per_step:.2f}s wall (generation {s.sec_generate:.2f}s, training "
                   f"{s.sec_train:.2f}s and other {s.sec_other:.2f}s, overlapped: max_staleness)")
    else:
        out.append(f"time per step: {s.sec_per_step:.2f}s = generation {s.sec_generate:.2f}s + training "
                   f"{s.sec_train:.2f}s + other {s.sec_other:.2f}s")
    return "\n".join(out)
