"""How often does SmolLM2-135M-Instruct write a valid task card from the math domain's Synthesizer prompt?

Run: ``python bench/smollm2_cards.py --n 32 [--seed 0] [--threads 1] [--prompts-dir DIR] [--show 3]
[--max-new-tokens T] [--temperature X] [--top-p P] [--examples E] [--max-copy M] [--decoding free|card] [--json]``.

Builds the Synthesizer exactly as ``synco train --preset smollm2`` does (the preset's model, sampling
and verifier settings; the step-0 capability report; no Designer target cell), samples ``--n`` cards in steps of the preset's
``n_cards`` (one prompt, ``n_cards`` samples, like one co-training step with one context) and screens
each step's cards with the preset's verifier and the domain's own rejections (``copied_example``,
``heldout_problem``), novelty against the cards admitted so far, as in a run; nothing is trained. The
preset samples under the card template (``synth_decoding: card``); ``--decoding free`` turns it off. Prints the prompt length in tokens, the valid rate (with its standard error), a
histogram of the verifier's reject codes, how many completions hit the token budget, the tokens per
card and the generation time; ``--show K`` prints the first K raw completions. ``--json`` prints the
same numbers as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field


@dataclass
class CardBench:
    """What one bench run measured."""

    n: int
    valid: int
    prompt_tokens: int
    truncated: int
    mean_tokens: float
    seconds: float
    reasons: dict[str, int] = field(default_factory=dict)

    @property
    def valid_rate(self) -> float:
        return self.valid / self.n if self.n else 0.0

    @property
    def stderr(self) -> float:
        p = self.valid_rate
        return math.sqrt(p * (1 - p) / self.n) if self.n else 0.0


def reason_code(reason: str) -> str:
    """``"missing_field: missing field 'x'"`` -> ``missing_field``."""
    return reason.split(":", 1)[0].strip()


def run(args: argparse.Namespace) -> tuple[CardBench, list[str]]:
    """Sample and screen ``args.n`` cards; returns the numbers and the raw completions."""
    import torch

    from synco.grading.checker import AnswerChecker
    from synco.config import load_config
    from synco.core.report import build_report
    from synco.learn.build import build_policy
    from synco.run.build import build_domain
    from synco.run.rng import seed_everything
    from synco.grading.verifier import TaskVerifier

    torch.set_num_threads(args.threads)
    overrides = [f"seed={args.seed}"]
    if args.prompts_dir:
        overrides.append(f"prompts_dir={args.prompts_dir}")
    cfg = load_config("smollm2", overrides=overrides)
    seed_everything(cfg.seed)
    domain = build_domain(cfg)
    if args.examples is not None:
        domain.n_examples = args.examples
    if args.max_copy is not None:
        domain.card_max_copy = args.max_copy
    overrides_s = {"max_new_tokens": args.max_new_tokens, "temperature": args.temperature, "top_p": args.top_p}
    sampling = cfg.synthesizer.sampling.model_copy(update={k: v for k, v in overrides_s.items() if v is not None})
    policy = build_policy(cfg.synthesizer.model_copy(update={"trainable": False}))
    decoding = args.decoding or cfg.synth_decoding
    if decoding == "card":  # as setup_run does for synth_decoding: card
        from synco.rollout.card_decoding import constrain_synthesizer

        constrain_synthesizer(policy, domain, sampling.max_new_tokens)
    report = build_report([], cfg.report, step=0)
    prompt = policy.format_prompt(domain.synthesizer_prompt(report), system=domain.synthesizer_system_prompt())
    prompt_tokens = len(policy.encode_prompt(prompt))
    raws: list[str] = []
    reasons: Counter[str] = Counter()
    valid = truncated = tokens = 0
    seconds = 0.0
    with AnswerChecker() as checker:
        verifier = TaskVerifier(cfg.verifier, checker=checker)
        done, step = 0, 0
        while done < args.n:
            size = min(cfg.n_cards, args.n - done)
            t = time.perf_counter()
            group = policy.generate([prompt], size, sampling)[0]
            seconds += time.perf_counter() - t
            texts = [c.text for c in group]
            raws.extend(texts)
            truncated += sum(c.truncated for c in group)
            tokens += sum(len(c.completion_ids) for c in group)
            for i, (card, verdict) in enumerate(verifier.verify_batch(texts)):
                codes = {reason_code(r) for r in verdict.reasons}
                domain_reason = domain.reject_reason(card) if verdict.valid and card is not None else None
                if domain_reason is not None:  # as the engine does: heldout_problem, copied_example
                    codes.add(domain_reason)
                elif verdict.valid and card is not None:
                    valid += 1
                    verifier.admit((step, i), card.payload.prompt_text())
                reasons.update(codes)
            done += size
            step += 1
    bench = CardBench(n=args.n, valid=valid, prompt_tokens=prompt_tokens, truncated=truncated,
                      mean_tokens=tokens / max(args.n, 1), seconds=seconds, reasons=dict(reasons.most_common()))
    return bench, raws


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=32, help="cards to sample")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--prompts-dir", default=None, help="prompt templates to use instead of the shipped ones")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="override the preset's card budget")
    parser.add_argument("--temperature", type=float, default=None, help="override the preset's temperature")
    parser.add_argument("--decoding", choices=("free", "card"), default=None, help="override the preset's synth_decoding")
    parser.add_argument("--top-p", type=float, default=None, help="override the preset's top_p")
    parser.add_argument("--examples", type=int, default=None, help="few-shot example cards in the prompt")
    parser.add_argument("--max-copy", type=int, default=None,
                        help="card decoding: longest run of prompt tokens a problem / solution may repeat (0: no limit; "
                             "default: the domain's)")
    parser.add_argument("--show", type=int, default=0, help="print the first K raw completions")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error(f"--n must be >= 1, got {args.n}")
    bench, raws = run(args)
    if args.json:
        print(json.dumps({**asdict(bench), "valid_rate": bench.valid_rate, "stderr": bench.stderr}))
    else:
        print(f"prompt: {bench.prompt_tokens} tokens; cards: {bench.n}; valid: {bench.valid} "
              f"({100 * bench.valid_rate:.1f} % +- {100 * bench.stderr:.1f}); hit the token budget: {bench.truncated}; "
              f"tokens/card: {bench.mean_tokens:.0f}; generation: {bench.seconds:.1f} s")
        print("reason codes (cards with each; soft codes included):")
        for code, count in bench.reasons.items():
            print(f"  {code:28s} {count}")
    for i, raw in enumerate(raws[: args.show]):
        print(f"--- completion {i}\n{raw}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
