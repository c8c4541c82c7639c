"""How much of a small update survives bf16: with and without fp32 master weights.

    python bench/bench_precision.py [--steps 5] [--lr 1e-6]

The same tiny Llama (weights representable in bf16) takes ``--steps`` GRPO steps on a
fixed batch as an fp32 policy, a bf16 policy with fp32 masters (the default) and a
bf16 policy stepping its weights directly. Prints the share of weights the update
changed and the cosine of each update to the fp32 one. Then float16 with a loss ``--fp16-adv``
times smaller (advantages scaled down, so gradients fall below float16's range): fp32, fp16 with
dynamic loss scaling (the default) and fp16 without it, 3 steps.
"""

from __future__ import annotations

import argparse

import torch

from synco.learn.hf_policy import HFPolicy
from synco.core.policy import GRPOConfig, PolicyConfig
from synco.core.sampling import Experience
from synco.learn.charlm import char_tokenizer, tiny_llama


NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def policy(dtype: torch.dtype, masters: bool, lr: float, loss_scaling: bool = True) -> HFPolicy:
    tok = char_tokenizer()
    model = tiny_llama(tok, seed=0, hidden_size=64, num_layers=2).to(torch.bfloat16).to(dtype)
    cfg = PolicyConfig(model_path="tiny", device="cpu", dtype=NAMES[dtype], fp16_loss_scaling=loss_scaling,
                       fp32_master_weights=masters, grpo=GRPOConfig(lr=lr, weight_decay=0.0))
    return HFPolicy(model, tok, cfg)


def batch(pol: HFPolicy, adv_scale: float = 1.0) -> list[Experience]:
    rows = [("12+7=", "19", 1.0), ("12+7=", "21", -1.0), ("30-4=", "26", 0.5), ("30-4=", "24", -0.5), ("8*3=", "24", 0.8)]
    enc = lambda s: list(pol.tokenizer(s, add_special_tokens=False)["input_ids"])  # noqa: E731
    return [Experience(prompt_ids=pol.encode_prompt(p), completion_ids=enc(c) + [2], advantage=a * adv_scale)
            for p, c, a in rows]


def trained(pol: HFPolicy) -> torch.Tensor:
    """The weights the optimizer holds (fp32 masters where there are any), flattened."""
    if pol.masters:
        return torch.cat([m.detach().flatten() for _, m in pol.masters.pairs])
    return torch.cat([p.detach().float().flatten() for _, p in pol.trainable_parameters()])


def delta(pol: HFPolicy, steps: int, adv_scale: float = 1.0) -> torch.Tensor:
    before = trained(pol)
    for _ in range(steps):
        pol.update(batch(pol, adv_scale))
    return trained(pol) - before


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--lr", type=float, default=1e-6)
    ap.add_argument("--fp16-adv", type=float, default=1e-5, help="advantage scale of the float16 comparison")
    args = ap.parse_args()
    torch.set_num_threads(1)
    ref = delta(policy(torch.float32, True, args.lr), args.steps)
    print(f"{args.steps} GRPO steps at lr {args.lr:g} on a tiny Llama\n")
    print("| setup | weights changed | cosine to the fp32 update |")
    print("|---|---|---|")
    for name, dtype, masters in (("fp32", torch.float32, True), ("bf16 + fp32 masters", torch.bfloat16, True),
                                 ("bf16, AdamW on bf16 weights", torch.bfloat16, False)):
        d = delta(policy(dtype, masters, args.lr), args.steps)
        cos = float(torch.nn.functional.cosine_similarity(d, ref, dim=0))
        print(f"| {name} | {float((d != 0).float().mean()):.1%} | {cos:.3f} |")
    ref16 = delta(policy(torch.float32, True, args.lr), 3, args.fp16_adv)
    print(f"\nfloat16: 3 GRPO steps, advantages x {args.fp16_adv:g}\n")
    print("| setup | weights changed | cosine to the fp32 update |")
    print("|---|---|---|")
    for name, scaling in (("fp16 + loss scaling", True), ("fp16, no loss scaling", False)):
        d = delta(policy(torch.float16, True, args.lr, scaling), 3, args.fp16_adv)
        cos = float(torch.nn.functional.cosine_similarity(d, ref16, dim=0))
        print(f"| {name} | {float((d != 0).float().mean()):.1%} | {cos:.5f} |")


if __name__ == "__main__":
    main()
