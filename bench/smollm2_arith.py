"""Does SmolLM2-135M-Instruct learn arithmetic under co-training on CPU? (issue 25, docs/SMOLLM2_ARITH.md)

Three commands, each one model process at a time on ``--threads`` threads:

* ``python bench/smollm2_arith.py base [--n 50] [--levels L1,...,L11] [--samples 2] [--mul '*']`` -- the
  Reasoner's held-out accuracy per level before any training, greedy and sampled (the preset's sampling,
  ``--samples`` answers per problem) on the held-out problems a run of ``--seed`` evaluates, with the preset's prompt (``--mul`` writes ``*`` another way, e.g. ``×``,
  to compare prompts). Each rate with its binomial standard error.
* ``python bench/smollm2_arith.py step [--lora] [--steps 3]`` -- seconds per co-training step of the preset,
  full fine-tuning or LoRA (``--lora``: rank 16 on every linear layer), from a scratch run directory.
* ``python bench/smollm2_arith.py compare --seeds 1 2 3 [--steps 30] [--arms cotrain frozen]`` -- the learning
  result: for each seed and arm, ``synco train --preset smollm2-arith`` (``cotrain``: both agents learn, with
  EvoSyn; ``frozen``: the Synthesizer fixed, the paper's control), then per level the held-out accuracy
  before -> after (greedy and sampled) and the gain, mean +- standard error over seeds, per arm the
  gain's mean over levels, and Learn / Retain: the share of held-out problems newly solved and the share
  forgotten (greedy, per problem; from the run's ``summary.json``, or for a run directory written before
  runs recorded it, by evaluating the initial and the final Reasoner on the run's problems, checked against
  the run's own per-level numbers). Seed 0 is the tuning seed: leave it out of a result. Extra ``KEY=VALUE``
  arguments after ``--`` go to every run (e.g. ``-- steps=20``). ``--json`` prints one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

PRESET = "smollm2-arith"


@dataclass(frozen=True)
class Rate:
    """A success rate over ``n`` trials and its binomial standard error."""

    hits: int
    n: int

    @property
    def p(self) -> float:
        return self.hits / self.n if self.n else float("nan")

    @property
    def se(self) -> float:
        return math.sqrt(self.p * (1 - self.p) / self.n) if self.n else float("nan")

    def __str__(self) -> str:
        return f"{self.p:.3f} +- {self.se:.3f} ({self.hits}/{self.n})"


@dataclass(frozen=True)
class MeanSE:
    """Mean and standard error of the mean over seeds (se NaN for one seed)."""

    mean: float
    se: float
    n: int

    def __str__(self) -> str:
        return f"{self.mean:.3f} +- {self.se:.3f} (n={self.n})"


def mean_se(values: list[float]) -> MeanSE:
    """Mean and standard error (sample standard deviation / sqrt(n)) of ``values``."""
    n = len(values)
    if n == 0:
        return MeanSE(float("nan"), float("nan"), 0)
    m = sum(values) / n
    if n == 1:
        return MeanSE(m, float("nan"), 1)
    var = sum((v - m) ** 2 for v in values) / (n - 1)
    return MeanSE(m, math.sqrt(var / n), n)


def gains(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """``after - before`` per level both have."""
    return {g: after[g] - before[g] for g in before if g in after}


# ----------------------------------------------------------------- base


def base(args: argparse.Namespace) -> dict[str, object]:
    """Held-out accuracy of the untrained Reasoner per level, greedy and sampled, evaluated as a run does
    (``synco.run.heldout``: the same batches, so a run's ``heldout_before`` on these levels is reproduced)."""
    import torch

    from synco.config import load_config
    from synco.domains.arith_chat import ArithChatDomain
    from synco.grading.checker import AnswerChecker
    from synco.run.heldout import evaluate_heldout
    from synco.run.setup import heldout_seed
    from synco.learn.build import build_policy

    torch.set_num_threads(args.threads)
    cfg = load_config(PRESET, overrides=[f"seed={args.seed}"])
    domain = ArithChatDomain(heldout_levels=args.levels, mul_sign=args.mul)
    items = domain.heldout(args.n, heldout_seed(args.seed))  # the very problems a run of this seed evaluates
    policy = build_policy(cfg.reasoner.model_copy(update={"trainable": False}))
    out: dict[str, object] = {"n": args.n, "levels": args.levels, "mul": args.mul, "seed": args.seed}
    with AnswerChecker() as checker:
        t = time.perf_counter()
        greedy = evaluate_heldout(policy, domain, items, checker, cfg.reasoner.sampling.max_new_tokens,
                                  group_size=cfg.reasoner.generation_batch_size)
        out["greedy_seconds"] = round(time.perf_counter() - t, 1)
        out["greedy"] = {g: str(Rate(round(p * args.n), args.n)) for g, p in greedy.items()}
        if args.samples:
            t = time.perf_counter()
            sampled = evaluate_heldout(policy, domain, items, checker, 0, params=cfg.reasoner.sampling,
                                       n=args.samples, seed=args.seed, group_size=cfg.reasoner.generation_batch_size)
            out["sampled_seconds"] = round(time.perf_counter() - t, 1)
            m = args.n * args.samples
            out["sampled"] = {g: str(Rate(round(p * m), m)) for g, p in sampled.items()}
    return out


# ----------------------------------------------------------------- step


def step(args: argparse.Namespace) -> dict[str, object]:
    """Seconds per co-training step of the preset (full fine-tuning, or LoRA with ``--lora``)."""
    import tempfile

    from synco.config import load_config
    from synco.run.loop import train

    overrides = [f"steps={args.steps}", "heldout_per_group=0", f"seed={args.seed}", "tensorboard=false",
                 "progress=false", f"threads={args.threads}", *args.overrides]
    if args.lora:
        overrides += ["reasoner.lora.rank=16", "reasoner.lora.alpha=32", "reasoner.grpo.lr=1.0e-4"]
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(PRESET, overrides=[*overrides, f"runs_dir={tmp}", "run_id=step"])
        train(cfg, log=lambda *a: print(*a, file=sys.stderr, flush=True))
        rows = [json.loads(line) for line in (Path(tmp) / "step" / "metrics.jsonl").read_text().splitlines()]
    keys = ("t_generate", "t_train", "t_other")
    per_step = [{k: round(r.get(k, 0.0), 2) for k in keys} for r in rows]
    total = [sum(s.values()) for s in per_step]
    return {"lora": args.lora, "steps": per_step, "sec_per_step": [round(x, 2) for x in total],
            "n_valid": [r.get("n_valid") for r in rows], "n_gradient_bearing": [r.get("n_gradient_bearing") for r in rows],
            "reasoner_accuracy": [round(r.get("reasoner_accuracy") or 0.0, 3) for r in rows]}


# ----------------------------------------------------------------- compare


def run_one(seed: int, arm: str, runs_dir: Path, threads: int, extra: list[str]) -> dict[str, object]:
    """One ``synco train --preset smollm2-arith`` run of ``arm`` (``cotrain`` or ``frozen``); its held-out numbers
    and Learn / Retain shares."""
    from synco.config import load_config
    from synco.run.loop import train

    run_id = f"{arm}-s{seed}"
    cfg = load_config(PRESET, overrides=[f"seed={seed}", f"mode={arm}", f"runs_dir={runs_dir}", f"run_id={run_id}",
                                         f"threads={threads}", "progress=false", "tensorboard=false", *extra])
    summary_file = runs_dir / run_id / "summary.json"
    if not summary_file.is_file():  # a finished run is read, not repeated (the bench can be resumed)
        train(cfg, log=lambda *a: print(*a, file=sys.stderr, flush=True))  # stdout is the bench's result
    s = json.loads(summary_file.read_text())
    out: dict[str, object] = {k: s.get(k) or {} for k in ("heldout_before", "heldout_after", "heldout_sampled_before",
                                                            "heldout_sampled_after")}
    lr = s.get("heldout_learn_retain") or backfill_learn_retain(cfg, runs_dir / run_id, s, runs_dir)
    out["learn"], out["retain"] = lr["learn_gain"] / lr["n"], -lr["retain_loss"] / lr["n"]
    return out


def item_scores(cfg, reasoner_path: str | None):
    """Greedy held-out scores per level and per problem of the preset's Reasoner (initial when ``reasoner_path``
    is None), on the problems, batches and seeds a run of ``cfg`` evaluates."""
    from synco.grading.checker import AnswerChecker
    from synco.run.heldout import evaluate_heldout_scores
    from synco.run.setup import heldout_seed
    from synco.learn.build import build_policy
    from synco.run.build import build_domain

    domain = build_domain(cfg)
    items = domain.heldout(cfg.heldout_per_group, seed=heldout_seed(cfg.seed))
    policy = build_policy(cfg.reasoner.model_copy(update={"trainable": False}), reasoner_path)
    with AnswerChecker() as checker:
        return evaluate_heldout_scores(policy, domain, items, checker, cfg.reasoner.sampling.max_new_tokens,
                                       seed_per_request=cfg.seed_per_request,
                                       group_size=cfg.reasoner.generation_batch_size)


def backfill_learn_retain(cfg, run_dir: Path, summary: dict, runs_dir: Path) -> dict:
    """Learn / Retain of a run directory whose summary predates it: the initial and final Reasoner evaluated per
    problem (cached beside the runs), refused unless they reproduce the run's own per-level held-out numbers."""
    from synco.core.learn_retain import learn_retain
    from synco.run.checkpoints import latest_checkpoint

    def cached(path: Path, reasoner: str | None, expect: dict[str, float]) -> dict[str, float]:
        if path.is_file():
            scores = json.loads(path.read_text())
        else:
            got = item_scores(cfg, reasoner)
            scores = {"groups": got.groups, "items": got.items}
            path.write_text(json.dumps(scores))
        if any(abs(scores["groups"].get(g, -1.0) - v) > 1e-9 for g, v in expect.items()):
            raise SystemExit(f"{path}: per-level accuracy {scores['groups']} does not reproduce the run's {expect}")
        return scores["items"]

    ckpt = latest_checkpoint(run_dir)
    if ckpt is None:
        raise SystemExit(f"{run_dir}: no checkpoint to evaluate for Learn / Retain")
    before = cached(runs_dir / f"base-s{cfg.seed}.items.json", None, summary["heldout_before"])
    after = cached(runs_dir / f"{run_dir.name}.items.json", str(ckpt / "reasoner"), summary["heldout_after"])
    return learn_retain("heldout", before, after).model_dump()


def summarise(results: dict[str, list[dict[str, object]]]) -> dict[str, object]:
    """Per arm and level: greedy / sampled before, after and gain, mean +- s.e. over seeds; the mean gain; Learn and
    Retain (shares of the held-out problems) when every run has them."""
    out: dict[str, object] = {}
    for arm, runs in results.items():
        arm_out: dict[str, object] = {}
        for kind, (b, a) in {"greedy": ("heldout_before", "heldout_after"),
                             "sampled": ("heldout_sampled_before", "heldout_sampled_after")}.items():
            levels = sorted({g for r in runs for g in r[b]}, key=lambda g: int(g[1:]) if g[1:].isdigit() else 99)
            table = {}
            for g in levels:
                have = [r for r in runs if g in r[b] and g in r[a]]
                table[g] = {"before": str(mean_se([r[b][g] for r in have])),
                            "after": str(mean_se([r[a][g] for r in have])),
                            "gain": str(mean_se([r[a][g] - r[b][g] for r in have]))}
            mean_gain = [sum(gains(r[b], r[a]).values()) / max(len(gains(r[b], r[a])), 1) for r in runs if r[b]]
            arm_out[kind] = {"levels": table, "mean_gain": str(mean_se(mean_gain))}
        if all("learn" in r for r in runs):  # greedy, per held-out problem; Learn + Retain = the item-weighted gain
            arm_out["learn"] = str(mean_se([r["learn"] for r in runs]))
            arm_out["retain"] = str(mean_se([r["retain"] for r in runs]))
        out[arm] = arm_out
    return out


def compare(args: argparse.Namespace) -> dict[str, object]:
    """Every (seed, arm) run in turn, then the per-level summary over seeds."""
    runs_dir = Path(args.runs_dir)
    results: dict[str, list[dict[str, object]]] = {arm: [] for arm in args.arms}
    for seed in args.seeds:
        for arm in args.arms:
            t = time.perf_counter()
            results[arm].append(run_one(seed, arm, runs_dir, args.threads, args.overrides))
            print(f"[{arm} seed {seed}: {time.perf_counter() - t:.0f} s]", file=sys.stderr, flush=True)
    return {"seeds": args.seeds, "overrides": args.overrides, "arms": summarise(results)}


# ----------------------------------------------------------------- transfer


def transfer(args: argparse.Namespace) -> dict[str, object]:
    """``synco eval`` of the untrained and each trained Reasoner on the benchmarks; Learn / Retain against the first."""
    from synco.analysis.compare import compare as learn_retain_dirs
    from synco.analysis.compare import read_eval_dir
    from synco.cli import main as synco
    from synco.run.checkpoints import latest_checkpoint

    runs_dir = Path(args.runs_dir)
    options = ["--benchmarks", *args.benchmarks, "--data-dir", args.data_dir, "--greedy", "--max-tokens",
               str(args.max_tokens), "--limit", str(args.limit), "--threads", str(args.threads), "--no-progress"]

    def evaluate(model: str, name: str):  # noqa: ANN202 - an EvalResults
        out = runs_dir / "eval" / name
        with contextlib.redirect_stdout(sys.stderr):  # the eval's tables; stdout is the bench's result
            rc = synco(["eval", "--model", model, "--out", str(out), *options])
        if rc != 0:
            raise SystemExit(f"synco eval of {model} into {out} failed")
        return read_eval_dir(out)

    base = evaluate("smollm2", "base")
    runs: dict[str, dict[str, object]] = {}
    pooled_gain: dict[str, list[float]] = {arm: [] for arm in args.arms}
    for seed in args.seeds:
        for arm in args.arms:
            run_id = f"{arm}-s{seed}"
            ckpt = latest_checkpoint(runs_dir / run_id)
            if ckpt is None:
                raise SystemExit(f"{runs_dir / run_id}: no checkpoint (run `compare` for seed {seed} first)")
            c = learn_retain_dirs(base, evaluate(str(ckpt / "reasoner"), run_id))
            runs[run_id] = {r.benchmark: {"before": round(100 * (r.base_accuracy or 0), 1),
                                          "after": round(100 * (r.trained_accuracy or 0), 1),
                                          "learn": r.learn_gain, "retain": -r.retain_loss}
                            for r in [*c.benchmarks, c.pooled]}
            pooled_gain[arm].append(100 * (c.pooled.delta or 0.0))
    return {"seeds": args.seeds, "limit": args.limit, "runs": runs,
            "pooled_gain_points": {arm: str(mean_se(g)) for arm, g in pooled_gain.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("base", help="held-out accuracy of the untrained Reasoner per level")
    b.add_argument("--n", type=int, default=50, help="held-out problems per level")
    b.add_argument("--levels", default="L1,L2,L3,L4,L5,L6,L7,L8,L9,L10,L11")
    b.add_argument("--samples", type=int, default=2, help="sampled answers per problem (0: greedy only)")
    b.add_argument("--mul", default="*", help="how the prompt writes multiplication")
    s = sub.add_parser("step", help="seconds per co-training step")
    s.add_argument("--lora", action="store_true")
    s.add_argument("--steps", type=int, default=3)
    c = sub.add_parser("compare", help="co-training + EvoSyn against the frozen Synthesizer, over seeds")
    c.add_argument("--seeds", type=int, nargs="+", required=True)
    c.add_argument("--arms", nargs="+", default=["cotrain", "frozen"], choices=("cotrain", "frozen", "static"))
    c.add_argument("--runs-dir", default="runs/smollm2_arith_bench")
    t = sub.add_parser("transfer", help="synco eval on SVAMP / ASDiv / GSM8K before and after each run")
    t.add_argument("--seeds", type=int, nargs="+", required=True)
    t.add_argument("--arms", nargs="+", default=["cotrain"], choices=("cotrain", "frozen", "static"))
    t.add_argument("--runs-dir", default="runs/smollm2_arith_bench", help="compare's run directories")
    t.add_argument("--data-dir", default="data/benchmarks", help="folder of <name>/test.jsonl files (synco data)")
    t.add_argument("--benchmarks", nargs="+", default=["svamp", "asdiv", "gsm8k"])
    t.add_argument("--limit", type=int, default=100, help="the first N problems of each benchmark")
    t.add_argument("--max-tokens", type=int, default=192)
    for p in (b, s, c, t):
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--threads", type=int, default=1)
        p.add_argument("--json", action="store_true")
    args, overrides = parser.parse_known_args(argv)
    args.overrides = [o for o in overrides if o != "--"]
    if any("=" not in o for o in args.overrides):
        parser.error(f"extra arguments must be KEY=VALUE overrides, got {args.overrides}")
    if args.command == "base":
        args.levels = [lv.strip() for lv in args.levels.split(",") if lv.strip()]
        if args.n < 1:
            parser.error(f"--n must be >= 1, got {args.n}")
    if args.command == "compare" and 0 in args.seeds:
        print("note: seed 0 is the tuning seed (docs/SMOLLM2_ARITH.md); its numbers are no result", file=sys.stderr)
    result = {"base": base, "step": step, "compare": compare, "transfer": transfer}[args.command](args)
    print(json.dumps(result, indent=None if args.json else 2, default=lambda o: asdict(o)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
