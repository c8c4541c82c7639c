"""GRPO maths checked against hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch
from pydantic import ValidationError

from synco.core.policy import GRPOConfig
from synco.learn.grpo import group_advantages, k3_kl, policy_loss
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


def test_grpo_config_defaults_and_validation() -> None:
    cfg = GRPOConfig()
    assert (cfg.clip_low, cfg.clip_high, cfg.loss_agg, cfg.kl_coef) == (0.2, 0.28, "token-mean", 0.0)
    assert cfg.micro_batch_size == 16 and cfg.epochs == 1 and cfg.max_grad_norm == 1.0
    assert cfg.scale_adv_by_std is True
    with pytest.raises(ValidationError):
        GRPOConfig(loss_agg="sum")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        GRPOConfig(lr=1e-3, unknown=1)  # type: ignore[call-arg]
    assert all(f.description for f in GRPOConfig.model_fields.values())
