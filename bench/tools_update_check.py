"""Does one GRPO update on tools-world episodes do what it should? (issue 22, docs/TOOLS_WORLD.md)

    python bench/tools_update_check.py [--lr 5e-5] [--steps 4] [--per-family 2] [KEY=VALUE ...]

A fixed set of tasks (``--per-family`` of each family, drawn with seed 0) is attempted 8 times each by the
``--preset tools`` Reasoner (overrides such as ``tools.db_variants=16 reasoner.model_path=DIR`` apply);
the gradient-bearing episodes form a GRPO batch; the Reasoner takes one update on it. Printed per step:
the success rate on the tasks, the batch's objective J = mean over rows of advantage x (sum of the agent's
log-probs) before -> after the update (a correct update on its own batch raises J at a small learning rate),
the importance ratio and the clipped share. Repeated ``--steps`` times on the same tasks, it is also the
cheapest check of whether RL moves the Reasoner on tasks it sees again and again.
"""

from __future__ import annotations

import argparse
import random
import tempfile


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lr", type=float, default=None, help="the Reasoner's learning rate (default: the preset's)")
    ap.add_argument("--steps", type=int, default=4, help="updates, each on fresh episodes of the same tasks")
    ap.add_argument("--per-family", type=int, default=2, help="tasks per family in the fixed set")
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE config overrides of --preset tools")
    args = ap.parse_args(argv)

    import torch

    from synco.config import load_config
    from synco.core.episodes import EpisodeLimits
    from synco.cotrain.batches import group_experiences
    from synco.domains.base import HeldoutItem
    from synco.rollout.episodes import act
    from synco.run.setup import setup_run

    torch.set_num_threads(1)
    lr = [] if args.lr is None else [f"reasoner.grpo.lr={args.lr}"]
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config("tools", overrides=[*args.overrides, *lr, "heldout_per_group=0", "progress=false",
                                              "tensorboard=false", f"runs_dir={tmp}", "run_id=check", "threads=1"])
        state = setup_run(cfg).state
        domain, policy = state.domain, state.reasoner
        rng = random.Random(0)
        tasks = [domain.sample_task(rng, f) for f in domain.families for _ in range(args.per_family)]
        cards = [domain.heldout_card(HeldoutItem(t.instruction, "", "")) for t in tasks]
        references = [c.payload.claimed_answer() for c in cards]
        limits = EpisodeLimits(cfg.max_turns, cfg.max_episode_tokens)

        def objective(batch) -> float:  # noqa: ANN001
            total = 0.0
            with torch.no_grad():
                for s in range(0, len(batch), 64):
                    rows = batch[s:s + 64]
                    logp, mask = policy._completion_logprobs(policy.model, rows)
                    adv = torch.tensor([e.advantage for e in rows], dtype=logp.dtype)
                    total += float(((logp * mask).sum(1) * adv).sum())
            return total / max(len(batch), 1)

        print(f"{len(cards)} tasks x 8 episodes, lr {cfg.reasoner.grpo.lr:g}")
        for step in range(args.steps):
            episodes = act(policy, domain, cards, references, 8, cfg.reasoner.sampling, limits)
            batch = [x for g in episodes for x in group_experiences(g, [e.grade.reward for e in g], True)
                     if x.advantage != 0]
            success = sum(e.grade.correct for g in episodes for e in g) / sum(len(g) for g in episodes)
            before = objective(batch)
            stats = policy.update(batch)
            after = objective(batch)
            print(f"step {step}: success {success:.3f}, {len(batch)} gradient-bearing rows, J {before:.4f} -> "
                  f"{after:.4f}, ratio {stats.ratio_mean:.4f}, clipped {stats.clip_frac:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
