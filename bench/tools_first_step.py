"""What the first optimizer steps of a fresh AdamW do to a warm tools Reasoner (docs/TOOLS_WORLD.md).

    python bench/tools_first_step.py [--reasoner DIR] [--lrs 1e-4 3e-4 1e-3] [--steps 8] [--warmup 0]

A run builds the Reasoner's optimizer fresh: its first AdamW step has no gradient history, so the bias-corrected
update is ``lr * sign(g)`` on every weight, whatever the gradient's size or noise. This measures how far such steps
carry the warm start: supervised steps on gold episodes of training tasks (16 per step, the warm start's own data
and loss: agent ids only, through ``HFPolicy.sft_update``, the path ``protocol=rounds`` takes), each lr from the same
weights and a fresh optimizer, and after each step the mean NLL of 64 held-aside gold episodes of other training
tasks. The data are the warm start's own, so a well-behaved step leaves that NLL where it was or lowers it.
Prints one row per lr: NLL before, after each step, and the ratio last / before.

``--via-pretrain`` takes the steps with the warm start's own trainer instead (``synco.learn.pretrain.train_sft`` on
fresh ``reasoner_row`` batches: its AdamW betas, weight decay, warm-up and cosine decay), to tell the optimizer's
fresh state from anything the policy's update path does; it prints the NLL before and after all steps.
"""

from __future__ import annotations

import argparse
import random

import torch

from synco.core.policy import GRPOConfig, PolicyConfig
from synco.domains.tools import ToolsDomain
from synco.learn.hf_policy import HFPolicy
from synco.domains.tools.warm_start import gold_segments, reasoner_row, weighted_family
from synco.learn.pretrain import encode_segments, segment_ids, train_sft
from synco.run.pretrain.tools import load_tools_warm_start
from synco.core.sampling import SFTExample


def gold_example(policy: HFPolicy, domain: ToolsDomain, rng: random.Random) -> SFTExample:
    """A gold episode of a training task as an SFT example: the agent's ids are targets, the observations context."""
    segments = gold_segments(domain, domain.sample_task(rng, weighted_family(rng)))
    ids, mask = segment_ids(policy.tokenizer, segments[1:])
    return SFTExample(policy.format_prompt(segments[0][0]), "", tuple(ids), tuple(mask))


def mean_nll(policy: HFPolicy, data: list[SFTExample]) -> float:
    rows = [policy.encode_sft(e) for e in data]
    with torch.no_grad():
        policy.model.eval()
        logits, targets, mask = policy._completion_logits(policy.model, rows)
        lp = torch.log_softmax(logits, -1).gather(-1, targets[..., None])[..., 0]
        return float(-(lp * mask).sum() / mask.sum())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reasoner", default=None, help="a warm Reasoner's folder (default: the shipped tools Reasoner)")
    ap.add_argument("--lrs", type=float, nargs="+", default=[1e-4, 3e-4, 1e-3])
    ap.add_argument("--steps", type=int, default=8, help="optimizer steps per lr (default: %(default)s)")
    ap.add_argument("--warmup", type=int, default=0, help="linear warm-up steps of the fresh optimizer (default: none)")
    ap.add_argument("--via-pretrain", action="store_true", help="take the steps with the warm start's own trainer")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    path = args.reasoner or str(load_tools_warm_start() / "reasoner")
    domain = ToolsDomain()

    def fresh(lr: float) -> HFPolicy:
        return HFPolicy.from_config(PolicyConfig(model_path=path, device="cpu", add_bos=False,
                                                 grpo=GRPOConfig(lr=lr, warmup_steps=args.warmup, micro_batch_size=64)))

    probe = fresh(args.lrs[0])
    rng = random.Random(args.seed)
    held = [gold_example(probe, domain, rng) for _ in range(64)]
    batches = [[gold_example(probe, domain, rng) for _ in range(16)] for _ in range(args.steps)]
    print(f"reasoner {path}; {args.steps} fresh-AdamW SFT steps of 16 gold episodes, warm-up {args.warmup}; "
          f"NLL of 64 held-aside gold episodes (agent ids)")
    for lr in args.lrs:
        policy = fresh(lr)
        if args.via_pretrain:
            before = mean_nll(policy, held)
            rows = random.Random(args.seed + 1)
            train_sft(policy.model, policy.tokenizer, lambda: reasoner_row(domain, rows), args.steps, 16, lr=lr,
                      progress=False, encode=encode_segments)
            after = mean_nll(policy, held)
            print(f"lr {lr:.0e} (pretrain's trainer): {before:.3f} -> {after:.3f}   last / before {after / before:.2f}")
            continue
        nll = [mean_nll(policy, held)]
        for batch in batches:
            policy.sft_update(batch, None if args.warmup else lr)
            nll.append(mean_nll(policy, held))
        print(f"lr {lr:.0e}: " + " ".join(f"{v:.3f}" for v in nll) + f"   last / before {nll[-1] / nll[0]:.2f}",
              flush=True)


if __name__ == "__main__":
    main()
