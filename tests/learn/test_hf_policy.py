"""HFPolicy, the HF learner on tiny char-level Llamas: sampling, GRPO steps, persistence, LoRA, prompts."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from synco.learn.grpo import policy_loss
from synco.learn.hf_policy import HFGenerator, HFPolicy, SnapshotSampler
from synco.learn.shared_base import BaseView, SharedBase
from synco.core.policy import STATE_FILE, GRPOConfig, Learner, LoraSettings, Policy, PolicyConfig, Sampler
from synco.core.sampling import Experience, SamplingParams
from synco.learn.charlm import char_tokenizer, tiny_llama

torch.set_num_threads(1)
EOS = 2


def make_policy(seed: int = 0, lora: LoraSettings | None = None, **grpo: Any) -> HFPolicy:
    tok = char_tokenizer()
    model = tiny_llama(tok, seed=seed, hidden_size=32, num_layers=2)
    g = GRPOConfig(**{"lr": 1e-3, **grpo})
    return HFPolicy(model, tok, PolicyConfig(model_path="tiny", device="cpu", grpo=g, lora=lora))


def snapshot(policy: HFPolicy) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in policy.model.named_parameters()}


def exp(policy: HFPolicy, prompt: str, completion: str, adv: float, eos: bool = True) -> Experience:
    ids = list(policy.tokenizer(completion, add_special_tokens=False)["input_ids"]) + ([EOS] if eos else [])
    return Experience(prompt_ids=policy.encode_prompt(prompt), completion_ids=ids, advantage=adv)


def mixed_batch(policy: HFPolicy) -> list[Experience]:
    return [
        exp(policy, "2+2=", "4", 1.0),
        exp(policy, "2+2=", "five", -0.5),
        exp(policy, "hello world", "hi there", 0.0),  # zero advantage: skipped but counted
        exp(policy, "x", "a longer completion", 0.7, eos=False),
        exp(policy, "what?", "ok", -1.2),
    ]


def seq_logprob(model: torch.nn.Module, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> torch.Tensor:
    """Per-token completion log-probs from a plain unpadded forward pass (independent of the policy's code)."""
    ids = torch.tensor([list(prompt_ids) + list(completion_ids)])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
    lp = torch.log_softmax(logits[:-1], dim=-1)
    targets = ids[0, 1:]
    return lp.gather(-1, targets[:, None])[:, 0][len(prompt_ids) - 1 :]


# --------------------------------------------------------------------------- generation


def test_generate_shapes_and_consistency() -> None:
    pol = make_policy()
    assert isinstance(pol, Policy)
    torch.manual_seed(0)
    out = pol.generate(["2+2=", "hello"], n=3, params=SamplingParams(max_new_tokens=12))
    assert [len(g) for g in out] == [3, 3]
    for prompt, group in zip(["2+2=", "hello"], out, strict=True):
        for c in group:
            assert c.prompt_ids == pol.encode_prompt(prompt)
            assert 1 <= len(c.completion_ids) <= 12
            assert len(c.logprobs) == len(c.completion_ids)
            assert all(lp <= 0.0 for lp in c.logprobs)
            assert (c.finish_reason == "stop") == (c.completion_ids[-1] == EOS) == (not c.truncated)
            assert EOS not in c.completion_ids[:-1]
            assert c.text == pol.tokenizer.decode(c.completion_ids, skip_special_tokens=True)


def test_generation_logprobs_match_forward_pass() -> None:
    pol = make_policy(seed=3)
    torch.manual_seed(1)
    out = pol.generate(["ab", "a much longer prompt"], n=2, params=SamplingParams(max_new_tokens=10, temperature=0.7))
    for group in out:
        for c in group:
            ref = seq_logprob(pol.model, c.prompt_ids, c.completion_ids)
            assert torch.allclose(torch.tensor(c.logprobs), ref, atol=1e-4)


def test_greedy_is_deterministic() -> None:
    pol = make_policy(seed=1)
    params = SamplingParams(max_new_tokens=8, greedy=True)
    torch.manual_seed(0)
    a = pol.generate(["abc", "q"], n=2, params=params)
    torch.manual_seed(123)
    b = pol.generate(["abc", "q"], n=2, params=params)
    ids = [[c.completion_ids for c in g] for g in a]
    assert ids == [[c.completion_ids for c in g] for g in b]
    assert ids[0][0] == ids[0][1] and ids[1][0] == ids[1][1]


def test_tiny_budget_truncates() -> None:
    pol = make_policy()
    torch.manual_seed(0)
    out = pol.generate(["abc"], n=8, params=SamplingParams(max_new_tokens=1))
    comps = out[0]
    assert all(len(c.completion_ids) == 1 for c in comps)
    assert any(c.truncated for c in comps)
    for c in comps:
        assert c.truncated == (c.completion_ids[0] != EOS)
        assert c.finish_reason == ("length" if c.truncated else "stop")


def test_prompt_encoding_bos_and_truncation() -> None:
    pol = make_policy()
    ids = pol.encode_prompt("ab")
    assert ids[0] == pol.tokenizer.bos_token_id and len(ids) == 3
    assert pol.encode_prompt("<s>ab") == ids  # an explicit BOS is not doubled
    pol.config.add_bos = False
    assert len(pol.encode_prompt("ab")) == 2
    pol.config.max_prompt_tokens = 2
    assert pol.encode_prompt("abcd") == pol.encode_prompt("cd")  # keeps the end


# --------------------------------------------------------------------------- updates


def test_update_changes_every_parameter() -> None:
    pol = make_policy()
    before = snapshot(pol)
    stats = pol.update(mixed_batch(pol))
    assert stats.stepped and not stats.nan_skipped
    assert stats.n_sequences == 5 and stats.n_skipped_zero_adv == 1
    assert stats.n_tokens == sum(len(e.completion_ids) for e in mixed_batch(pol))
    assert stats.ratio_mean == pytest.approx(1.0, abs=1e-5) and stats.clip_frac == 0.0
    assert stats.lr == pytest.approx(1e-3) and stats.grad_norm > 0
    after = dict(pol.model.named_parameters())
    unchanged = [n for n, p in after.items() if torch.equal(p.detach(), before[n])]
    assert unchanged == []
    assert pol.step == 1


def test_zero_advantages_change_nothing() -> None:
    pol = make_policy()
    before = snapshot(pol)
    batch = [exp(pol, "a", "b", 0.0), exp(pol, "c", "dd", 0.0)]
    stats = pol.update(batch)
    assert not stats.stepped and not stats.nan_skipped
    assert stats.n_skipped_zero_adv == 2 and stats.loss == 0.0 and stats.grad_norm == 0.0
    assert all(torch.equal(p, before[n]) for n, p in pol.model.named_parameters())
    assert pol.step == 0


def test_positive_advantage_raises_logprob() -> None:
    pol = make_policy(lr=3e-3)
    good, bad = exp(pol, "2+2=", "4", 1.0), exp(pol, "2+2=", "5", -1.0)
    lp_good0 = seq_logprob(pol.model, good.prompt_ids, good.completion_ids).sum()
    lp_bad0 = seq_logprob(pol.model, bad.prompt_ids, bad.completion_ids).sum()
    pol.update([good, bad])
    assert seq_logprob(pol.model, good.prompt_ids, good.completion_ids).sum() > lp_good0
    assert seq_logprob(pol.model, bad.prompt_ids, bad.completion_ids).sum() < lp_bad0


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_micro_batching_gives_the_whole_batch_gradient(agg: str) -> None:
    grads = []
    for mb in (1, 2, 16):
        pol = make_policy(micro_batch_size=mb, loss_agg=agg)
        pol.compute_gradients(mixed_batch(pol))
        grads.append({n: p.grad.clone() for n, p in pol.trainable_parameters() if p.grad is not None})
    # reference: one big batch, no row skipped, logprobs from unpadded forwards, default normalizer
    pol = make_policy(loss_agg=agg)
    batch = mixed_batch(pol)
    rows = []
    for e in batch:
        ids = torch.tensor([e.prompt_ids + e.completion_ids])
        lp = torch.log_softmax(pol.model(input_ids=ids).logits[0, :-1].float(), -1)
        rows.append(lp.gather(-1, ids[0, 1:, None])[:, 0][len(e.prompt_ids) - 1 :])
    width = max(len(r) for r in rows)
    logp = torch.stack([torch.nn.functional.pad(r, (0, width - len(r))) for r in rows])
    mask = torch.stack([torch.nn.functional.pad(torch.ones(len(r)), (0, width - len(r))) for r in rows])
    adv = torch.tensor([e.advantage for e in batch])
    loss, _ = policy_loss(logp, logp.detach(), adv, mask, loss_agg=agg)  # type: ignore[arg-type]
    loss.backward()
    ref = {n: p.grad for n, p in pol.trainable_parameters()}
    for g in grads:
        assert set(g) == set(ref)
        for n in ref:
            assert torch.allclose(g[n], ref[n], atol=1e-6, rtol=1e-4), n


def test_nan_advantage_is_skipped_safely() -> None:
    pol = make_policy()
    before = snapshot(pol)
    batch = [exp(pol, "a", "bc", float("nan")), exp(pol, "a", "de", 1.0)]
    stats = pol.update(batch)
    assert stats.nan_skipped and not stats.stepped
    assert all(torch.equal(p, before[n]) for n, p in pol.model.named_parameters())
    assert all(p.grad is None for _, p in pol.trainable_parameters())
    assert pol.step == 0
    ok = pol.update([exp(pol, "a", "bc", -1.0), exp(pol, "a", "de", 1.0)])  # still usable afterwards
    assert ok.stepped and pol.step == 1


def test_two_epochs_reuse_old_logprobs() -> None:
    pol = make_policy(epochs=2, lr=1e-2)
    stats = pol.update(mixed_batch(pol))
    assert stats.stepped and pol.step == 2
    assert stats.ratio_mean != 1.0  # second pass compares against the frozen first-pass log-probs


def test_given_old_logprobs_are_used() -> None:
    pol = make_policy()
    e = exp(pol, "a", "bc", 1.0)
    cur = seq_logprob(pol.model, e.prompt_ids, e.completion_ids)
    e.old_logprobs = (cur - 1.0).tolist()  # ratio e^1 > 1.28 everywhere: all tokens clipped
    stats = pol.update([e])
    assert stats.clip_frac == 1.0 and stats.ratio_mean == pytest.approx(2.71828, rel=1e-4)
    with pytest.raises(ValueError):
        pol.update([Experience(prompt_ids=[1], completion_ids=[5, 6], advantage=1.0, old_logprobs=[0.0])])


# --------------------------------------------------------------------------- decoupled (off-policy) updates


def sampled(policy: HFPolicy, shift: Sequence[float] = ()) -> list[Experience]:
    """``mixed_batch`` with its sampling log-probs: the current weights' (unpadded forwards), minus ``shift``
    token by token (cycled), i.e. as if drawn by other, older weights."""
    batch = mixed_batch(policy)
    for e in batch:
        lp = seq_logprob(policy.model, e.prompt_ids, e.completion_ids)
        e.old_logprobs = [x - (shift[t % len(shift)] if shift else 0.0) for t, x in enumerate(lp.tolist())]
    return batch


def test_decoupled_on_policy_is_the_plain_update() -> None:
    plain = make_policy()
    ps = plain.update(mixed_batch(plain))
    assert ps.is_weight_mean is None and ps.is_truncated_frac is None
    # behaviour == the current weights' log-probs: every weight is 1 (up to float noise of padded vs unpadded forwards)
    dec = make_policy(decoupled=True)
    ds = dec.update(sampled(dec))
    assert ds.stepped and ds.is_truncated_frac == 0.0
    assert ds.is_weight_mean == pytest.approx(1.0, abs=1e-5) and ds.is_weight_std == pytest.approx(0.0, abs=1e-5)
    assert ds.is_weight_max == pytest.approx(1.0, abs=1e-5) and ds.ratio_mean == pytest.approx(1.0, abs=1e-5)
    after = dict(plain.model.named_parameters())
    for n, p in dec.model.named_parameters():
        assert torch.allclose(p, after[n], atol=1e-6, rtol=0.0), n
    # rows without sampling log-probs: behaviour = proximal, weight exactly 1, bit for bit the plain update
    bare = make_policy(decoupled=True)
    bs = bare.update(mixed_batch(bare))
    assert (bs.is_weight_mean, bs.is_weight_std, bs.is_weight_max, bs.is_truncated_frac) == (1.0, 0.0, 1.0, 0.0)
    assert (bs.loss, bs.grad_norm) == (ps.loss, ps.grad_norm)
    assert all(torch.equal(p, after[n]) for n, p in bare.model.named_parameters())


def test_decoupled_stale_behaviour_is_reweighted_and_truncated() -> None:
    # behaviour log-probs 1 nat lower (w = e, cut to 2) or 0.5 higher (w = e^-0.5) than the current weights'
    shift = [1.0, -0.5]
    plain = make_policy()
    plain.update(mixed_batch(plain))
    dec = make_policy(decoupled=True, is_cap=2.0)
    batch = sampled(dec, shift)
    n = sum(len(e.completion_ids) for e in batch if e.advantage != 0.0)
    n_cut = sum((len(e.completion_ids) + 1) // 2 for e in batch if e.advantage != 0.0)  # even positions: w = e
    st = dec.update(batch)
    assert st.stepped and st.is_truncated_frac == pytest.approx(n_cut / n)
    assert st.is_weight_max == pytest.approx(math.e, rel=1e-4) and st.is_weight_std > 0.5
    assert st.is_weight_mean == pytest.approx((n_cut * math.e + (n - n_cut) * math.exp(-0.5)) / n, rel=1e-4)
    assert st.clip_frac == 0.0 and st.ratio_mean == pytest.approx(1.0, abs=1e-5)  # the clip is to the proximal
    after = dict(plain.model.named_parameters())
    assert any(not torch.allclose(p, after[n_], atol=1e-6) for n_, p in dec.model.named_parameters())


@pytest.mark.parametrize("is_mode", ["truncate", "mask"])
def test_decoupled_loss_by_hand_both_ways(is_mode: str) -> None:
    # behaviour 1 nat lower at even positions (w = e > cap 2: cut to 2, or dropped) and 0.5 higher at odd ones
    # (w = e^-0.5); at the first pass current = proximal (ratio 1), so the token-mean loss is
    # -sum_rows A * (n_even * w_even + n_odd * e^-0.5) / N, N counting every token of the batch (dropped ones too)
    dec = make_policy(decoupled=True, is_cap=2.0, is_mode=is_mode)
    batch = sampled(dec, [1.0, -0.5])
    n = sum(len(e.completion_ids) for e in batch)
    w_even = 2.0 if is_mode == "truncate" else 0.0
    expected = -sum(e.advantage * ((len(e.completion_ids) + 1) // 2 * w_even + len(e.completion_ids) // 2
                                   * math.exp(-0.5)) for e in batch) / n
    st = dec.update(batch)
    assert st.stepped and st.loss == pytest.approx(expected, rel=1e-4)
    assert st.is_weight_max == pytest.approx(math.e, rel=1e-4)  # raw weights, before the bound, either way


def test_decoupled_keeps_a_recomputing_samplers_logprobs_and_reuses_the_proximal() -> None:
    shift = [1.0, -0.5]
    plain = make_policy()
    plain.generator.recompute_proximal = True  # type: ignore[misc]  # as vLLM's generator declares it
    assert plain.update(sampled(plain, shift)).clip_frac == 0.0  # dropped: recomputed, on-policy
    dec = make_policy(decoupled=True)
    dec.generator.recompute_proximal = True  # type: ignore[misc]
    one = dec.update(sampled(dec, shift))
    assert one.is_truncated_frac is not None and one.is_truncated_frac > 0  # kept as the behaviour log-probs
    two_pol = make_policy(decoupled=True, epochs=2)
    two = two_pol.update(sampled(two_pol, shift))
    assert two_pol.step == 2 and two.ratio_mean != pytest.approx(1.0, abs=1e-5)  # second pass: current / proximal
    # the proximal log-probs of the first pass are reused, so the weights are the same both epochs
    for f in ("is_weight_mean", "is_weight_std", "is_weight_max", "is_truncated_frac"):
        assert getattr(two, f) == pytest.approx(getattr(one, f), abs=1e-9), f


def test_warmup_schedule() -> None:
    pol = make_policy(lr=1e-3, warmup_steps=4)
    lrs = [pol.update([exp(pol, "a", "b", 1.0), exp(pol, "a", "c", -1.0)]).lr for _ in range(5)]
    assert lrs == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3])


def test_kl_reference_only_when_needed() -> None:
    assert make_policy().ref_model is None
    pol = make_policy(kl_coef=0.1, lr=1e-2)
    assert pol.ref_model is not None
    batch = [exp(pol, "a", "b", 0.0), exp(pol, "a", "cd", 1.0)]
    first = pol.update(batch)
    assert first.kl == pytest.approx(0.0, abs=1e-7) and first.n_skipped_zero_adv == 0
    second = pol.update(batch)
    assert second.kl > 0.0
    assert all(not p.requires_grad for p in pol.ref_model.parameters())


def test_frozen_policy() -> None:
    tok = char_tokenizer()
    pol = HFPolicy(tiny_llama(tok, hidden_size=32, num_layers=2), tok, PolicyConfig(model_path="t", device="cpu", trainable=False))
    assert pol.trainable_parameters() == []
    with pytest.raises(RuntimeError):
        pol.update([exp(pol, "a", "b", 1.0)])
    assert len(pol.generate(["a"], n=2, params=SamplingParams(max_new_tokens=3))[0]) == 2


# --------------------------------------------------------------------------- persistence


def test_save_and_reload_with_auto_classes(tmp_path: Path) -> None:
    pol = make_policy()
    pol.update(mixed_batch(pol))
    pol.save(tmp_path / "m")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "m")
    tok = AutoTokenizer.from_pretrained(tmp_path / "m")
    ids = torch.tensor([pol.encode_prompt("2+2=4")])
    with torch.no_grad():
        assert torch.allclose(model(input_ids=ids).logits, pol.model(input_ids=ids).logits, atol=1e-6)
    assert tok("a+b", add_special_tokens=False)["input_ids"] == pol.tokenizer("a+b", add_special_tokens=False)["input_ids"]
    again = HFPolicy.from_config(PolicyConfig(model_path=str(tmp_path / "m"), device="cpu"))
    greedy = SamplingParams(max_new_tokens=6, greedy=True)
    assert [c.completion_ids for c in again.generate(["xy"], 1, greedy)[0]] == [c.completion_ids for c in pol.generate(["xy"], 1, greedy)[0]]


def test_state_round_trip_equals_uninterrupted_training(tmp_path: Path) -> None:
    b1 = lambda p: mixed_batch(p)  # noqa: E731
    b2 = lambda p: [exp(p, "q", "zz", 1.0), exp(p, "q", "y", -1.0), exp(p, "r", "w", 0.3)]  # noqa: E731
    a = make_policy(warmup_steps=3)
    a.update(b1(a))
    lr_a = a.update(b2(a)).lr

    b = make_policy(warmup_steps=3)
    b.update(b1(b))
    b.save(tmp_path / "ckpt")
    b.save_state(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / STATE_FILE).exists()
    cfg = PolicyConfig(model_path=str(tmp_path / "ckpt"), device="cpu", grpo=GRPOConfig(lr=1e-3, warmup_steps=3))
    c = HFPolicy.from_config(cfg)
    c.load_state(tmp_path / "ckpt")
    assert c.step == 1
    lr_c = c.update(b2(c)).lr
    assert lr_c == pytest.approx(lr_a) == pytest.approx(1e-3 * 2 / 3)
    pa, pc = dict(a.model.named_parameters()), dict(c.model.named_parameters())
    for n in pa:
        assert torch.allclose(pa[n], pc[n], atol=1e-7), n
    # without the optimizer state the second step differs (Adam moments matter)
    d = HFPolicy.from_config(cfg)
    d.update(b2(d))
    assert any(not torch.allclose(pa[n], p, atol=1e-7) for n, p in d.model.named_parameters())


# --------------------------------------------------------------------------- LoRA


def test_lora_trains_only_adapters(tmp_path: Path) -> None:
    lora = LoraSettings(rank=4, alpha=8, target_modules=["q_proj", "v_proj"])
    pol = make_policy(lora=lora, lr=1e-2)
    names = [n for n, _ in pol.trainable_parameters()]
    assert names and all("lora_" in n for n in names)
    before = snapshot(pol)
    for _ in range(2):  # B starts at zero, so A first moves on the second step
        assert pol.update(mixed_batch(pol)).stepped
    changed = {n for n, p in pol.model.named_parameters() if not torch.equal(p.detach(), before[n])}
    assert changed == set(names)

    pol.save(tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_config.json").exists()
    assert (tmp_path / "adapter" / "adapter_model.safetensors").exists()
    pol.merge_and_save(tmp_path / "merged")
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    assert not any("lora" in n for n, _ in merged.named_parameters())
    ids = torch.tensor([pol.encode_prompt("2+2=4")])
    with torch.no_grad():
        assert torch.allclose(merged(input_ids=ids).logits, pol.model(input_ids=ids).logits, atol=1e-5)
    assert any("lora_" in n for n, _ in pol.model.named_parameters())  # merging did not touch the live policy


def test_lora_resume_from_adapter_and_kl_to_disabled_adapters(tmp_path: Path) -> None:
    lora = LoraSettings(rank=4, alpha=8, target_modules=["q_proj", "v_proj"])
    pol = make_policy(lora=lora, lr=1e-2, kl_coef=0.1)
    assert pol.ref_model is None  # the base with adapters disabled is the reference
    batch = [exp(pol, "a", "bc", 1.0), exp(pol, "a", "d", -1.0)]
    assert pol.update(batch).kl == pytest.approx(0.0, abs=1e-7)  # B = 0: adapters are a no-op
    assert pol.update(batch).kl > 0.0
    tok = char_tokenizer()
    base_dir, ad_dir = tmp_path / "base", tmp_path / "ad"
    tiny_llama(tok, seed=0, hidden_size=32, num_layers=2).save_pretrained(base_dir)
    tok.save_pretrained(base_dir)
    pol.save(ad_dir)
    cfg = PolicyConfig(model_path=str(base_dir), device="cpu", lora=lora.model_copy(update={"adapter_path": str(ad_dir)}))
    again = HFPolicy.from_config(cfg)
    assert {n for n, _ in again.trainable_parameters()} == {n for n, _ in pol.trainable_parameters()}
    ids = torch.tensor([pol.encode_prompt("xyz")])
    with torch.no_grad():
        assert torch.allclose(again.model(input_ids=ids).logits, pol.model(input_ids=ids).logits, atol=1e-6)


# --------------------------------------------------------------------------- prompts

TEMPLATE = (
    "{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}\n{% endfor %}"
    "{% if enable_thinking is defined and not enable_thinking %}[nothink]{% endif %}"
    "{% if add_generation_prompt %}[assistant]{% endif %}"
)


def test_plain_prompts_without_template() -> None:
    pol = make_policy()
    assert pol.format_prompt("Solve 2+2.") == "Solve 2+2."
    assert pol.format_prompt("Solve 2+2.", system="Be brief.") == "Be brief.\n\nSolve 2+2."
    pol.config.system_prompt = "Default."
    assert pol.format_prompt("Q") == "Default.\n\nQ"
    assert pol.format_prompt("Q", system="") == "Q"
    pol.config.use_chat_template = True
    with pytest.raises(ValueError):
        pol.format_prompt("Q")


def test_chat_template_sends_the_system_prompt() -> None:
    pol = make_policy()
    pol.tokenizer.chat_template = TEMPLATE
    pol.config.system_prompt = "You write tasks."
    text = pol.format_prompt("Make one.")
    assert text == "[system]You write tasks.\n[user]Make one.\n[assistant]"
    assert pol.format_prompt("Make one.", system="") == "[user]Make one.\n[assistant]"
    pol.config.enable_thinking = False
    assert pol.format_prompt("Q", system="S") == "[system]S\n[user]Q\n[nothink][assistant]"
    pol.config.use_chat_template = False
    assert pol.format_prompt("Q", system="S") == "S\n\nQ"
    pol.config.use_chat_template = None
    out = pol.generate([pol.format_prompt("Q")], n=1, params=SamplingParams(max_new_tokens=2))
    assert pol.tokenizer.decode(out[0][0].prompt_ids, skip_special_tokens=True).startswith("[system]You write tasks.")


# --------------------------------------------------------------------------- memory options


def test_gradient_checkpointing_gives_the_same_gradient() -> None:
    grads = []
    for ckpt in (False, True):
        tok = char_tokenizer()
        cfg = PolicyConfig(model_path="t", device="cpu", gradient_checkpointing=ckpt, grpo=GRPOConfig(micro_batch_size=2))
        pol = HFPolicy(tiny_llama(tok, seed=0, hidden_size=32, num_layers=2), tok, cfg)
        assert any(getattr(m, "gradient_checkpointing", False) for m in pol.model.modules()) == ckpt
        pol.compute_gradients(mixed_batch(pol))
        grads.append({n: p.grad.clone() for n, p in pol.trainable_parameters()})
    for n in grads[0]:
        assert torch.allclose(grads[0][n], grads[1][n], atol=1e-6), n


def test_bfloat16_load_and_update(tmp_path: Path) -> None:
    tok = char_tokenizer()
    tiny_llama(tok, hidden_size=32, num_layers=2).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    pol = HFPolicy.from_config(PolicyConfig(model_path=str(tmp_path), device="cpu", dtype="bfloat16", grpo=GRPOConfig(lr=1e-2)))
    assert next(pol.model.parameters()).dtype == torch.bfloat16
    out = pol.generate(["ab"], n=2, params=SamplingParams(max_new_tokens=4))
    batch = [c.to_experience(a) for c, a in zip(out[0], (1.0, -1.0), strict=True)]
    stats = pol.update(batch)
    assert stats.stepped and stats.ratio_mean == pytest.approx(1.0, abs=0.05)


def test_resolve_device_checks_the_visible_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    from synco.learn.hf_policy import resolve_device

    assert resolve_device("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(ValueError, match="no CUDA GPU is available"):
        resolve_device("cuda:1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert resolve_device("cuda:0") == torch.device("cuda:0")
    with pytest.raises(ValueError, match=r"only 1 GPU\(s\) are visible"):
        resolve_device("cuda:1")


# --------------------------------------------------------------------------- the learner, its samplers, the one weight sync
# Every Completion is stamped with the version that sampled it; the transformers engine follows each update, the
# snapshot (SnapshotSampler) only a publish; a shared base's agents sample one copy of it.

SYNC_GREEDY = SamplingParams(greedy=True, max_new_tokens=8)
SYNC_PROMPTS = ["2+2=", "hello", "x"]


def sync_policy(lora: LoraSettings | None = None) -> HFPolicy:
    tok = char_tokenizer()
    return HFPolicy(tiny_llama(tok, seed=0, hidden_size=32, num_layers=2), tok,
                    PolicyConfig(model_path="tiny", device="cpu", grpo=GRPOConfig(lr=3e-2), lora=lora))


def moving_batch(policy: HFPolicy) -> list[Experience]:
    """Completions of its own, half pushed up and half down: an update that moves the weights."""
    sampled = policy.generate(SYNC_PROMPTS, 2, SamplingParams(max_new_tokens=6), seed=1)
    return [c.to_experience(1.0 if i % 2 else -1.0) for g in sampled for i, c in enumerate(g)]


def greedy_stamped(policy: HFPolicy) -> tuple[list[list[int]], set[int]]:
    """Greedy ids of the prompts, and the versions they were stamped with."""
    out = [g[0] for g in policy.generate(SYNC_PROMPTS, 1, SYNC_GREEDY)]
    return [c.completion_ids for c in out], {c.version for c in out}


def test_the_transformers_engine_is_published_every_update_and_stamps_its_version() -> None:
    pol = sync_policy()
    assert isinstance(pol, Learner) and isinstance(pol.generator, Sampler) and pol.generator.holds_copy is False
    ids0, v0 = greedy_stamped(pol)
    assert v0 == {0} and pol.version == pol.policy_version == 0
    assert pol.update(moving_batch(pol)).stepped
    ids1, v1 = greedy_stamped(pol)
    assert v1 == {1} and pol.version == pol.policy_version == 1 and ids1 != ids0  # the learner's own model


def test_the_snapshot_keeps_its_version_through_updates_until_a_publish() -> None:
    pol = sync_policy()
    pol.sample_apart()
    gen = pol.generator
    assert isinstance(gen, SnapshotSampler) and gen.model is not pol.model and gen.version == 0
    ids0, _ = greedy_stamped(pol)
    assert pol.update(moving_batch(pol)).stepped and pol.update(moving_batch(pol)).stepped
    assert pol.version == 2 and pol.policy_version == 0
    assert greedy_stamped(pol) == (ids0, {0})  # the updates did not reach the copy
    assert pol.publish() == 2 and pol.policy_version == 2
    ids2, v2 = greedy_stamped(pol)
    assert v2 == {2} and ids2 != ids0
    learner, copy = dict(pol.model.named_parameters()), dict(gen.model.named_parameters())
    assert all(torch.equal(learner[n], copy[n]) for n in learner)  # the published weights, exactly
    pol.sample_apart()  # already apart: the same sampler
    assert pol.generator is gen


def test_a_model_with_dropout_cannot_sample_apart() -> None:
    pol = sync_policy(LoraSettings(rank=4, alpha=8.0, dropout=0.1))  # LoRA's dropout draws from torch's stream
    with pytest.raises(ValueError, match="dropout"):
        pol.sample_apart()


def test_a_shared_bases_agents_sample_one_copy_each_through_its_own_adapter() -> None:
    tok = char_tokenizer()
    lora = LoraSettings(rank=4, alpha=8.0)
    cfg = PolicyConfig(model_path="tiny", device="cpu", grpo=GRPOConfig(lr=3e-2), lora=lora)
    sb = SharedBase(tiny_llama(tok, seed=0, hidden_size=32, num_layers=2), tok, {"synthesizer": cfg, "reasoner": cfg})
    syn, rea = sb.synthesizer, sb.reasoner
    base_ids = [g[0].completion_ids for g in BaseView(sb, cfg).generate(SYNC_PROMPTS, 1, SYNC_GREEDY)]
    syn.sample_apart()
    rea.sample_apart()
    copy = sb.sampling_model()
    assert isinstance(syn.generator, SnapshotSampler) and isinstance(rea.generator, SnapshotSampler)
    assert syn.generator.model is copy and rea.generator.model is copy and copy is not sb.model
    assert rea.update(moving_batch(rea)).stepped
    assert greedy_stamped(rea)[1] == {0}
    assert rea.publish() == 1 and syn.publish() == 0
    (r_ids, r_v), (s_ids, s_v) = greedy_stamped(rea), greedy_stamped(syn)
    assert r_v == {1} and s_v == {0} and r_ids != s_ids  # each through its own adapter, on the one copy
    live = dict(sb.model.named_parameters())
    copied = dict(copy.named_parameters())
    assert all(torch.equal(p, copied[n]) for n, p in rea.trainable_parameters())
    view = BaseView(sb, cfg)  # built after the agents went apart: it samples the copy, adapters disabled
    assert isinstance(view.generator, HFGenerator) and view.generator.model is copy
    assert [g[0].completion_ids for g in view.generate(SYNC_PROMPTS, 1, SYNC_GREEDY)] == base_ids
    assert all(torch.equal(live[n], copied[n]) for n, _ in sb.base_parameters())
