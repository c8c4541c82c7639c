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
(:func:`full_state_dict`; :func:`save_full`, :func:`save_full_state` and :func:`load_full_state` write and
read the same files as one process does). :meth:`HFPolicy.sft_update <synco.learn.hf_policy.HFPolicy.sft_update>`
shares its rows over the ranks the same way (tested: two processes == one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
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
    """Shard an :class:`~synco.learn.hf_policy.HFPolicy`'s model over the group and rebuild its optimizer on the shards.

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


def open_rendezvous(host: str, world: int, timeout_s: float = 1800.0) -> Any:
    """Rank 0: the group's TCP store, listening on a port the OS picks (``store.port``) from now on.

    The port is held from the moment it is chosen, so no other process can take it before the other ranks
    connect (probing a free port, closing it and binding it again later leaves that window open). ``host``
    is the address rank 0 reaches its own store at. Keep the store: the process group uses it.
    """
    from datetime import timedelta

    import torch.distributed as dist

    return dist.TCPStore(host, 0, world, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=timeout_s))


def join_rendezvous(address: str, port: int, world: int, timeout_s: float = 1800.0) -> Any:
    """Ranks 1..world-1: a client of rank 0's store (:func:`open_rendezvous`) at ``address:port``."""
    from datetime import timedelta

    import torch.distributed as dist

    return dist.TCPStore(address, port, world, is_master=False, timeout=timedelta(seconds=timeout_s))


def all_reduce_sum(values: Sequence[float], shard: DataShard) -> list[float]:
    """Sum each number over the ranks of ``shard``'s group (diagnostics every rank reports the same)."""
    import torch.distributed as dist

    t = torch.tensor(list(values), dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.SUM, group=shard.group)
    return [float(x) for x in t]


def all_reduce_max(values: Sequence[float], shard: DataShard) -> list[float]:
    """The largest of each number over the ranks of ``shard``'s group (a diagnostic's maximum)."""
    import torch.distributed as dist

    t = torch.tensor(list(values), dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=shard.group)
    return [float(x) for x in t]


def full_state_dict(model: torch.nn.Module, cpu: bool = False) -> dict[str, torch.Tensor]:
    """The unsharded state dict (every rank must call it; every rank gets the full tensors).

    ``cpu``: each full tensor is moved to the CPU as soon as it is gathered, so a GPU holds at most one
    gathered tensor at a time. Tied weights (one parameter under two names, e.g. the embeddings and the head)
    are gathered once and stay one tensor, so ``save_pretrained`` sees the tie as in one process.
    """
    gathered: dict[int, torch.Tensor] = {}
    out: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for name, value in model.state_dict(keep_vars=True).items():
            if id(value) not in gathered:
                gathered[id(value)] = full_tensors(value.detach(), cpu)
            out[name] = gathered[id(value)]
    return out


def full_tensors(obj: Any, cpu: bool = False) -> Any:
    """``obj`` (nested dicts, lists, tuples) with every DTensor replaced by its full tensor, on the CPU when
    ``cpu``; anything else is kept. A collective: every rank walks the same structure in the same order."""
    if isinstance(obj, dict):
        return {k: full_tensors(v, cpu) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(full_tensors(v, cpu) for v in obj)
    if isinstance(obj, torch.Tensor):
        full = obj.full_tensor() if hasattr(obj, "full_tensor") else obj
        return full.cpu() if cpu else full
    return obj


def shard_like(full: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``full`` laid out as ``like``: this rank's shard when ``like`` is a DTensor (no communication: every rank
    holds the full tensor), else ``full`` itself. Shapes must agree."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    if tuple(full.shape) != tuple(like.shape):
        raise ValueError(f"a saved tensor of shape {tuple(full.shape)} for a parameter of shape {tuple(like.shape)}")
    if not isinstance(like, DTensor):
        return full
    full = full.to(device=like.device, dtype=like.dtype)
    return distribute_tensor(full, like.device_mesh, like.placements, src_data_rank=None)


def reshard_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """After ``optimizer.load_state_dict`` of a full (unsharded) state: each per-parameter tensor with the
    parameter's shape becomes this rank's shard of it, like the parameter (scalars such as Adam's step stay)."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            state = optimizer.state.get(p, {})
            for key, value in state.items():
                if isinstance(value, torch.Tensor) and value.dim() > 0 and tuple(value.shape) == tuple(p.shape):
                    state[key] = shard_like(value, p)


# ----------------------------------------------------------------------------- checkpoints of a sharded policy
#
# The files are the ones HFPolicy.save / save_state write for one process (full tensors, same names, same
# learner_state.pt layout), so a checkpoint does not depend on how many ranks wrote it: one process can resume
# a sharded run and the other way round. Every rank calls these (they gather); rank 0 writes.


def save_full(policy: Any, path: str | Path) -> None:
    """As :meth:`HFPolicy.save <synco.learn.hf_policy.HFPolicy.save>` for a sharded policy: the gathered weights,
    written by rank 0 in HF format (``save_pretrained``) with the tokenizer."""
    state = full_state_dict(policy.model, cpu=True)
    if _rank(policy) == 0:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        policy.model.save_pretrained(path, state_dict=state)
        policy.tokenizer.save_pretrained(path)


def save_full_state(policy: Any, path: str | Path) -> None:
    """As :meth:`HFPolicy.save_state <synco.learn.hf_policy.HFPolicy.save_state>` for a sharded policy: optimizer
    state and fp32 masters gathered to full tensors, written by rank 0 to ``path/learner_state.pt``."""
    from synco.core.policy import STATE_FILE

    opt, sched = policy._require_trainable()
    state = {"optimizer": full_tensors(opt.state_dict()), "scheduler": sched.state_dict(), "step": policy.step,
             "masters": full_tensors(policy.masters.state_dict()),
             "loss_scaler": None if getattr(policy, "scaler", None) is None else policy.scaler.state_dict()}
    if _rank(policy) == 0:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        torch.save(state, path / STATE_FILE)


def load_full_state(policy: Any, path: str | Path) -> None:
    """As :meth:`HFPolicy.load_state <synco.learn.hf_policy.HFPolicy.load_state>` for a sharded policy (every rank
    reads the full file and keeps its shards); the model's weights must already be the saved ones."""
    from synco.core.policy import STATE_FILE

    opt, sched = policy._require_trainable()
    file = Path(path) / STATE_FILE
    state = torch.load(file, map_location=policy.device, weights_only=True)
    opt.load_state_dict(state["optimizer"])
    reshard_optimizer_state(opt)
    sched.load_state_dict(state["scheduler"])
    policy.step = int(state["step"])
    policy.publish()  # its sampler samples the restored version
    if getattr(policy, "scaler", None) is not None and state.get("loss_scaler"):
        policy.scaler.load_state_dict(state["loss_scaler"])
    if policy.masters:
        masters = state.get("masters") or []
        if not masters:
            raise ValueError(f"{file} has no fp32 master weights but this policy trains {policy.config.dtype} "
                             "parameters through them (saved with another dtype, or by an older synco)")
        if len(masters) == len(policy.masters.pairs):
            masters = [shard_like(t, m) for t, (_, m) in zip(masters, policy.masters.pairs, strict=True)]
        policy.masters.load_state_dict(masters)  # checks the count


def _rank(policy: Any) -> int:
    return 0 if policy.shard is None else int(policy.shard.rank)
