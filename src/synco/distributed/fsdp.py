"""One agent's learner sharded over a process group with torch FSDP2 (``fully_shard``).

Every rank of the group holds a shard of the parameters and of the optimizer
state, receives the *whole* batch and forwards only its share of the rows, so
the GRPO update over the group equals the one-process update:

* the loss normalizer (completion tokens of the whole batch) is the same on
  every rank, and FSDP's reduce-scatter *averages* gradients, so each rank's
  loss is scaled by the world size: the sum over ranks is the one-process loss;
* FSDP gathers each layer's parameters inside forward and backward, so every
  rank must run the same number of micro-batches: :func:`rank_micro_batches`
  pads a rank that has fewer rows with empty micro-batches, which forward one
  row at weight 0 (their gradient is exactly 0);
* gradient clipping sees the global norm (DTensor gradients), and the
  diagnostics (loss, clip fraction, ...) are summed over ranks.

NCCL on GPUs, gloo on CPU (``tests/distributed`` checks on CPU that two
processes give the same update as one). Generation is not sharded here: a
sharded learner's rollouts come from workers holding a full copy (the Ray
backend's job), and saving a sharded model gathers the full state first
(:func:`full_state_dict`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class DataShard:
    """This process's place in its agent's group: ``rank`` of ``world`` (and the group, None = the default one)."""

    rank: int
    world: int
    group: Any = None

    def __post_init__(self) -> None:
        if self.world < 1 or not 0 <= self.rank < self.world:
            raise ValueError(f"rank {self.rank} of world {self.world}: need 0 <= rank < world and world >= 1")


def rank_micro_batches(active: Sequence[int], micro_batch_size: int, rank: int, world: int) -> list[list[int]]:
    """This rank's micro-batches of the rows in ``active``: contiguous shares, the same count on every rank.

    Rows are dealt in contiguous blocks (rank r gets the r-th of ``world``
    near-equal blocks) and cut into micro-batches of ``micro_batch_size``;
    every rank gets as many micro-batches as the largest share needs, empty
    ones at the end where its share is smaller.
    """
    if micro_batch_size < 1:
        raise ValueError(f"micro_batch_size must be >= 1, got {micro_batch_size}")
    n = len(active)
    bounds = [n * r // world for r in range(world + 1)]
    shares = [list(active[bounds[r] : bounds[r + 1]]) for r in range(world)]
    count = max((len(s) + micro_batch_size - 1) // micro_batch_size for s in shares)
    mine = shares[rank]
    return [mine[i * micro_batch_size : (i + 1) * micro_batch_size] for i in range(count)]


def shard_model(model: torch.nn.Module, mesh: Any = None) -> torch.nn.Module:
    """``fully_shard`` every decoder layer, then the whole model (the embeddings and head with the root).

    ``mesh``: a 1-D device mesh over the agent's ranks (default: every rank of
    the default process group on this process's device type).
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    if mesh is None:
        import torch.distributed as dist

        device = next(model.parameters()).device.type
        mesh = init_device_mesh(device, (dist.get_world_size(),))
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    layers = getattr(getattr(base, "model", None), "layers", None)
    if layers is None:
        raise ValueError(f"{type(base).__name__} has no .model.layers to shard (a decoder-only HF model is expected)")
    for layer in layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def shard_policy(policy: Any, mesh: Any = None) -> Any:
    """Shard an :class:`~synco.hf_policy.HFPolicy`'s model over the group and rebuild its optimizer on the shards.

    Call it on every rank, right after building the policy (before any update).
    """
    import torch.distributed as dist

    if policy.is_peft or policy.ref_model is not None:
        raise ValueError("shard_policy supports full fine-tuning without a KL reference model for now")
    shard_model(policy.model, mesh)
    group = None if mesh is None else mesh.get_group()
    policy.shard = DataShard(dist.get_rank(group), dist.get_world_size(group), group)
    policy._build_optimizer()
    return policy


def all_reduce_sum(values: Sequence[float], shard: DataShard) -> list[float]:
    """Sum each number over the ranks of ``shard``'s group (diagnostics every rank reports the same)."""
    import torch.distributed as dist

    t = torch.tensor(list(values), dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.SUM, group=shard.group)
    return [float(x) for x in t]


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The unsharded state dict (every rank must call it; every rank gets the full tensors)."""
    return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v) for k, v in model.state_dict().items()}
