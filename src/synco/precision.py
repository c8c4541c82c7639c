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

Used by :class:`~synco.hf_policy.HFPolicy` (``fp32_master_weights``, on by
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
