"""fp32 master weights: a bf16 policy trained at lr 1e-6 moves like the fp32 one, and resumes exactly."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from synco.learn.hf_policy import HFPolicy
from synco.core.policy import STATE_FILE, GRPOConfig, PolicyConfig
from synco.core.sampling import Experience
from synco.learn.precision import LossScaler, MasterWeights
from synco.learn.charlm import char_tokenizer, tiny_llama

torch.set_num_threads(1)


DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def _policy(dtype: torch.dtype, masters: bool = True, lr: float = 1e-6, loss_scaling: bool = True) -> HFPolicy:
    """The same tiny Llama (weights representable in bf16, and so in fp16) as an fp32, bf16 or fp16 policy."""
    tok = char_tokenizer()
    model = tiny_llama(tok, seed=0, hidden_size=64, num_layers=2)
    model = model.to(torch.bfloat16).to(dtype)  # identical starting values for every dtype
    cfg = PolicyConfig(model_path="tiny", device="cpu", dtype=DTYPE_NAMES[dtype], fp32_master_weights=masters,
                       fp16_loss_scaling=loss_scaling, grpo=GRPOConfig(lr=lr, warmup_steps=0, weight_decay=0.0))
    return HFPolicy(model, tok, cfg)


def _batch(pol: HFPolicy, adv_scale: float = 1.0) -> list[Experience]:
    enc = lambda s: list(pol.tokenizer(s, add_special_tokens=False)["input_ids"])  # noqa: E731
    rows = [("12+7=", "19", 1.0), ("12+7=", "21", -1.0), ("30-4=", "26", 0.5), ("30-4=", "24", -0.5), ("8*3=", "24", 0.8)]
    return [Experience(prompt_ids=pol.encode_prompt(p), completion_ids=enc(c) + [2], advantage=a * adv_scale)
            for p, c, a in rows]


def _trained(pol: HFPolicy) -> dict[str, torch.Tensor]:
    """The weights the optimizer holds: the fp32 masters where there are any, else the parameters."""
    if pol.masters:
        return {n: m.detach().clone() for (n, _), (_, m) in zip(pol.trainable_parameters(), pol.masters.pairs, strict=True)}
    return {n: p.detach().float().clone() for n, p in pol.trainable_parameters()}


def _delta(pol: HFPolicy, steps: int, adv_scale: float = 1.0) -> dict[str, torch.Tensor]:
    before = _trained(pol)
    for _ in range(steps):
        assert pol.update(_batch(pol, adv_scale)).stepped
    after = _trained(pol)
    return {n: after[n] - before[n] for n in before}


def _changed_share(delta: dict[str, torch.Tensor]) -> float:
    return sum(int((d != 0).sum()) for d in delta.values()) / sum(d.numel() for d in delta.values())


def _cosine(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    va = torch.cat([a[n].flatten() for n in a])
    vb = torch.cat([b[n].flatten() for n in a])
    return float(torch.nn.functional.cosine_similarity(va, vb, dim=0))


def test_bf16_with_masters_moves_like_fp32_at_lr_1e6() -> None:
    d32 = _delta(_policy(torch.float32), steps=5)
    pol16 = _policy(torch.bfloat16)
    assert next(pol16.model.parameters()).dtype == torch.bfloat16  # compute stays in bf16
    assert pol16.masters and all(m.dtype == torch.float32 for m in pol16.masters.optimizer_params)
    d16 = _delta(pol16, steps=5)
    assert _changed_share(d32) > 0.95
    assert _changed_share(d16) > 0.95
    assert _cosine(d16, d32) > 0.9
    norm32 = sum(float(d.norm() ** 2) for d in d32.values()) ** 0.5
    norm16 = sum(float(d.norm() ** 2) for d in d16.values()) ** 0.5
    assert norm16 == pytest.approx(norm32, rel=0.2)


def test_without_masters_bf16_loses_most_small_updates() -> None:
    """The old behaviour, kept as an option: AdamW on bf16 weights rounds a 1e-6 step away."""
    d = _delta(_policy(torch.bfloat16, masters=False), steps=5)
    assert _changed_share(d) < 0.3


def test_masters_are_rounded_into_the_model_after_each_step() -> None:
    pol = _policy(torch.bfloat16, lr=1e-2)  # large steps: the model visibly moves
    before = {n: p.detach().clone() for n, p in pol.trainable_parameters()}
    pol.update(_batch(pol))
    for (n, p), (_, m) in zip(pol.trainable_parameters(), pol.masters.pairs, strict=True):
        assert torch.equal(p.detach(), m.detach().to(torch.bfloat16)), n
        assert p.grad is None
    assert any(not torch.equal(before[n], p) for n, p in pol.trainable_parameters())


def test_resume_restores_masters_exactly(tmp_path: Path) -> None:
    a = _policy(torch.bfloat16)
    for _ in range(3):
        a.update(_batch(a))

    b = _policy(torch.bfloat16)
    b.update(_batch(b))
    b.save_state(tmp_path)
    c = _policy(torch.bfloat16)  # fresh weights: load_state must bring the masters (and so the model) back
    c.load_state(tmp_path)
    for _ in range(2):
        c.update(_batch(c))
    ta, tc = _trained(a), _trained(c)
    for n in ta:
        assert torch.equal(ta[n], tc[n]), n
    for (n, p), (_, q) in zip(a.trainable_parameters(), c.trainable_parameters(), strict=True):
        assert torch.equal(p, q), n


def test_loading_a_state_without_masters_is_a_clear_error(tmp_path: Path) -> None:
    _policy(torch.float32).save_state(tmp_path)
    assert (tmp_path / STATE_FILE).exists()
    with pytest.raises(ValueError, match="no fp32 master weights"):
        _policy(torch.bfloat16).load_state(tmp_path)


def test_fp32_parameters_need_no_master() -> None:
    w32 = torch.nn.Parameter(torch.zeros(3))
    w16 = torch.nn.Parameter(torch.zeros(2, dtype=torch.bfloat16))
    mw = MasterWeights([w32, w16])
    assert len(mw.pairs) == 1 and mw.optimizer_params[0] is w32 and mw.optimizer_params[1].dtype == torch.float32
    assert not MasterWeights([w32])
    with pytest.raises(ValueError, match="2 master weights"):
        mw.load_state_dict([torch.zeros(2), torch.zeros(3)])


# --------------------------------------------------------------------------- float16: dynamic loss scaling

TINY = 1e-5  # advantages this small give gradients below float16's smallest subnormal (~6e-8) almost everywhere


def test_fp16_loss_scaling_keeps_gradients_that_would_flush_to_zero() -> None:
    d32 = _delta(_policy(torch.float32), steps=3, adv_scale=TINY)
    pol = _policy(torch.float16)
    assert pol.scaler is not None and next(pol.model.parameters()).dtype == torch.float16
    d16 = _delta(pol, steps=3, adv_scale=TINY)
    assert _changed_share(d16) > 0.9
    assert _cosine(d16, d32) > 0.99


def test_fp16_without_loss_scaling_loses_small_gradients() -> None:
    """The old behaviour (``fp16_loss_scaling=false``): most float16 gradients of a small loss are exactly zero."""
    pol = _policy(torch.float16, loss_scaling=False)
    assert pol.scaler is None
    d = _delta(pol, steps=3, adv_scale=TINY)
    assert _changed_share(d) < 0.1


def test_fp16_overflow_skips_the_step_and_halves_the_scale() -> None:
    pol = _policy(torch.float16)
    pol.scaler.scale = 1e30  # the scaled backward overflows float16
    before = _trained(pol)
    st = pol.update(_batch(pol))
    assert st.overflow_skipped and not st.nan_skipped and not st.stepped
    assert pol.scaler.scale == 5e29 and pol.step == 0
    after = _trained(pol)
    assert all(torch.equal(before[n], after[n]) for n in before)
    assert all(p.grad is None for _, p in pol.trainable_parameters())
    assert pol.update(_batch(pol)).overflow_skipped  # still too high: halved again, never a crash
    pol.scaler.scale = 2.0**16
    assert pol.update(_batch(pol)).stepped


def test_loss_scaler_schedule_on_hand_computed_steps() -> None:
    sc = LossScaler(init_scale=8.0, growth_interval=2, min_scale=2.0)
    sc.update(finite=True)
    assert (sc.scale, sc.good_steps) == (8.0, 1)
    sc.update(finite=True)
    assert (sc.scale, sc.good_steps) == (16.0, 0)  # two finite steps in a row: doubled
    sc.update(finite=True)
    sc.update(finite=False)
    assert (sc.scale, sc.good_steps) == (8.0, 0)  # an overflow halves it and restarts the count
    for _ in range(3):
        sc.update(finite=False)
    assert sc.scale == 2.0  # never below min_scale
    g = torch.nn.Parameter(torch.zeros(2))
    g.grad = torch.tensor([4.0, -6.0])
    sc.unscale([g])
    assert torch.equal(g.grad, torch.tensor([2.0, -3.0]))


def test_bf16_and_fp32_policies_have_no_loss_scaler() -> None:
    assert _policy(torch.bfloat16).scaler is None and _policy(torch.float32).scaler is None


def test_fp16_resume_restores_the_loss_scale(tmp_path: Path) -> None:
    a = _policy(torch.float16)
    a.scaler.scale, a.scaler.good_steps = 1024.0, 7
    a.update(_batch(a))
    a.save_state(tmp_path)
    b = _policy(torch.float16)
    b.load_state(tmp_path)
    assert (b.scaler.scale, b.scaler.good_steps) == (1024.0, 8)
