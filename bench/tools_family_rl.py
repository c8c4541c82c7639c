"""GRPO on training tasks of chosen families, held-out tasks of chosen families before and after (docs/TOOLS_WORLD.md).

    python bench/tools_family_rl.py --reasoner DIR [--train transfer,transfer_all,buy] [--eval FAMILIES] [--lora RANK]
                                    [--control] [--steps 30] [--lr 5e-5] [--epochs 4] [--seed 0 [1 ...]]

Does what GRPO teaches the tools Reasoner carry to held-out tasks, when its training tasks are of families it
partly solves? No Synthesizer, no Designer: every step draws ``--tasks`` training tasks evenly over the ``--train``
families from the world's generator (never a held-out one; ``all``: every family), runs ``--k`` episodes on each
(T = 1, the preset's episode limits; ``--no-repeat``: never an instruction drawn before), and takes one GRPO update (``--epochs`` optimizer steps) with the Reasoner's
own learner. Held-out: ``--heldout`` distinct tasks per ``--eval`` family (default: the training families) from the
world's held-out hash bucket, which no training path draws; one greedy episode and 4 sampled episodes (T = 1) each,
before and after. Prints training success every 5 steps, then per family greedy and sampled success before ->
after and the greedy Learn / Retain (held-out tasks newly solved / newly failed). With several seeds (one run
each, in turn) it also prints the mean ± standard error of the gains; ``--control`` adds, per seed, the run trained
on every family and the paired difference. docs/TOOLS_WORLD.md's table:

    python bench/tools_family_rl.py --reasoner WS400/reasoner --seed 1 2 3 --control
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

import torch

from synco.core.episodes import EpisodeLimits
from synco.core.policy import GRPOConfig, LoraSettings, PolicyConfig
from synco.core.sampling import SamplingParams
from synco.core.records import TaskCard
from synco.cotrain.batches import groups_batch
from synco.domains.base import HeldoutItem
from synco.domains.tools import ToolsDomain
from synco.domains.tools.syntax import format_outputs
from synco.domains.tools.tasks import FAMILY_NAMES, Task, is_heldout_task, raw_task
from synco.learn.hf_policy import HFPolicy
from synco.rollout.attempts import episode_attempt, heldout_successes
from synco.rollout.episodes import act

LIMITS = EpisodeLimits(8, 400)  # the preset's max_turns and max_episode_tokens
GREEDY = SamplingParams(greedy=True, max_new_tokens=24)
SAMPLED = SamplingParams(temperature=1.0, max_new_tokens=24)


def families(arg: str) -> list[str]:
    names = list(FAMILY_NAMES) if arg == "all" else [f.strip() for f in arg.split(",") if f.strip()]
    unknown = [f for f in names if f not in FAMILY_NAMES]
    if unknown or not names:
        raise SystemExit(f"unknown families {unknown or arg!r}; known: {', '.join(FAMILY_NAMES)} (or all)")
    return names


def heldout_tasks(domain: ToolsDomain, family: str, n: int, rng: random.Random) -> list[Task]:
    """Up to ``n`` distinct tasks of ``family`` from the held-out bucket (some families have only a few)."""
    found: dict[str, Task] = {}
    for _ in range(20_000):
        task = raw_task(domain.db, rng, family)
        if is_heldout_task(task.actions, task.outputs):
            found.setdefault(task.instruction, task)
        if len(found) >= n:
            break
    return list(found.values())


def draw(domain: ToolsDomain, rng: random.Random, family: str, seen: set[str] | None) -> Task | None:
    """A training task of ``family``; with ``seen`` (``--no-repeat``), one whose instruction no earlier step drew, as a
    run's pool novelty check demands (None when 50 draws find none: the slot goes unused, like a rejected card)."""
    for _ in range(50 if seen is not None else 1):
        task = domain.sample_task(rng, family)
        if seen is None:
            return task
        if task.instruction not in seen:
            seen.add(task.instruction)
            return task
    return None


def card(domain: ToolsDomain, task: Task, family: str) -> TaskCard:
    return TaskCard(**json.loads(domain.format_card(task.instruction, task.actions, task.outputs, family)))


def score(policy: HFPolicy, domain: ToolsDomain, held: dict[str, list[Task]]) -> dict[str, tuple[list[bool], float]]:
    """Per family: each task's greedy success, and the sampled success rate (4 episodes per task, seeded), through
    the run's own held-out path (:func:`~synco.rollout.attempts.heldout_successes`)."""
    out = {}
    for family, tasks in held.items():
        items = [HeldoutItem(t.instruction, format_outputs(t.outputs), family) for t in tasks]
        wins = [won for [won] in heldout_successes(policy, domain, items, 1, GREEDY, LIMITS)]
        sampled = heldout_successes(policy, domain, items, 4, SAMPLED, LIMITS, seed=7)
        out[family] = (wins, sum(map(sum, sampled)) / (4 * len(tasks)))
    return out


def run_arm(args: argparse.Namespace, train_arg: str, evals: list[str], seed: int) -> tuple[float, float]:
    """One run from the given Reasoner: GRPO on ``train_arg``'s families, held-out ``evals`` before and after; prints
    its table and returns the greedy and the sampled gain over all its held-out tasks."""
    train = families(train_arg)
    domain = ToolsDomain()
    lora = LoraSettings(rank=args.lora, alpha=2.0 * args.lora) if args.lora else None
    policy = HFPolicy.from_config(PolicyConfig(model_path=args.reasoner, device="cpu", add_bos=False, lora=lora,
                                               grpo=GRPOConfig(lr=args.lr, epochs=args.epochs, micro_batch_size=64,
                                                               kl_coef=args.kl)))
    held_rng = random.Random(f"heldout:{seed}")
    held = {f: tasks for f in evals if (tasks := heldout_tasks(domain, f, args.heldout, held_rng))}
    before = score(policy, domain, held)
    rng = random.Random(f"train:{seed}")
    seen: set[str] = set()
    t0 = time.perf_counter()
    for step in range(args.steps):
        draws = [rng.choice(train) for _ in range(args.tasks)] if train_arg == "all" else \
            [train[i % len(train)] for i in range(args.tasks)]
        tasks = [(t, f) for f in draws if (t := draw(domain, rng, f, seen if args.no_repeat else None)) is not None]
        if not tasks:  # --no-repeat: every slot's family ran out of unseen tasks
            continue
        cards = [card(domain, t, f) for t, f in tasks]
        groups = act(policy, domain, cards, [c.payload.claimed_answer() for c in cards], args.k, SAMPLED, LIMITS,
                     seed=seed * 100_003 + step)
        rewards = [[e.grade.reward if e.grade else 0.0 for e in g] for g in groups]
        attempts = [[episode_attempt(e) if e.grade else None for e in g] for g in groups]  # an episode trains as its Attempt
        batch, _ = groups_batch(attempts, rewards, True)
        if batch:
            policy.update(batch)
        if (step + 1) % 5 == 0:
            print(f"step {step + 1}: training success {sum(map(sum, rewards)) / (args.k * len(tasks)):.3f} "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
    after = score(policy, domain, held)
    print(f"\nreasoner {args.reasoner}; trained on {train_arg}, {args.steps} steps x {args.tasks} tasks x {args.k} "
          f"episodes, lr {args.lr:g}, {args.epochs} epochs"
          f"{f', LoRA rank {args.lora}' if args.lora else ''}{f', KL {args.kl:g}' if args.kl else ''}, seed {seed}")
    print("| family | held-out tasks | greedy before -> after | sampled before -> after | Learn | Retain |")
    print("|---|---|---|---|---|---|")
    tot = [0, 0, 0, 0.0, 0.0, 0, 0]
    for family in held:
        (wb, sb), (wa, sa) = before[family], after[family]
        n, learn, retain = len(wb), sum(not b and a for b, a in zip(wb, wa)), sum(b and not a for b, a in zip(wb, wa))
        print(f"| {family} | {n} | {sum(wb) / n:.3f} -> {sum(wa) / n:.3f} | {sb:.3f} -> {sa:.3f} | {learn} | {retain} |")
        tot = [tot[0] + n, tot[1] + sum(wb), tot[2] + sum(wa), tot[3] + sb * n, tot[4] + sa * n, tot[5] + learn,
               tot[6] + retain]
    n = tot[0]
    print(f"| all | {n} | {tot[1] / n:.3f} -> {tot[2] / n:.3f} | {tot[3] / n:.3f} -> {tot[4] / n:.3f} | "
          f"{tot[5]} | {tot[6]} |", flush=True)
    return (tot[2] - tot[1]) / n, (tot[4] - tot[3]) / n


def mean_se(values: list[float]) -> str:
    """``mean ± standard error`` over seeds (no s.e. for one value)."""
    mean = statistics.fmean(values)
    return f"{mean:+.3f}" if len(values) < 2 else f"{mean:+.3f} ± {statistics.stdev(values) / len(values) ** 0.5:.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reasoner", required=True, help="the Reasoner's folder (e.g. a `synco pretrain` output's reasoner/)")
    ap.add_argument("--train", default="transfer,transfer_all,buy", help="families of the training tasks, or all")
    ap.add_argument("--eval", default=None, help="families of the held-out tasks (default: --train's)")
    ap.add_argument("--control", action="store_true",
                    help="also run every seed with --train all on the same held-out families (the same budget spread "
                         "over every family) and print the paired difference")
    ap.add_argument("--no-repeat", action="store_true",
                    help="never train on an instruction twice (a run's pool novelty check without a window); a slot "
                         "whose family has no unseen task left goes unused")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--tasks", type=int, default=32, help="training tasks per step (default: %(default)s)")
    ap.add_argument("--k", type=int, default=8, help="episodes per training task (default: %(default)s)")
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--epochs", type=int, default=4, help="optimizer steps per GRPO update (default: %(default)s)")
    ap.add_argument("--lora", type=int, default=0, metavar="RANK",
                    help="train LoRA adapters of this rank (alpha 2 x rank) on every linear layer instead of every "
                         "weight (default: 0, full fine-tuning)")
    ap.add_argument("--kl", type=float, default=0.0, help="k3 KL penalty to the initial policy (default: 0)")
    ap.add_argument("--heldout", type=int, default=40, help="held-out tasks per eval family (default: %(default)s)")
    ap.add_argument("--seed", type=int, nargs="+", default=[0], dest="seeds",
                    help="one run per seed (its held-out draw and training draws); several: mean ± s.e. of the gains")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    families(args.train)
    evals = families(args.eval or args.train)
    arms = [args.train, *(["all"] if args.control else [])]
    gains: dict[str, list[tuple[float, float]]] = {arm: [] for arm in arms}
    for seed in args.seeds:
        for arm in arms:
            gains[arm].append(run_arm(args, arm, evals, seed))
    if len(args.seeds) < 2 and not args.control:
        return
    print(f"\nheld-out gain on {', '.join(evals)} over seeds {' '.join(map(str, args.seeds))} (greedy | sampled):")
    for arm, g in gains.items():
        print(f"  trained on {arm}: {mean_se([x for x, _ in g])} | {mean_se([y for _, y in g])}")
    if args.control:
        diff = [(a[0] - b[0], a[1] - b[1]) for a, b in zip(gains[args.train], gains["all"])]
        print(f"  paired, {args.train} - all: {mean_se([x for x, _ in diff])} | {mean_se([y for _, y in diff])}")


if __name__ == "__main__":
    main()
