"""fp32 master weights for a model trained in bfloat16 / float16.

Why: AdamW's step on a bf16 weight is rounded to bf16. bf16 keeps 8 bits of
mantissa, so a weight of magnitude 0.02 moves in steps of ~1e-4; an update of
lr 1e-6 is rounded away and the weight never changes, while the loss looks
normal (a probe of the ``paper`` preset's settings found 1.9 % of bf16 weights
changed after 10 steps, 99.99 % in fp32). The standard cure, used here: the
model keeps computing in its low precision (forward, backward, generation,
half the memory), the optimizer owns an fp32 copy ("master") of every
low-precision trainable parameter and its fp32 Adam moments, and after each
step the masters are rounded back into the model. Small updates accumulate in
the masters until they show in the model.

Used by :class:`~synco.learn.hf_policy.HFPolicy` (``fp32_master_weights``, on by
default). Parameters that are already fp32 (e.g. peft's LoRA adapters on a
bf16 base) are optimised in place: nothing to do for them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

LOW_PRECISION = (torch.bfloat16, torch.float16)


class MasterWeights:
    """fp32 masters of the low-precision parameters among ``params``.

    ``optimizer_params`` is what the optimizer should own: the fp32 masters in
    place of the low-precision parameters, the fp32 parameters themselves.
    Per step: :meth:`grads_to_masters` after backward, the optimizer step on
    ``optimizer_params``, then :meth:`masters_to_model`.
    """

    def __init__(self, params: Sequence[torch.nn.Parameter]) -> None:
        self.pairs: list[tuple[torch.nn.Parameter, torch.nn.Parameter]] = []
        self.optimizer_params: list[torch.nn.Parameter] = []
        for p in params:
            if p.dtype in LOW_PRECISION:
                master = torch.nn.Parameter(p.detach().clone().float(), requires_grad=True)
                self.pairs.append((p, master))
                self.optimizer_params.append(master)
            else:
                self.optimizer_params.append(p)

    def __bool__(self) -> bool:
        return bool(self.pairs)

    def grads_to_masters(self) -> None:
        """Move each low-precision gradient to its master as fp32 (the model's ``.grad`` is freed)."""
        for p, m in self.pairs:
            m.grad = None if p.grad is None else p.grad.detach().float()
            p.grad = None

    def zero_model_grads(self) -> None:
        """Drop the low-precision gradients (the optimizer's ``zero_grad`` only sees the masters)."""
        for p, _ in self.pairs:
            p.grad = None

    @torch.no_grad()
    def masters_to_model(self) -> None:
        """Round every master into its model parameter (after an optimizer step, or after loading masters)."""
        for p, m in self.pairs:
            p.copy_(m.to(p.dtype))

    def state_dict(self) -> list[torch.Tensor]:
        """The fp32 masters, in parameter order (saved with the optimizer state for an exact resume)."""
        return [m.detach().clone() for _, m in self.pairs]

    @torch.no_grad()
    def load_state_dict(self, masters: Sequence[torch.Tensor]) -> None:
        """Restore the masters saved by :meth:`state_dict` and round them into the model."""
        if len(masters) != len(self.pairs):
            raise ValueError(f"the saved state has {len(masters)} master weights, the model has {len(self.pairs)} "
                             "low-precision trainable parameters (was it saved with another dtype or model?)")
        for (p, m), saved in zip(self.pairs, masters, strict=True):
            if saved.shape != m.shape:
                raise ValueError(f"saved master weight of shape {tuple(saved.shape)} for a parameter of shape {tuple(m.shape)}")
            m.copy_(saved.to(m.device, torch.float32))
        self.masters_to_model()


class LossScaler:
    """Dynamic loss scaling for float16 training (what ``torch.amp.GradScaler`` does, on our masters).

    Why: float16 has 5 exponent bits; a gradient below ~6e-8 flushes to zero in the
    backward pass (a GRPO loss with small advantages, or lr-1e-6-size signals, loses
    whole tensors), and one above 65504 overflows to inf. The loss is multiplied by
    ``scale`` before backward, the fp32 master gradients are divided by it again
    (:meth:`unscale`); a step whose gradients are not finite is skipped and the scale
    halved, and after ``growth_interval`` finite steps in a row it doubles. bfloat16
    has float32's exponent range and needs none of this.
    """

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, min_scale: float = 1.0) -> None:
        self.scale = float(init_scale)
        self.growth_factor = growth_factor
        self.backoff_factor = backoff_factor
        self.growth_interval = growth_interval
        self.min_scale = min_scale
        self.good_steps = 0  # finite steps since the last change of scale

    @torch.no_grad()
    def unscale(self, params: Sequence[torch.nn.Parameter]) -> None:
        """Divide every gradient of ``params`` (the fp32 masters) by the current scale."""
        inv = 1.0 / self.scale
        for p in params:
            if p.grad is not None:
                p.grad.mul_(inv)

    def update(self, finite: bool) -> None:
        """After a step: back off on an overflow (the step was skipped), grow after a run of finite steps."""
        if not finite:
            self.scale = max(self.min_scale, self.scale * self.backoff_factor)
            self.good_steps = 0
            return
        self.good_steps += 1
        if self.good_steps >= self.growth_interval:
            self.scale *= self.growth_factor
            self.good_steps = 0

    def state_dict(self) -> dict[str, float | int]:
        return {"scale": self.scale, "good_steps": self.good_steps}

    def load_state_dict(self, state: dict[str, float | int]) -> None:
        self.scale = float(state["scale"])
        self.good_steps = int(state["good_steps"])
