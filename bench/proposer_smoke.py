"""Does SmolLM2-135M write a parseable EvoSyn factor proposal from the proposer prompt? 3 tries: greedy, then T 0.9.

Run: ``python bench/proposer_smoke.py`` (loads the smollm2 preset's Synthesizer, ~1 min on CPU). Prints each
completion, what parse_proposal made of it, and how many of the 3 parsed.
"""
import random

import torch
from synco.config import load_config
from synco.learn.build import build_policy
from synco.run.build import build_domain
from synco.run.rng import seed_everything
from synco.core.policy import generate_seeded
from synco.core.sampling import SamplingParams
from synco.evosyn.proposer import proposer_prompt, parse_proposal
torch.set_num_threads(2)
cfg = load_config("smollm2")
seed_everything(0)
dom = build_domain(cfg)
pol = build_policy(cfg.synthesizer.model_copy(update={"trainable": False}))
rng = random.Random(0)
probs = [dom.sample_any(rng) for _ in range(40)]
failed = [p for p in probs if any(w in p.lower() for w in ("percent", "%", "probability", "ratio"))][:6]
solved = [p for p in probs if p not in failed][:6]
taken = ["topic", "quantities", "magnitude", "length", "difficulty"]
ok = 0
for s in range(3):
    prompt = proposer_prompt(failed, solved, taken)
    params = SamplingParams(greedy=(s == 0), temperature=0.9, top_p=0.95, max_new_tokens=160)
    text = generate_seeded(pol, [pol.format_prompt(prompt)], 1, params, s)[0][0].text
    p = parse_proposal(text, taken, 0)
    ok += p is not None
    print("----", s, "parsed:", None if p is None else p.model_dump(exclude={"raw"}))
    print(text[:400])
print("parsed", ok, "of 3")
