"""The Ray backend's cost and its parallel rollouts, on the tiny arith models and local Ray.

    python bench/bench_ray.py                        # defaults below
    python bench/bench_ray.py --steps 6 --prompts 64  # a longer run, a bigger request

1. **Overhead per step.** The same tiny co-training run (arith, ``--cards`` cards x ``k=2``) in one process
   with ``seed_per_request=true`` and with ``backend=ray`` (one rollout worker per agent). Seconds per step
   are the mean of the steps' own timings (``metrics.jsonl``: generate + train + other), so the actors' start,
   reported on its own line, is not in them; the ratio is Ray / in-process. The two runs must record the
   same metrics (checked and printed).
2. **Rollout throughput.** One Reasoner request of ``--prompts`` problems x ``--n`` samples, cut into chunks of
   ``--batch`` rows, sampled in-process and by Ray with 1 and with 2 rollout workers (a warm-up request, then
   the best of ``--repeats``); completion tokens per second. Each worker reserves half a logical CPU, so
   both fit on a 2-core machine.

Every process uses ``--threads`` torch threads (1 by default: on a shared 2-core machine more threads
only contend). Numbers depend on the machine and its load; run it when nothing else is busy.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def run_rows(run_dir: Path) -> list[dict]:
    return [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines() if ln.strip()]


def per_step(rows: list[dict]) -> float:
    return sum(r["t_generate"] + r["t_train"] + r["t_other"] for r in rows) / max(1, len(rows))


def overhead(args: argparse.Namespace, root: Path) -> None:
    from synco.config import load_config
    from synco.run.loop import train

    base = [f"n_cards={args.cards}", "k=2", "heldout_per_group=0", "progress=false", f"threads={args.threads}",
            "tensorboard=false", "synthesizer.sampling.max_new_tokens=320", f"steps={args.steps}", f"runs_dir={root}"]
    ray_opts = ["backend=ray"] + [f"ray.{a}.{w}.num_cpus=0.25" for a in ("synthesizer", "reasoner")
                                  for w in ("learner", "worker")]
    t = time.perf_counter()
    train(load_config("arith", overrides=[*base, "run_id=inprocess", "seed_per_request=true"]), log=lambda _: None)
    wall_ip = time.perf_counter() - t
    t = time.perf_counter()
    train(load_config("arith", overrides=[*base, "run_id=ray", *ray_opts]), log=lambda _: None)
    wall_ray = time.perf_counter() - t
    ip, rr = run_rows(root / "inprocess"), run_rows(root / "ray")
    strip = [{k: v for k, v in r.items() if not k.startswith("t_")} for r in ip]
    same = strip == [{k: v for k, v in r.items() if not k.startswith("t_")} for r in rr]
    a, b = per_step(ip), per_step(rr)
    print(f"== overhead: {args.steps} steps, {args.cards} cards x 2 attempts, 1 rollout worker per agent")
    print(f"  in-process (seed_per_request): {a:.3f} s/step   (whole run {wall_ip:.1f} s)")
    print(f"  ray:                           {b:.3f} s/step   (whole run {wall_ray:.1f} s, actors' start included)")
    print(f"  ratio ray / in-process:        {b / a:.2f}x per step;  same metrics: {same}")
    gen_a = sum(r["t_generate"] for r in ip) / len(ip)
    gen_b = sum(r["t_generate"] for r in rr) / len(rr)
    train_a = sum(r["t_train"] for r in ip) / len(ip)
    train_b = sum(r["t_train"] for r in rr) / len(rr)
    print(f"  split: generate {gen_a:.3f} -> {gen_b:.3f} s, train (+ weight sync) {train_a:.3f} -> {train_b:.3f} s")


def throughput(args: argparse.Namespace) -> None:
    import ray
    import torch

    from synco.config import load_config
    from synco.distributed.ray_backend import RayPolicy
    from synco.config.ray import RaySettings
    from synco.learn.build import build_policy, resolve_model_path
    from synco.domains.base import reasoner_prompts
    from synco.domains.arith import ArithDomain

    cfg = load_config("arith", overrides=[f"reasoner.generation_batch_size={args.batch}"])
    pcfg = cfg.reasoner.model_copy(update={"device": "cpu"})
    domain = ArithDomain()
    problems = [it.problem for it in domain.heldout(-(-args.prompts // 11), seed=0)][: args.prompts]
    local = build_policy(pcfg)
    prompts = reasoner_prompts(local, domain, problems)
    params = pcfg.sampling

    def timed(policy) -> tuple[float, int]:  # noqa: ANN001
        policy.generate(prompts, args.n, params, seed=0)  # warm-up
        best, tokens = float("inf"), 0
        for r in range(args.repeats):
            t = time.perf_counter()
            out = policy.generate(prompts, args.n, params, seed=r + 1)
            best = min(best, time.perf_counter() - t)
            tokens = sum(len(c.completion_ids) for g in out for c in g)
        return best, tokens

    rows = args.prompts * args.n
    print(f"== rollout throughput: {args.prompts} prompts x {args.n} samples = {rows} rows, "
          f"chunks of {args.batch} ({-(-rows // args.batch)} chunks), best of {args.repeats}")
    sec, tok = timed(local)
    print(f"  in-process:       {sec:.3f} s  {tok / sec:8.0f} tokens/s")
    base_rate = tok / sec
    path = resolve_model_path(pcfg.model_path)
    for workers in (1, 2):
        settings = RaySettings.model_validate({"reasoner": {"rollout_workers": workers,
                                                            "learner": {"num_cpus": 0.25},
                                                            "worker": {"num_cpus": 0.5}}})
        policy = RayPolicy("reasoner", pcfg, path, settings, 0, torch.get_num_threads())
        policy.wait_ready()
        try:
            sec, tok = timed(policy)
        finally:
            policy.close()
        print(f"  ray, {workers} worker(s):  {sec:.3f} s  {tok / sec:8.0f} tokens/s  ({tok / sec / base_rate:.2f}x in-process)")
    ray.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--cards", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    import ray
    import torch

    torch.set_num_threads(args.threads)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    with tempfile.TemporaryDirectory() as tmp:
        overhead(args, Path(tmp))
    throughput(args)


if __name__ == "__main__":
    main()
