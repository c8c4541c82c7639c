"""Shared-base LoRA: two adapters on one frozen base, each its own policy (tiny char Llama, and SmolLM2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from synco.learn.models import unavailable_reason
from synco.learn.hf_policy import HFPolicy
from synco.core.policy import STATE_FILE, GRPOConfig, LoraSettings, Policy, PolicyConfig
from synco.core.sampling import Experience, SamplingParams
from synco.learn.shared_base import AdapterPolicy, SharedBase, shared_base_problems
from synco.learn.charlm import char_tokenizer, tiny_llama

EOS = 2
LORA = LoraSettings(rank=4, alpha=8)


def pcfg(lr: float = 1e-2, lora: LoraSettings | None = LORA, **kw: Any) -> PolicyConfig:
    return PolicyConfig(model_path="tiny", device="cpu", grpo=GRPOConfig(lr=lr), lora=lora, **kw)


def make_shared(synth: PolicyConfig | None = None, reasoner: PolicyConfig | None = None, seed: int = 0) -> SharedBase:
    tok = char_tokenizer()
    model = tiny_llama(tok, seed=seed, hidden_size=32, num_layers=2)
    return SharedBase(model, tok, {"synthesizer": synth or pcfg(), "reasoner": reasoner or pcfg(lr=5e-3)})


def snap(params: list[tuple[str, torch.nn.Parameter]]) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in params}


def changed(before: dict[str, torch.Tensor], params: list[tuple[str, torch.nn.Parameter]]) -> set[str]:
    return {n for n, p in params if not torch.equal(p.detach(), before[n])}


def batch(pol: HFPolicy) -> list[Experience]:
    def e(prompt: str, completion: str, adv: float) -> Experience:
        ids = list(pol.tokenizer(completion, add_special_tokens=False)["input_ids"]) + [EOS]
        return Experience(prompt_ids=pol.encode_prompt(prompt), completion_ids=ids, advantage=adv)

    return [e("2+2=", "4", 1.0), e("2+2=", "five", -0.5), e("x", "a longer one", 0.7), e("what?", "ok", -1.2)]


def logits(pol: AdapterPolicy, text: str = "2+2=4") -> torch.Tensor:
    pol.activate()
    with torch.no_grad():
        return pol.model(input_ids=torch.tensor([pol.encode_prompt(text)])).logits


def step_twice(pol: HFPolicy) -> None:
    for _ in range(2):  # lora_B starts at zero, so lora_A first moves on the second step
        assert pol.update(batch(pol)).stepped


# --------------------------------------------------------------------------- structure


def test_one_base_two_adapters_two_optimizers() -> None:
    sb = make_shared()
    s, r = sb.synthesizer, sb.reasoner
    assert isinstance(s, Policy) and isinstance(r, Policy) and isinstance(s, HFPolicy)
    assert s.model is r.model is sb.model  # the base is held once
    s_names = {n for n, _ in s.trainable_parameters()}
    r_names = {n for n, _ in r.trainable_parameters()}
    assert s_names and r_names and not s_names & r_names
    assert all(".synthesizer." in n for n in s_names) and all(".reasoner." in n for n in r_names)
    assert all(not p.requires_grad for _, p in sb.base_parameters())
    assert s.optimizer is not r.optimizer and s.scheduler is not r.scheduler
    for pol, names in ((s, s_names), (r, r_names)):
        assert pol.optimizer is not None
        held = {id(p) for g in pol.optimizer.param_groups for p in g["params"]}
        assert held == {id(p) for n, p in pol.model.named_parameters() if n in names}
    assert s.optimizer.param_groups[0]["lr"] == pytest.approx(1e-2)
    assert r.optimizer.param_groups[0]["lr"] == pytest.approx(5e-3)
    # every parameter is base, synthesizer adapter or reasoner adapter, and the base is stored once
    all_params = dict(sb.model.named_parameters())
    assert set(all_params) == s_names | r_names | {n for n, _ in sb.base_parameters()}


def test_incompatible_configs_are_refused() -> None:
    assert shared_base_problems(pcfg(), pcfg()) == []
    other = pcfg().model_copy(update={"model_path": "other"})
    assert any("model_path" in p for p in shared_base_problems(pcfg(), other))
    assert any("reasoner.lora is not set" in p for p in shared_base_problems(pcfg(), pcfg(lora=None)))
    bad = shared_base_problems(pcfg(), pcfg(lora=LoraSettings(rank=8, alpha=8)))
    assert bad == ["synthesizer.lora.rank=4 but reasoner.lora.rank=8 (they must be equal)"]
    with pytest.raises(ValueError, match="reasoner.lora.rank"):
        make_shared(reasoner=pcfg(lora=LoraSettings(rank=8, alpha=8)))


# --------------------------------------------------------------------------- updates


def test_each_update_changes_only_its_own_adapter() -> None:
    sb = make_shared()
    s, r = sb.synthesizer, sb.reasoner
    everything = list(sb.model.named_parameters())
    s_names = {n for n, _ in s.trainable_parameters()}
    r_names = {n for n, _ in r.trainable_parameters()}

    before = snap(everything)
    step_twice(r)
    assert changed(before, everything) == r_names  # the synthesizer adapter and the base did not move
    assert r.step == 2 and s.step == 0
    assert all(v.get("step", 0) == 0 for v in s.optimizer.state.values())  # type: ignore[union-attr]

    before = snap(everything)
    step_twice(s)
    assert changed(before, everything) == s_names
    assert s.step == 2


def test_cotrain_step_by_hand_and_frozen_synthesizer() -> None:
    """One co-training step (both updates in a row, as the engine does): both adapters move, the base does not."""
    sb = make_shared()
    s, r = sb.synthesizer, sb.reasoner
    base = snap(sb.base_parameters())
    s0, r0 = snap(s.trainable_parameters()), snap(r.trainable_parameters())
    for _ in range(2):
        outs = s.generate(["make a task"], n=4, params=SamplingParams(max_new_tokens=6))[0]
        s_batch = [c.to_experience(a) for c, a in zip(outs, (1.0, -1.0, 0.5, -0.5), strict=True)]
        outs = r.generate(["1+1=", "2+3="], n=2, params=SamplingParams(max_new_tokens=4))
        r_batch = [c.to_experience(a) for g in outs for c, a in zip(g, (1.0, -1.0), strict=True)]
        assert r.update(r_batch).stepped and s.update(s_batch).stepped
    assert changed(s0, s.trainable_parameters()) == set(s0)
    assert changed(r0, r.trainable_parameters()) == set(r0)
    assert changed(base, sb.base_parameters()) == set()

    # frozen mode: only the reasoner steps; the synthesizer adapter stays put while still sampling
    s1, r1 = snap(s.trainable_parameters()), snap(r.trainable_parameters())
    s.generate(["make a task"], n=2, params=SamplingParams(max_new_tokens=4))
    step_twice(r)
    assert changed(s1, s.trainable_parameters()) == set()
    assert changed(r1, r.trainable_parameters()) == set(r1)


def test_frozen_adapter_view() -> None:
    sb = make_shared(synth=pcfg(trainable=False))
    s, r = sb.synthesizer, sb.reasoner
    assert s.trainable_parameters() == [] and s.optimizer is None
    with pytest.raises(RuntimeError):
        s.update(batch(s))
    s.generate(["a"], n=1, params=SamplingParams(max_new_tokens=2))
    assert all(not p.requires_grad for _, p in sb.adapter_parameters("synthesizer"))
    step_twice(r)  # the reasoner still trains after the frozen adapter was active


def test_kl_reference_is_the_shared_base() -> None:
    sb = make_shared(reasoner=PolicyConfig(model_path="tiny", device="cpu", lora=LORA,
                                           grpo=GRPOConfig(lr=1e-2, kl_coef=0.1)))
    r = sb.reasoner
    assert r.ref_model is None
    b = batch(r)
    assert r.update(b).kl == pytest.approx(0.0, abs=1e-7)  # lora_B = 0: the adapter is a no-op
    assert r.update(b).kl > 0.0


# --------------------------------------------------------------------------- isolation


def test_generation_with_one_adapter_ignores_the_other() -> None:
    sb = make_shared()
    s, r = sb.synthesizer, sb.reasoner
    step_twice(s)  # make the synthesizer adapter non-trivial
    greedy = SamplingParams(max_new_tokens=8, greedy=True)
    out_s = [c.completion_ids for c in s.generate(["abc"], 1, greedy)[0]]
    logits_s = logits(s)
    # change the reasoner adapter (training and then a large perturbation)
    step_twice(r)
    with torch.no_grad():
        for _, p in r.trainable_parameters():
            p.add_(torch.randn_like(p))
    logits_r = logits(r)
    assert not torch.allclose(logits_r, logits_s, atol=1e-3)  # the adapters really differ
    r.generate(["abc"], 1, greedy)  # the reasoner was the last active adapter
    assert [c.completion_ids for c in s.generate(["abc"], 1, greedy)[0]] == out_s
    assert torch.equal(logits(s), logits_s)
    # and the synthesizer's outputs are those of the base with only its own adapter merged in
    merged = sb.merged_copy("synthesizer")
    with torch.no_grad():
        ref = merged(input_ids=torch.tensor([s.encode_prompt("2+2=4")])).logits
    assert torch.allclose(ref, logits_s, atol=1e-5)
    assert sb.active_adapter == "synthesizer"
    assert any("lora_" in n for n, _ in sb.model.named_parameters())  # the live model is untouched


# --------------------------------------------------------------------------- persistence


def _save(sb: SharedBase, where: Path) -> None:
    for role, pol in sb.views.items():
        pol.save(where / role)
        pol.save_state(where / f"{role}_state")


def test_save_load_round_trip(tmp_path: Path) -> None:
    tok = char_tokenizer()
    base_dir = tmp_path / "base"
    tiny_llama(tok, seed=0, hidden_size=32, num_layers=2).save_pretrained(base_dir)
    tok.save_pretrained(base_dir)
    cfg_s = pcfg().model_copy(update={"model_path": str(base_dir)})
    cfg_r = pcfg(lr=5e-3).model_copy(update={"model_path": str(base_dir)})

    a = SharedBase.from_configs(cfg_s, cfg_r)
    step_twice(a.synthesizer)
    step_twice(a.reasoner)
    _save(a, tmp_path / "ckpt")
    for role in ("synthesizer", "reasoner"):
        d = tmp_path / "ckpt" / role
        assert (d / "adapter_config.json").is_file() and (d / "adapter_model.safetensors").is_file()
        assert not (d / "config.json").exists() and not (d / "model.safetensors").exists()  # adapter only
        assert not (d / role).exists()  # peft's per-adapter sub-folder was flattened
        assert (d / "tokenizer_config.json").is_file()
        assert (tmp_path / "ckpt" / f"{role}_state" / STATE_FILE).is_file()
    # a saved adapter is a plain single LoRA adapter: it loads into an HFPolicy too
    single = HFPolicy.from_config(cfg_r.model_copy(update={
        "lora": LORA.model_copy(update={"adapter_path": str(tmp_path / "ckpt" / "reasoner")})}))
    with torch.no_grad():
        ids = torch.tensor([single.encode_prompt("2+2=4")])
        assert torch.allclose(single.model(input_ids=ids).logits, logits(a.reasoner), atol=1e-6)

    b = SharedBase.from_configs(cfg_s, cfg_r, adapter_dirs=(tmp_path / "ckpt" / "synthesizer", tmp_path / "ckpt" / "reasoner"))
    for role in ("synthesizer", "reasoner"):
        b.views[role].load_state(tmp_path / "ckpt" / f"{role}_state")
        assert b.views[role].step == 2
        assert torch.allclose(logits(b.views[role]), logits(a.views[role]), atol=1e-6)
        assert {n for n, _ in b.views[role].trainable_parameters()} == {n for n, _ in a.views[role].trainable_parameters()}
    # continuing both gives the same weights as the uninterrupted run (optimizer states restored)
    for sb in (a, b):
        sb.reasoner.update(batch(sb.reasoner))
        sb.synthesizer.update(batch(sb.synthesizer))
    pa, pb = dict(a.model.named_parameters()), dict(b.model.named_parameters())
    assert set(pa) == set(pb)
    for n in pa:
        assert torch.allclose(pa[n], pb[n], atol=1e-6), n


# --------------------------------------------------------------------------- SmolLM2


@pytest.mark.slow
@pytest.mark.skipif(unavailable_reason("smollm2") is not None,
                    reason=f"SmolLM2 preset unavailable: {unavailable_reason('smollm2')}")
def test_smollm2_shared_base_update_changes_only_that_adapter() -> None:
    from synco.learn.models import resolve_model

    path = resolve_model("smollm2")
    lora = LoraSettings(rank=4, alpha=8, target_modules=["q_proj", "v_proj"])
    cfg = PolicyConfig(model_path=path, device="cpu", lora=lora, grpo=GRPOConfig(lr=1e-3))
    sb = SharedBase.from_configs(cfg, cfg)
    s, r = sb.synthesizer, sb.reasoner
    assert s.model is r.model
    prompt = r.format_prompt("What is 2+3?")
    assert prompt.startswith("<|im_start|>")
    torch.manual_seed(0)
    outs = r.generate([prompt], n=2, params=SamplingParams(max_new_tokens=4))[0]
    exps = [c.to_experience(a) for c, a in zip(outs, (1.0, -1.0), strict=True)]
    everything = list(sb.model.named_parameters())
    for pol in (r, s):
        before = snap(everything)
        for _ in range(2):
            assert pol.update([Experience(e.prompt_ids, e.completion_ids, e.advantage) for e in exps]).stepped
        own = {n for n, _ in pol.trainable_parameters()}
        assert changed(before, everything) == own


def test_base_view_is_the_initial_model_without_a_copy() -> None:
    from synco.learn.shared_base import BaseView

    sb = make_shared()
    r = sb.reasoner
    view = BaseView(sb, r.config)
    greedy = SamplingParams(max_new_tokens=8, greedy=True)

    def ids(pol: HFPolicy) -> list[list[int]]:
        return [g[0].completion_ids for g in pol.generate(["abc", "12"], 1, greedy)]

    before = ids(view)
    assert ids(r) == before  # lora_B = 0: the fresh agent is the base
    step_twice(r)
    with torch.no_grad():
        for _, p in r.trainable_parameters():
            p.add_(torch.randn_like(p))
    assert ids(r) != before  # the agent moved
    assert ids(view) == before  # the view did not
    assert view.model is r.model and view.trainable_parameters() == [] and view.optimizer is None
    assert sb.active_adapter == "reasoner"  # the view left the agents' routing alone
    with pytest.raises(RuntimeError):
        view.update(batch(r))


def test_consensus_checker_under_shared_base_is_the_base_view() -> None:
    from synco.config import load_config
    from synco.learn.shared_base import BaseView
    from synco.run.build import build_consensus_checker
    from synco.domains.math import MathDomain

    sb = make_shared()
    cfg = load_config("arith", overrides=["domain=math", "consensus_solver=checker", "shared_base=true",
                                          "synthesizer.lora.rank=4", "reasoner.lora.rank=4",
                                          "reasoner.model_path=builtin:arith/synthesizer"])
    checker = build_consensus_checker(cfg, MathDomain(), sb.reasoner)
    assert isinstance(checker, BaseView) and checker.model is sb.model
