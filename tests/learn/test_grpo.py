"""GRPO maths checked against hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch
from pydantic import ValidationError

from synco.core.policy import GRPOConfig
from synco.learn.grpo import bounded_weights, group_advantages, importance_weights, k3_kl, policy_loss
from synco.core.rewards import is_gradient_bearing

# --------------------------------------------------------------------------- advantages


def test_advantages_two_of_four() -> None:
    # mean 0.5, sample std sqrt((4 * 0.25) / 3) = sqrt(1/3); 0.5 / sqrt(1/3) = sqrt(3)/2
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), eps=0.0)
    h = math.sqrt(3) / 2
    assert torch.allclose(adv, torch.tensor([h, -h, -h, h]))


def test_advantages_one_of_four() -> None:
    # mean 0.25; sample var (0.75^2 + 3 * 0.25^2) / 3 = 0.25 -> std 0.5
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), eps=0.0)
    assert torch.allclose(adv, torch.tensor([1.5, -0.5, -0.5, -0.5]))


def test_advantages_eps_in_denominator() -> None:
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), eps=0.5)
    assert torch.allclose(adv, torch.tensor([0.75, -0.25, -0.25, -0.25]))  # / (0.5 + 0.5)


def test_dr_grpo_is_centred_only() -> None:
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), scale_by_std=False)
    assert torch.allclose(adv, torch.tensor([0.75, -0.25, -0.25, -0.25]))
    adv = group_advantages(torch.tensor([3.0, 1.0]), scale_by_std=False)
    assert torch.allclose(adv, torch.tensor([1.0, -1.0]))


def test_constant_group_gives_zeros() -> None:
    for scale in (True, False):
        adv = group_advantages(torch.tensor([0.7, 0.7, 0.7]), scale_by_std=scale)
        assert torch.equal(adv, torch.zeros(3))
    assert torch.equal(group_advantages(torch.tensor([5.0])), torch.zeros(1))


def test_integer_rewards_and_bad_shape() -> None:
    adv = group_advantages(torch.tensor([1, 0]), eps=0.0)
    assert adv.dtype == torch.float32
    # mean 0.5, sample std sqrt(0.5) -> +-0.5/sqrt(0.5)
    assert torch.allclose(adv, torch.tensor([1.0, -1.0]) * 0.5 / math.sqrt(0.5))
    with pytest.raises(ValueError):
        group_advantages(torch.zeros(2, 2))


def test_is_gradient_bearing() -> None:
    assert is_gradient_bearing([0.0, 1.0, 1.0])
    assert not is_gradient_bearing([1.0, 1.0, 1.0])
    assert not is_gradient_bearing([0.3, 0.3 + 1e-12])
    assert is_gradient_bearing([0.3, 0.3 + 1e-12], tol=0.0)
    assert not is_gradient_bearing([1.0])
    assert not is_gradient_bearing([])


# --------------------------------------------------------------------------- loss

# Row 0 (A=+1): ratios 1.5, 0.5, 1.1 -> per token max(-r, -clip(r, 0.8, 1.28)) = -1.28, -0.5, -1.1
# Row 1 (A=-1): ratios 0.5, 1.5, (pad) -> max(r, clip(r)) = 0.8, 1.5
RATIOS = torch.tensor([[1.5, 0.5, 1.1], [0.5, 1.5, 2.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
ADV = torch.tensor([1.0, -1.0])
ROW0, ROW1 = -1.28 - 0.5 - 1.1, 0.8 + 1.5


def _logps() -> tuple[torch.Tensor, torch.Tensor]:
    old = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.2, -2.2]])
    return old + torch.log(RATIOS), old


def test_token_mean_by_hand_with_asymmetric_clipping() -> None:
    logp, old = _logps()
    loss, st = policy_loss(logp, old, ADV, MASK, clip_low=0.2, clip_high=0.28)
    assert loss.item() == pytest.approx((ROW0 + ROW1) / 5, abs=1e-6)  # -0.116
    assert st.clip_frac == pytest.approx(2 / 5)  # r=1.5 with A>0 and r=0.5 with A<0
    assert st.ratio_mean == pytest.approx((1.5 + 0.5 + 1.1 + 0.5 + 1.5) / 5, abs=1e-6)
    assert st.kl == 0.0 and st.n_tokens == 5


def test_symmetric_clip_changes_the_high_side_only() -> None:
    logp, old = _logps()
    loss, _ = policy_loss(logp, old, ADV, MASK, clip_low=0.2, clip_high=0.2)
    assert loss.item() == pytest.approx((-1.2 - 0.5 - 1.1 + 0.8 + 1.5) / 5, abs=1e-6)


def test_seq_mean_token_mean_differs_on_unequal_lengths() -> None:
    logp, old = _logps()
    loss, _ = policy_loss(logp, old, ADV, MASK, loss_agg="seq-mean-token-mean")
    expected = (ROW0 / 3 + ROW1 / 2) / 2  # 0.095
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    token_mean, _ = policy_loss(logp, old, ADV, MASK, loss_agg="token-mean")
    assert abs(loss.item() - token_mean.item()) > 0.2  # 0.095 vs -0.116


@pytest.mark.parametrize(("agg", "norm"), [("token-mean", 5.0), ("seq-mean-token-mean", 2.0)])
def test_global_normalizer_makes_halves_sum_to_whole(agg: str, norm: float) -> None:
    logp, old = _logps()
    whole_in = logp.clone().requires_grad_(True)
    whole, _ = policy_loss(whole_in, old, ADV, MASK, loss_agg=agg)  # type: ignore[arg-type]
    whole.backward()
    half_in = logp.clone().requires_grad_(True)
    total = torch.zeros(())
    for r in (0, 1):
        part, _ = policy_loss(half_in[r : r + 1], old[r : r + 1], ADV[r : r + 1], MASK[r : r + 1], loss_agg=agg, normalizer=norm)  # type: ignore[arg-type]
        part.backward()
        total = total + part.detach()
    assert total.item() == pytest.approx(whole.item(), abs=1e-6)
    assert whole_in.grad is not None and half_in.grad is not None
    assert torch.allclose(whole_in.grad, half_in.grad, atol=1e-7)


def test_normalizer_scales_token_mean() -> None:
    logp, old = _logps()
    loss, _ = policy_loss(logp, old, ADV, MASK, normalizer=10.0)
    assert loss.item() == pytest.approx((ROW0 + ROW1) / 10, abs=1e-6)
    with pytest.raises(ValueError):
        policy_loss(logp, old, ADV, MASK, normalizer=0.0)


def test_k3_kl_by_hand() -> None:
    logp = torch.zeros(1, 2)
    ref = torch.tensor([[math.log(2.0), -math.log(2.0)]])
    # exp(d) - d - 1: 2 - ln2 - 1 and 0.5 + ln2 - 1; they sum to 0.5
    kl = k3_kl(logp, ref)
    assert torch.allclose(kl, torch.tensor([[1 - math.log(2.0), math.log(2.0) - 0.5]]))
    loss, st = policy_loss(logp, logp, torch.zeros(1), torch.ones(1, 2), ref_logprobs=ref, kl_coef=0.5)
    assert loss.item() == pytest.approx(0.5 * 0.25, abs=1e-6)
    assert st.kl == pytest.approx(0.25, abs=1e-6)
    loss0, st0 = policy_loss(logp, logp, torch.zeros(1), torch.ones(1, 2), ref_logprobs=ref, kl_coef=0.0)
    assert loss0.item() == 0.0 and st0.kl == pytest.approx(0.25, abs=1e-6)  # reported even when not weighted
    assert torch.equal(k3_kl(ref, ref), torch.zeros(1, 2))


def test_positive_advantage_gradient_raises_logprob() -> None:
    logp = torch.full((1, 3), -1.0, requires_grad=True)
    loss, _ = policy_loss(logp, logp.detach(), torch.tensor([2.0]), torch.ones(1, 3))
    loss.backward()
    assert logp.grad is not None
    # ratio 1: d loss / d logp = -A / N per token, so a descent step raises logp
    assert torch.allclose(logp.grad, torch.full((1, 3), -2.0 / 3))


def test_clipped_tokens_get_no_gradient() -> None:
    old = torch.zeros(1, 2)
    logp = torch.log(torch.tensor([[1.5, 1.0]])).requires_grad_(True)
    loss, st = policy_loss(logp, old, torch.tensor([1.0]), torch.ones(1, 2))
    loss.backward()
    assert logp.grad is not None
    assert logp.grad[0, 0].item() == 0.0  # ratio 1.5 > 1.28 with A>0: clipped
    assert logp.grad[0, 1].item() == pytest.approx(-0.5)  # ratio 1 * (-A / 2)
    assert st.clip_frac == 0.5


def test_nan_in_padding_does_not_leak() -> None:
    logp, old = _logps()
    logp = logp.clone()
    logp[1, 2] = float("nan")
    loss, _ = policy_loss(logp, old, ADV, MASK)
    assert loss.item() == pytest.approx((ROW0 + ROW1) / 5, abs=1e-6)


def test_shape_checks() -> None:
    with pytest.raises(ValueError):
        policy_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(3), torch.ones(2, 3))
    with pytest.raises(ValueError):
        policy_loss(torch.zeros(2, 3), torch.zeros(2, 2), torch.zeros(2), torch.ones(2, 3))
    with pytest.raises(ValueError):
        policy_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1), torch.ones(1, 1), loss_agg="sum")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- decoupled (off-policy) loss


def test_decoupled_loss_by_hand() -> None:
    # One row, A=+1, two tokens, is_cap 2.
    # Token 1: ratio current/proximal 1.1 (inside the trust region), w = proximal/behaviour 1.5 -> 1.5 * -1.1 = -1.65.
    # Token 2: ratio 0.5 (max(-0.5, -0.8) = -0.5), w = 3 truncated to 2 -> 2 * -0.5 = -1.0.
    # Token mean: (-1.65 - 1.0) / 2 = -1.325. Raw weights 1.5 and 3: mean 2.25, population std 0.75, max 3,
    # one of two above the cap. Gradient per token: -w * ratio * A / N = -0.825 and -0.5.
    prox = torch.tensor([[-1.0, -0.5]])
    behav = (prox - torch.log(torch.tensor([[1.5, 3.0]]))).requires_grad_(True)
    logp = (prox + torch.log(torch.tensor([[1.1, 0.5]]))).requires_grad_(True)
    loss, st = policy_loss(logp, prox, torch.tensor([1.0]), torch.ones(1, 2), behaviour_logprobs=behav, is_cap=2.0)
    assert loss.item() == pytest.approx(-1.325, abs=1e-6)
    assert st.is_weight_mean == pytest.approx(2.25, abs=1e-6) and st.is_weight_std == pytest.approx(0.75, abs=1e-6)
    assert st.is_weight_max == pytest.approx(3.0, abs=1e-6) and st.is_truncated_frac == 0.5
    assert st.ratio_mean == pytest.approx(0.8, abs=1e-6) and st.clip_frac == 0.0  # still current / proximal
    loss.backward()
    assert logp.grad is not None and torch.allclose(logp.grad, torch.tensor([[-0.825, -0.5]]), atol=1e-6)
    assert behav.grad is None  # the weight is detached


def test_bounded_weights_by_hand() -> None:
    w = torch.tensor([[0.5, 2.0, 2.5], [4.0, 1.0, 1.9]])
    assert torch.equal(bounded_weights(w, 2.0, "truncate"), torch.tensor([[0.5, 2.0, 2.0], [2.0, 1.0, 1.9]]))
    assert torch.equal(bounded_weights(w, 2.0, "mask"), torch.tensor([[0.5, 2.0, 0.0], [0.0, 1.0, 1.9]]))  # = cap: kept
    assert torch.equal(bounded_weights(w, 5.0, "mask"), w) and torch.equal(bounded_weights(w, 5.0, "truncate"), w)
    with pytest.raises(ValueError, match="is_mode must be 'truncate' or 'mask', got 'clip'"):
        bounded_weights(w, 2.0, "clip")  # type: ignore[arg-type]


def test_masked_decoupled_loss_by_hand() -> None:
    # test_decoupled_loss_by_hand's tokens with is_mode="mask": token 1 as before, -1.5 * 1.1 = -1.65; token 2's
    # w = 3 > cap 2 drops it (weight 0) but it still counts in the token mean: -1.65 / 2 = -0.825. Gradient: -0.825
    # and 0. The raw-weight numbers are the same (1 of 2 above the cap: dropped, not cut).
    prox = torch.tensor([[-1.0, -0.5]])
    behav = prox - torch.log(torch.tensor([[1.5, 3.0]]))
    logp = (prox + torch.log(torch.tensor([[1.1, 0.5]]))).requires_grad_(True)
    loss, st = policy_loss(logp, prox, torch.tensor([1.0]), torch.ones(1, 2), behaviour_logprobs=behav, is_cap=2.0,
                           is_mode="mask")
    assert loss.item() == pytest.approx(-0.825, abs=1e-6)
    assert st.is_weight_mean == pytest.approx(2.25, abs=1e-6) and st.is_truncated_frac == 0.5 and st.n_tokens == 2
    loss.backward()
    assert logp.grad is not None and torch.allclose(logp.grad, torch.tensor([[-0.825, 0.0]]), atol=1e-6)


def test_masked_tokens_by_hand_on_two_rows() -> None:
    logp, old = _logps()
    behav = old - torch.log(torch.tensor([[1.0, 2.5, 0.5], [4.0, 1.0, 1e6]]))  # the padded slot's 1e6 is ignored
    loss, st = policy_loss(logp, old, ADV, MASK, behaviour_logprobs=behav, is_cap=2.0, is_mode="mask")
    # per token (see ROW0/ROW1): row 0 -1.28*1, -0.5*0 (2.5 dropped), -1.1*0.5; row 1 0.8*0 (4 dropped), 1.5*1
    assert loss.item() == pytest.approx((-1.28 + 0.0 - 0.55 + 0.0 + 1.5) / 5, abs=1e-6)
    assert st.is_truncated_frac == pytest.approx(2 / 5)
    parts = [policy_loss(logp[r : r + 1], old[r : r + 1], ADV[r : r + 1], MASK[r : r + 1], normalizer=5.0,
                         behaviour_logprobs=behav[r : r + 1], is_cap=2.0, is_mode="mask")[0] for r in (0, 1)]
    assert (parts[0] + parts[1]).item() == pytest.approx(loss.item(), abs=1e-6)  # micro-batches add up
    with pytest.raises(ValueError, match="is_mode must be 'truncate' or 'mask', got 'drop'"):
        policy_loss(logp, old, ADV, MASK, behaviour_logprobs=behav, is_mode="drop")  # type: ignore[arg-type]


def test_decoupled_identity_when_behaviour_is_proximal() -> None:
    logp, old = _logps()
    for agg in ("token-mean", "seq-mean-token-mean"):
        plain, st0 = policy_loss(logp, old, ADV, MASK, loss_agg=agg)  # type: ignore[arg-type]
        dec, st = policy_loss(logp, old, ADV, MASK, loss_agg=agg, behaviour_logprobs=old.clone())  # type: ignore[arg-type]
        assert torch.equal(plain, dec)  # w = exp(0) = 1 exactly
        assert (st.is_weight_mean, st.is_weight_std, st.is_weight_max, st.is_truncated_frac) == (1.0, 0.0, 1.0, 0.0)
        assert (st.clip_frac, st.ratio_mean, st.n_tokens) == (st0.clip_frac, st0.ratio_mean, st0.n_tokens)


def test_no_behaviour_is_the_plain_loss() -> None:
    logp, old = _logps()
    a_in, b_in = logp.clone().requires_grad_(True), logp.clone().requires_grad_(True)
    a, sa = policy_loss(a_in, old, ADV, MASK)
    b, sb = policy_loss(b_in, old, ADV, MASK, behaviour_logprobs=None, is_cap=5.0)
    a.backward()
    b.backward()
    assert torch.equal(a, b) and a_in.grad is not None and b_in.grad is not None and torch.equal(a_in.grad, b_in.grad)
    assert sa == sb and sb.is_weight_mean is None and sb.is_truncated_frac is None
    assert a.item() == pytest.approx((ROW0 + ROW1) / 5, abs=1e-6)


def test_truncation_counted_and_masked_tokens_ignored() -> None:
    logp, old = _logps()
    # raw weights; the padded slot (row 1, token 2) holds a huge one and a NaN is no better: both must be ignored
    w = torch.tensor([[1.0, 2.5, 0.5], [4.0, 1.0, 1e6]])
    behav = old - torch.log(w)
    for pad in (behav[1, 2].item(), float("nan")):
        behav[1, 2] = pad
        logp_in = logp.clone().requires_grad_(True)
        loss, st = policy_loss(logp_in, old, ADV, MASK, behaviour_logprobs=behav, is_cap=2.0)
        # per token (see ROW0/ROW1): row 0 -1.28*1, -0.5*2 (2.5 cut), -1.1*0.5; row 1 0.8*2 (4 cut), 1.5*1
        assert loss.item() == pytest.approx((-1.28 - 1.0 - 0.55 + 1.6 + 1.5) / 5, abs=1e-6)
        assert st.is_truncated_frac == pytest.approx(2 / 5) and st.is_weight_max == pytest.approx(4.0)
        assert st.is_weight_mean == pytest.approx((1.0 + 2.5 + 0.5 + 4.0 + 1.0) / 5, abs=1e-6)
        loss.backward()
        assert logp_in.grad is not None and torch.isfinite(logp_in.grad).all() and logp_in.grad[1, 2] == 0.0
    raw, capped = importance_weights(old, behav, MASK, 2.0)
    assert raw[1, 2] == 1.0 and capped.max() == 2.0


def test_decoupled_halves_sum_to_whole() -> None:
    logp, old = _logps()
    behav = old - torch.log(torch.tensor([[1.0, 2.5, 0.5], [4.0, 1.0, 1.0]]))
    whole, _ = policy_loss(logp, old, ADV, MASK, behaviour_logprobs=behav)
    parts = [policy_loss(logp[r : r + 1], old[r : r + 1], ADV[r : r + 1], MASK[r : r + 1], normalizer=5.0,
                         behaviour_logprobs=behav[r : r + 1])[0] for r in (0, 1)]  # fmt: skip
    assert (parts[0] + parts[1]).item() == pytest.approx(whole.item(), abs=1e-6)


def test_decoupled_checks() -> None:
    z, one = torch.zeros(2, 3), torch.ones(2, 3)
    with pytest.raises(ValueError, match=r"behaviour_logprobs \(2, 2\), logprobs \(2, 3\)"):
        policy_loss(z, z, torch.zeros(2), one, behaviour_logprobs=torch.zeros(2, 2))
    with pytest.raises(ValueError, match="is_cap must be >= 1, got 0.5"):
        policy_loss(z, z, torch.zeros(2), one, behaviour_logprobs=z, is_cap=0.5)
    _, st = policy_loss(z, z, torch.zeros(2), one, behaviour_logprobs=z - 1.0, is_cap=1.0)  # w = e > 1 = cap
    assert st.is_truncated_frac == 1.0


def test_grpo_config_defaults_and_validation() -> None:
    cfg = GRPOConfig()
    assert (cfg.clip_low, cfg.clip_high, cfg.loss_agg, cfg.kl_coef) == (0.2, 0.28, "token-mean", 0.0)
    assert cfg.micro_batch_size == 16 and cfg.epochs == 1 and cfg.max_grad_norm == 1.0
    assert cfg.scale_adv_by_std is True
    assert cfg.decoupled is False and cfg.is_cap == 2.0 and cfg.is_mode == "truncate"
    assert GRPOConfig(is_mode="mask").is_mode == "mask"
    with pytest.raises(ValidationError, match=r"is_mode[\s\S]*input_value='drop'"):
        GRPOConfig(is_mode="drop")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match=r"is_cap[\s\S]*input_value=0.5"):
        GRPOConfig(is_cap=0.5)
    with pytest.raises(ValidationError):
        GRPOConfig(loss_agg="sum")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        GRPOConfig(lr=1e-3, unknown=1)  # type: ignore[call-arg]
    assert all(f.description for f in GRPOConfig.model_fields.values())
