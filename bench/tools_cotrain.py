"""Co-training on the embedded tools world against the papers' controls (issue 22's outcome).

    python bench/tools_cotrain.py [--steps N] --seeds 1 2 3 [--jobs 2] [--arms ...] [KEY=VALUE ...]

Every arm runs ``--preset tools`` with the same seed, cards per step and episodes per card (the same
rollout budget per step: n_cards x k episodes; the Reasoner's initial weights and the held-out set depend
only on the seed). The arms:

=================  ==================================================================================
evosyn             co-training + EvoSyn (Designer + Reflector + learner feedback): the preset
evosyn-effect      evosyn with learning-effect feedback: the Designer's need and the Synthesizer's reward
                   (learnability=progress) scaled by each cell's measured learning effect
frozen             the paper's control: the Synthesizer frozen, no Designer, no Reflector
frozen-designer    the frozen Synthesizer steered by the Designer: what the Synthesizer's own RL adds
                   is evosyn - frozen-designer
static             a static corpus of gold tasks drawn once from the world's generator, revisited
=================  ==================================================================================

Prints per arm (mean ± sample std over seeds): held-out greedy success gain (mean over the run's held-out
groups: one per task family, ``tools.heldout_groups``), sampled gain, Learn / Retain (per held-out task, greedy), the gradient-bearing share of valid
tasks first -> last 10 % of steps, Reasoner episodes per step, and the structural metrics of the
synthesized tasks (interaction coverage, pattern diversity and contrastive support averaged over the
run, distinct gold action sequences at the end); then success per held-out group and each arm's paired
difference to ``frozen`` and ``static``; then per arm the learning effect as EvoSyn's Table 5 sums it up
(learning_effect.jsonl: targeted cells improved, allocation-gain rho, share-weighted gain per transition) and the
figures behind the causes issue 39 names: verified tasks per run, the share of the verified tasks in cells whose
training did not move the learner (pooled gain <= 0 over the run) and the share of the ``rw+`` pattern in the
last quarter's verified tasks. ``--out DIR`` keeps the runs and writes ``tools.json``.

``KEY=VALUE`` overrides reach every run of every arm (after the arm's own settings, so they win) and the
per-task held-out scoring before and after it, e.g. database variants and another warm start::

    python bench/tools_cotrain.py --seeds 1 2 3 tools.db_variants=16 reasoner.model_path=runs/ws/reasoner \
        synthesizer.model_path=runs/ws/synthesizer
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from cotrain_modes import arm_jobs, outcome, print_arm_table, print_levels, print_paired, run_jobs

from synco.config import load_config

ARMS: dict[str, list[str]] = {
    "evosyn": ["mode=cotrain", "evosyn.designer=true", "evosyn.reflector=true", "evosyn.feedback=true"],
    "evosyn-effect": ["mode=cotrain", "evosyn.designer=true", "evosyn.reflector=true", "evosyn.feedback=true",
                      "evosyn.designer_settings.effect=true", "synth_rewards.learnability=progress"],
    "frozen": ["mode=frozen", "evosyn.designer=false", "evosyn.reflector=false"],
    "frozen-designer": ["mode=frozen", "evosyn.designer=true", "evosyn.reflector=true"],
    "static": ["mode=static", "evosyn.designer=false", "evosyn.reflector=false"],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=None, help="steps per run (default: the tools preset's)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--jobs", type=int, default=2, help="runs in parallel, one torch thread each (default: %(default)s)")
    ap.add_argument("--out", type=Path, default=None, help="keep the runs here (default: a temporary folder)")
    ap.add_argument("overrides", nargs="*", help="extra config overrides applied to every run")
    args = ap.parse_args()

    root = args.out or Path(tempfile.mkdtemp(prefix="synco-tools-"))
    steps = args.steps or load_config("tools", overrides=args.overrides).steps  # refuses a bad override up front
    jobs = arm_jobs(ARMS, args.arms, args.seeds, steps, root, args.jobs, args.overrides)
    results = run_jobs(jobs, args.jobs, _run, lambda r: f"{r['sec_per_step']:.1f} s/step, "
                                                         f"coverage {r['coverage']:.2f}, sequences {r['sequences']}")
    print(f"\n# tools world, {steps} steps, seeds {args.seeds}, overrides {args.overrides or '-'}; runs in {root}\n")
    print_arm_table(results, [("episodes/step", "episodes", 0), ("interaction coverage", "coverage", 2),
                              ("pattern diversity", "diversity", 2), ("contrastive support", "contrast", 2),
                              ("distinct sequences", "sequences", 0), ("mean turns", "turns", 2),
                              ("s/step", "sec_per_step", 1)])
    print_levels(results, gain=False)
    print_paired(results, tuple(b for b in ("frozen", "static") if b in results), width=max(map(len, results)))
    print("\nlearning effect and the causes (mean ± std over seeds)")
    print_arm_table(results, [("verified tasks", "verified", 0), ("share in unmoved cells", "unmoved_share", 2),
                              ("rw+ share (last quarter)", "rw_plus_last", 2),
                              ("targeted improved", "targeted_rate", 2), ("alloc-gain rho", "alloc_gain_rho", 2),
                              ("gain by share / transition", "effect_gain", 3)])
    (root / "tools.json").write_text(json.dumps(results, indent=2))


def _run(job: tuple[str, int, list[str]]) -> dict:
    """One run in a worker process, then per-task greedy outcomes before / after for Learn / Retain (both with the
    job's config: its overrides choose the domain's settings and the Reasoner's weights there too)."""
    from synco.run.loop import train

    cfg = load_config("tools", overrides=job[2])
    s = train(cfg, log=lambda *a, **k: None)
    lines = [json.loads(x) for x in (Path(s.run_dir) / "metrics.jsonl").read_text().splitlines() if x.strip()]


    def avg(key: str) -> float | None:
        xs = [x[key] for x in lines if x.get(key) is not None]
        return statistics.mean(xs) if xs else None

    return {
        **outcome(cfg, s, _per_item),
        "episodes": statistics.mean(x["n_valid"] for x in lines) * cfg.k,
        "coverage": avg("interaction_coverage"), "diversity": avg("trajectory_diversity"),
        "contrast": avg("contrastive_support"), "turns": avg("mean_turns"),
        "sequences": lines[-1].get("distinct_action_sequences") if lines else None,
        "sec_per_step": s.sec_per_step,
        **effect_figures(Path(s.run_dir), cfg.steps),
    }


def effect_figures(run_dir: Path, steps: int) -> dict:
    """What a run's learning_effect.jsonl and pool say of the causes (see the module docstring)."""
    from synco.core.pool import TaskPool
    from synco.evosyn.effect import pooled_gain, summarize
    from synco.evosyn.run import read_effects

    effects = read_effects(run_dir)
    summary = summarize(effects)
    gains: dict[str, list[tuple[float, float]]] = {}
    for t in effects:
        for c in t.cells:
            gains.setdefault(c.cell, []).append((c.gain, c.gain_se))
    unmoved = {k for k, v in gains.items() if pooled_gain(v)[0] <= 0}
    with TaskPool(run_dir / "pool.sqlite") as pool:
        valid = [r for s in range(steps) for r in pool.by_step(s) if r.valid and r.card is not None]
    last = [r for r in valid if r.step >= steps - steps // 4]
    shares = [c.share for t in effects for c in t.cells]
    return {
        "verified": len(valid),
        "unmoved_share": (sum(c.share for t in effects for c in t.cells if c.cell in unmoved) / sum(shares)
                          if shares else None),
        "rw_plus_last": sum(r.card.factors.get("pattern") == "rw+" for r in last) / len(last) if last else None,
        "targeted_rate": summary.targeted_rate, "alloc_gain_rho": summary.allocation_gain_rho,
        "effect_gain": summary.mean_gain_weighted,
    }


def _per_item(cfg, run_dir: Path | None) -> dict[str, bool]:  # noqa: ANN001 - a RunConfig
    """Greedy success of each held-out task for the initial Reasoner (None) or a run's final one: one episode each."""
    from synco.core.episodes import EpisodeLimits
    from synco.core.sampling import SamplingParams
    from synco.rollout.attempts import heldout_successes
    from synco.learn.build import build_policy
    from synco.run.build import build_domain
    from synco.run.checkpoints import latest_checkpoint

    domain = build_domain(cfg)
    items = domain.heldout(cfg.heldout_per_group, seed=cfg.seed + 12345)
    ckpt = None if run_dir is None else latest_checkpoint(run_dir)
    policy = build_policy(cfg.reasoner, None if ckpt is None else str(ckpt / "reasoner"))
    params = SamplingParams(greedy=True, max_new_tokens=cfg.reasoner.sampling.max_new_tokens)
    wins = heldout_successes(policy, domain, items, 1, params, EpisodeLimits(cfg.max_turns, cfg.max_episode_tokens),
                             group_size=cfg.reasoner.generation_batch_size)
    return {f"{it.group}:{it.problem}": won for it, [won] in zip(items, wins)}


if __name__ == "__main__":
    main()
