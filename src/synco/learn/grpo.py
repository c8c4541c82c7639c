"""GRPO maths: group-relative advantages and the clipped token-level policy loss.

Pure torch functions, no model code, so every number can be checked by hand.
Shapes use ``G`` for the group size (samples of one prompt), ``B`` for rows of a
(micro-)batch and ``T`` for completion tokens (right-padded, with a mask).

Loss aggregation is designed for gradient accumulation: the caller passes the
*global* normalizer (completion tokens, or sequences, of the whole GRPO batch),
so splitting a batch into micro-batches, or dropping rows whose advantage is
zero, gives exactly the gradient of one big batch.

Off-policy correction (asynchronous co-training, attempts sampled by weights a few
optimizer steps old): the decoupled PPO objective. The trust region is measured
against the *proximal* policy (the learner at the start of the update), and each
token's surrogate is reweighted by its importance weight ``w = pi_prox / pi_behav``
of the *behaviour* policy that sampled it, bounded at ``is_cap`` one of two ways
(:func:`bounded_weights`): ``truncate`` keeps ``min(w, is_cap)`` (truncated
importance sampling: every token trains, a stale one with at most ``is_cap``);
``mask`` keeps ``w`` and drops the tokens above the cap (weight 0, as AReaL does).
Both are biased where the cap binds and bound the variance a stale, unlikely token adds.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from synco.core.policy import ISMode, LossAgg



def group_advantages(rewards: Tensor, scale_by_std: bool = True, eps: float = 1e-6) -> Tensor:
    """Group-relative advantages of one group's rewards.

    Args:
        rewards: ``(G,)`` rewards of the G samples drawn for one prompt.
        scale_by_std: ``True`` is GRPO, ``(r - mean) / (std + eps)``; ``False`` is
            Dr. GRPO, ``r - mean`` (no per-group rescaling, so easy/hard groups are
            not up-weighted).
        eps: added to the std so a constant group gives zeros, not NaN.

    Returns:
        ``(G,)`` float advantages. The std is the *sample* std (Bessel's
        correction, ``torch.std`` default), as in the DeepSeekMath / TRL / verl
        implementations; a group of one sample gets advantage 0.
    """
    r = rewards.to(torch.float32) if not rewards.is_floating_point() else rewards
    if r.ndim != 1:
        raise ValueError(f"rewards must be 1-D (G,), got shape {tuple(r.shape)}")
    if r.numel() <= 1:
        return torch.zeros_like(r)
    centred = r - r.mean()
    if not scale_by_std:
        return centred
    return centred / (r.std(unbiased=True) + eps)


@dataclass(frozen=True)
class LossStats:
    """Diagnostics of one ``policy_loss`` call, all over masked (completion) tokens.

    ``clip_frac``: share of tokens where the clipped term was the active one
    (the ratio left the trust region in the direction the advantage pushes).
    ``ratio_mean``: mean of ``exp(logp - old_logp)``. ``kl``: mean k3 KL to the
    reference (0.0 without one). ``n_tokens``: number of masked tokens, so
    callers can weight stats of several micro-batches.

    With behaviour log-probs (the decoupled loss), the importance weights
    ``w = exp(proximal - behaviour)`` *before* truncation, so they show how far the
    sampler drifted: ``is_weight_mean``, ``is_weight_std`` (population std, so
    micro-batches combine exactly from ``n_tokens``, mean and std),
    ``is_weight_max``, and ``is_truncated_frac``, the share of tokens with
    ``w > is_cap`` (their weight was cut to the cap). All None without them.
    """

    clip_frac: float
    ratio_mean: float
    kl: float
    n_tokens: int
    is_weight_mean: float | None = None
    is_weight_std: float | None = None
    is_weight_max: float | None = None
    is_truncated_frac: float | None = None


def k3_kl(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Per-token k3 estimator of KL(policy || reference): ``exp(d) - d - 1`` with ``d = ref - logp``.

    Non-negative, unbiased for samples drawn from the policy, and low-variance
    (Schulman's "approximating KL divergence"). Shapes: ``(B, T)`` in and out.
    """
    d = ref_logprobs - logprobs
    return torch.exp(d) - d - 1.0


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    loss_agg: LossAgg = "token-mean",
    normalizer: float | None = None,
    ref_logprobs: Tensor | None = None,
    kl_coef: float = 0.0,
    behaviour_logprobs: Tensor | None = None,
    is_cap: float = 2.0,
    is_mode: ISMode = "truncate",
) -> tuple[Tensor, LossStats]:
    """Token-level clipped surrogate loss of GRPO/DAPO, with an optional k3 KL penalty and off-policy correction.

    Per token: ``max(-A * ratio, -A * clip(ratio, 1 - clip_low, 1 + clip_high))``
    (i.e. ``-min(ratio*A, clip(ratio)*A)``) plus ``kl_coef * k3_kl`` when a
    reference is given. ``clip_high > clip_low`` is DAPO's "clip-higher".

    With ``behaviour_logprobs`` (decoupled PPO), ``old_logprobs`` are the
    *proximal* policy's and the surrogate is multiplied by the detached weight
    ``w = exp(old - behaviour)`` bounded at ``is_cap`` (:func:`bounded_weights`:
    ``min(w, is_cap)`` with ``is_mode="truncate"``, 0 above the cap with ``"mask"``):
    the ratio still keeps each step near the learner's own recent weights, while
    the weight corrects for the tokens having been sampled by older ones; the cap
    bounds the variance a stale, unlikely token can add. A masked token still counts
    in the normalizer (it adds 0), so micro-batches still add up to the batch. The
    KL term is not reweighted. Without ``behaviour_logprobs`` the loss is exactly
    the plain one.

    Args:
        logprobs: ``(B, T)`` log-probs of the sampled tokens under the current policy (carries grad).
        old_logprobs: ``(B, T)`` log-probs under the policy that sampled them (no grad); with
            ``behaviour_logprobs``, under the proximal policy (the learner at the update's start).
        advantages: ``(B,)`` one advantage per sequence, broadcast over its tokens.
        mask: ``(B, T)`` 1 on completion tokens, 0 on padding (bool or float).
        clip_low, clip_high: the trust region ``[1 - clip_low, 1 + clip_high]`` of the ratio.
        loss_agg: ``"token-mean"``: sum over all masked tokens / ``normalizer``
            (default: this call's mask sum) — every token weighs the same, long
            answers are not down-weighted (DAPO). ``"seq-mean-token-mean"``: each
            sequence's token mean, summed / ``normalizer`` (default: ``B``) — the
            original GRPO per-sequence average.
        normalizer: the *global* count (tokens for token-mean, sequences for
            seq-mean-token-mean) of the whole GRPO batch, including rows in other
            micro-batches and rows skipped for zero advantage. Then the losses
            (and gradients) of micro-batches simply add up to the whole-batch ones.
        ref_logprobs: ``(B, T)`` reference-policy log-probs, or None for no KL term.
        kl_coef: weight of the KL term (ignored without ``ref_logprobs``).
        behaviour_logprobs: ``(B, T)`` log-probs under the policy that sampled the tokens
            (possibly several optimizer steps old), or None for the plain on-policy loss.
        is_cap: the importance weight's bound (``>= 1``, so an on-policy token's weight 1 is never cut).
        is_mode: ``"truncate"`` (a weight above ``is_cap`` becomes ``is_cap``) or ``"mask"`` (its token is dropped).

    Returns:
        ``(loss, stats)``: a scalar tensor and detached :class:`LossStats`.
    """
    if logprobs.shape != old_logprobs.shape or logprobs.shape != mask.shape:
        raise ValueError(
            f"shape mismatch: logprobs {tuple(logprobs.shape)}, old {tuple(old_logprobs.shape)}, mask {tuple(mask.shape)}"
        )
    if advantages.shape != logprobs.shape[:1]:
        raise ValueError(f"advantages must be (B,)={tuple(logprobs.shape[:1])}, got {tuple(advantages.shape)}")
    if normalizer is not None and normalizer <= 0:
        raise ValueError(f"normalizer must be positive, got {normalizer}")
    if behaviour_logprobs is not None and behaviour_logprobs.shape != logprobs.shape:
        raise ValueError(
            f"shape mismatch: behaviour_logprobs {tuple(behaviour_logprobs.shape)}, logprobs {tuple(logprobs.shape)}"
        )
    if not is_cap >= 1.0:
        raise ValueError(f"is_cap must be >= 1, got {is_cap}")
    if is_mode not in ("truncate", "mask"):
        raise ValueError(f"is_mode must be 'truncate' or 'mask', got {is_mode!r}")

    m = mask.to(logprobs.dtype)
    adv = advantages.to(logprobs.dtype).unsqueeze(-1)
    ratio = torch.exp(logprobs - old_logprobs.detach())
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    per_token = torch.maximum(unclipped, clipped)
    raw_w: Tensor | None = None
    if behaviour_logprobs is not None:
        raw_w, bounded_w = importance_weights(old_logprobs, behaviour_logprobs, m, is_cap, is_mode)
        per_token = bounded_w * per_token

    kl_tok: Tensor | None = None
    if ref_logprobs is not None:
        kl_tok = k3_kl(logprobs, ref_logprobs.detach())
        if kl_coef != 0.0:
            per_token = per_token + kl_coef * kl_tok

    # Zero the padding with where(), not a product, so a NaN/inf in a padded slot cannot leak in.
    per_token = torch.where(m > 0, per_token, torch.zeros_like(per_token))
    if loss_agg == "token-mean":
        denom = float(normalizer) if normalizer is not None else max(float(m.sum().item()), 1.0)
        loss = per_token.sum() / denom
    elif loss_agg == "seq-mean-token-mean":
        seq_mean = per_token.sum(-1) / m.sum(-1).clamp(min=1.0)
        denom = float(normalizer) if normalizer is not None else float(max(logprobs.shape[0], 1))
        loss = seq_mean.sum() / denom
    else:
        raise ValueError(f"unknown loss_agg {loss_agg!r}")

    with torch.no_grad():
        n = float(m.sum().item())
        safe = max(n, 1.0)
        active = (clipped > unclipped).to(m.dtype) * m
        stats = LossStats(
            clip_frac=float(active.sum().item()) / safe,
            ratio_mean=float((torch.where(m > 0, ratio, torch.zeros_like(ratio))).sum().item()) / safe,
            kl=float(torch.where(m > 0, kl_tok, torch.zeros_like(kl_tok)).sum().item()) / safe if kl_tok is not None else 0.0,
            n_tokens=int(n),
            **({} if raw_w is None else importance_stats(raw_w, m, is_cap)),
        )
    return loss, stats


def bounded_weights(weights: Tensor, is_cap: float, is_mode: ISMode = "truncate") -> Tensor:
    """Importance weights bounded at ``is_cap``: ``min(w, is_cap)`` (``"truncate"``) or ``w`` where ``w <= is_cap``,
    else 0 (``"mask"``: the token is dropped). Any shape; a weight equal to the cap is kept either way."""
    if is_mode == "truncate":
        return torch.clamp(weights, max=is_cap)
    if is_mode == "mask":
        return torch.where(weights <= is_cap, weights, torch.zeros_like(weights))
    raise ValueError(f"is_mode must be 'truncate' or 'mask', got {is_mode!r}")


def importance_weights(proximal: Tensor, behaviour: Tensor, mask: Tensor, is_cap: float,
                       is_mode: ISMode = "truncate") -> tuple[Tensor, Tensor]:
    """Detached per-token weights ``exp(proximal - behaviour)``: raw, and bounded at ``is_cap`` (:func:`bounded_weights`).

    Padding gets weight 1 (never NaN/inf, so nothing leaks into the loss or its
    gradient through a masked slot). Shapes: ``(B, T)`` in and out.
    """
    with torch.no_grad():
        w = torch.exp(proximal.detach() - behaviour.detach()).to(mask.dtype)
        w = torch.where(mask > 0, w, torch.ones_like(w))
        return w, bounded_weights(w, is_cap, is_mode)


def importance_stats(weights: Tensor, mask: Tensor, is_cap: float) -> dict[str, float]:
    """Mean, population std and max of the raw weights over masked tokens, and the share above ``is_cap`` (cut to
    it, or dropped: ``is_truncated_frac`` either way)."""
    with torch.no_grad():
        on = mask > 0
        w = weights[on].to(torch.float64)
        if w.numel() == 0:
            return {"is_weight_mean": 1.0, "is_weight_std": 0.0, "is_weight_max": 1.0, "is_truncated_frac": 0.0}
        return {
            "is_weight_mean": float(w.mean().item()),
            "is_weight_std": float(w.std(unbiased=False).item()),
            "is_weight_max": float(w.max().item()),
            "is_truncated_frac": float((w > is_cap).to(torch.float64).mean().item()),
        }
