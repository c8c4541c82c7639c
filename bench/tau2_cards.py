"""How often SmolLM2-135M writes a τ² card that verifies, with and without the card template (docs/TAU2.md).

One prompt of the ``tau2-smollm2`` preset (the mock domain, solo, the report "no tasks yet"), ``--n`` cards sampled
from it in one seeded request for each setting: free decoding at T 0.7, and the card template
(``synth_decoding: card``) at T 0.7 and at the preset's T 0.3. Each card is parsed and verified exactly as a training
step does (``parse_task_card``, the domain's oracle by replay, its held-out check); the first rejection code of
each card is counted.

    python bench/tau2_cards.py [--n 8] [--seed 1]
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

import torch

from synco.config import load_config
from synco.core.sampling import SamplingParams
from synco.core.records import CardRejected, TaskCardError
from synco.grading.cards import parse_task_card
from synco.learn.build import build_policy
from synco.rollout.card_decoding import constrain_synthesizer
from synco.run.build import build_domain


def verdicts(domain: object, texts: list[str]) -> Counter[str]:
    """``valid`` or the first rejection code of each card text."""
    out: Counter[str] = Counter()
    for text in texts:
        try:
            card = parse_task_card(text)
            domain.oracle(card)  # type: ignore[attr-defined]
            out[domain.reject_reason(card) or "valid"] += 1  # type: ignore[attr-defined]
        except CardRejected as err:
            out[err.code] += 1
        except TaskCardError:  # the text is no card at all
            out["not_a_card"] += 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=8, help="cards per setting")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = load_config("tau2-smollm2")
    domain = build_domain(cfg)
    for template, temperature in ((False, 0.7), (True, 0.7), (True, 0.3)):
        policy = build_policy(cfg.synthesizer.model_copy(update={"trainable": False}))
        budget = cfg.synthesizer.sampling.max_new_tokens
        if template:
            constrain_synthesizer(policy, domain, budget)
        prompt = policy.format_prompt(domain.synthesizer_prompt("no tasks yet"), system=domain.synthesizer_system_prompt())
        t = time.perf_counter()
        [texts] = policy.generate([prompt], args.n, SamplingParams(temperature=temperature, top_p=0.95,
                                                                   max_new_tokens=budget), seed=args.seed)
        counts = verdicts(domain, [c.text for c in texts])
        print(f"{'template' if template else 'free    '} T {temperature}: valid {counts['valid']}/{args.n}  "
              f"{dict(counts)}  ({time.perf_counter() - t:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
