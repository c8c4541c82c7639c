"""Why the tools world's Reasoner does not learn yet: the two measurements behind docs/TOOLS_WORLD.md.

    python bench/tools_diagnosis.py [--seed 0] [--per-group 50] [--threads 2] [KEY=VALUE ...]

``KEY=VALUE`` overrides of ``--preset tools`` choose the domain's settings, the Reasoner and the episode limits,
e.g. ``tools.db_variants=16`` (every episode on a database variant: if the warm Reasoner recalls values, its
training-distribution success falls toward its held-out one) or ``reasoner.model_path=runs/ws/reasoner``.

1. **Recall or reading?** The shipped tools Reasoner, greedy, on the held-out tasks of ``--seed`` (as a run with
   that seed draws them) and on as many training-distribution tasks of the same families (one drawn from the
   world's generator per held-out task): success overall and per family. A gap where the answer is a database
   value, and none where the agent only copies ids, is what recalling values instead of reading them looks like.
2. **Is the update right?** 16 static cards x 4 sampled episodes: the largest difference, over every agent id,
   between the log-prob sampling recorded and the one the GRPO update computes (masked rows, micro-batches of 16).
   0 means the first epoch's ratio is exactly 1.

The learning-rate sweep of the same page is three runs of the CLI (held-out mean at step 20 in heldout.jsonl):

    synco train --preset tools mode=static evosyn.designer=false evosyn.reflector=false reasoner.grpo.lr=LR

with LR 5e-5 (the preset's), 2e-4 and 5e-4.
"""

from __future__ import annotations

import argparse
import json
import random
from collections import defaultdict

import torch

from synco.config import RunConfig, load_config
from synco.core.episodes import EpisodeLimits
from synco.core.sampling import SamplingParams
from synco.core.records import TaskCard
from synco.domains.tools.domain import ToolsDomain
from synco.learn.build import resolve_model_path
from synco.learn.hf_policy import HFPolicy
from synco.rollout.attempts import heldout_successes
from synco.rollout.episodes import act
from synco.run.build import build_domain


def diagnosis_setup(overrides: list[str]) -> tuple[RunConfig, ToolsDomain, EpisodeLimits, SamplingParams]:
    """The tools preset with ``overrides``: its config, its domain (``tools.*`` settings), the episode limits and the
    greedy sampling of the Reasoner's turns."""
    cfg = load_config("tools", overrides=overrides)
    domain = build_domain(cfg)
    if not isinstance(domain, ToolsDomain):
        raise SystemExit(f"domain={cfg.domain!r}: this diagnosis is for the tools world")
    return (cfg, domain, EpisodeLimits(cfg.max_turns, cfg.max_episode_tokens),
            SamplingParams(greedy=True, max_new_tokens=cfg.reasoner.sampling.max_new_tokens))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0, help="the run seed whose held-out set is used (default: %(default)s)")
    ap.add_argument("--per-group", type=int, default=50, help="held-out tasks per writes group (default: %(default)s)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="overrides of --preset tools")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    cfg, domain, limits, greedy = diagnosis_setup(args.overrides)
    policy = HFPolicy.from_config(cfg.reasoner.model_copy(update={
        "model_path": resolve_model_path(cfg.reasoner.model_path)}))

    items = domain.heldout(args.per_group, seed=args.seed + 12345)  # as setup_run draws them
    held = [domain.heldout_card(it) for it in items]
    rng = random.Random(f"diagnosis-{args.seed}")
    train = []
    for card in held:
        task = domain.sample_task(rng, card.difficulty_estimate)
        train.append(_card(domain, task, card.difficulty_estimate))
    held_wins = [w for [w] in heldout_successes(policy, domain, items, 1, greedy, limits, group_size=256)]
    train_eps = act(policy, domain, train, [domain.oracle(c) for c in train], 1, greedy, limits, group_size=256)
    train_wins = [bool(ep.grade and ep.grade.correct) for [ep] in train_eps]
    by_family: dict[str, list[list[bool]]] = defaultdict(lambda: [[], []])
    for card, h, t in zip(held, held_wins, train_wins):
        by_family[card.difficulty_estimate][0].append(h)
        by_family[card.difficulty_estimate][1].append(t)
    print(f"1. Reasoner {cfg.reasoner.model_path}, greedy, tools.db_variants={cfg.tools.db_variants}: held-out "
          f"{_rate(held_wins)}, same families from the generator {_rate(train_wins)} ({len(items)} tasks each, "
          f"run seed {args.seed})")
    print("| family | tasks | held-out | training distribution |\n|---|---|---|---|")
    for family, (h, t) in sorted(by_family.items(), key=lambda kv: -len(kv[1][0])):
        print(f"| {family} | {len(h)} | {_rate(h)} | {_rate(t)} |")

    cards = [TaskCard(**json.loads(c)) for c in domain.static_cards(random.Random(0), 16)]
    episodes = act(policy, domain, cards, [domain.oracle(c) for c in cards], 4,
                   SamplingParams(temperature=1.0, max_new_tokens=24), limits, seed=5, group_size=64)
    rows = [ep.to_experience(1.0) for group in episodes for ep in group]
    worst = 0.0
    with torch.no_grad():
        for start in range(0, len(rows), 16):
            chunk = rows[start:start + 16]
            logp, _ = policy._completion_logprobs(policy.model, chunk)
            for r, row in enumerate(chunk):
                n = len(row.completion_ids)
                mask = torch.tensor(row.loss_mask or [1] * n, dtype=torch.bool)
                diff = (logp[r, :n] - torch.tensor(row.old_logprobs))[mask].abs()
                worst = max(worst, float(diff.max()))
    print(f"\n2. {len(rows)} sampled episodes: largest |training - sampling log-prob| over agent ids = {worst:.3g}")


def _card(domain: ToolsDomain, task, family: str) -> TaskCard:  # noqa: ANN001 - a tools Task
    return TaskCard(**json.loads(domain.format_card(task.instruction, task.actions, task.outputs, family)))


def _rate(xs: list[bool]) -> str:
    return f"{sum(xs) / len(xs):.2f}" if xs else "-"


if __name__ == "__main__":
    main()
