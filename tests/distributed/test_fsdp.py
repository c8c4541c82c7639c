"""FSDP2 across two CPU processes (gloo) gives the same GRPO updates as one process."""

from __future__ import annotations

import errno
import socket
from pathlib import Path

import pytest
import torch
from ranks import rank_group, spawn_ranks

from synco.learn.fsdp import DataShard, join_rendezvous, open_rendezvous, rank_micro_batches


def test_micro_batches_are_contiguous_shares_with_equal_counts() -> None:
    active = [0, 2, 3, 5, 7]
    assert rank_micro_batches(active, 2, 0, 2) == [[0, 2], []]  # padded to rank 1's two micro-batches
    assert rank_micro_batches(active, 2, 1, 2) == [[3, 5], [7]]
    assert rank_micro_batches(active, 4, 0, 1) == [[0, 2, 3, 5], [7]]
    # a rank with a smaller share gets padding (empty micro-batches) to match the largest
    assert rank_micro_batches([1, 2, 3], 1, 0, 2) == [[1], []]
    assert rank_micro_batches([1, 2, 3], 1, 1, 2) == [[2], [3]]
    assert rank_micro_batches([], 4, 1, 2) == []
    shares = [sum(rank_micro_batches(list(range(11)), 3, r, 3), []) for r in range(3)]
    assert sum(shares, []) == list(range(11))
    with pytest.raises(ValueError, match="rank 2 of world 2"):
        DataShard(2, 2)


def test_rank_0_holds_the_rendezvous_port_from_the_moment_it_is_picked() -> None:
    store = open_rendezvous("127.0.0.1", 2, timeout_s=60)
    port = int(store.port)
    assert 0 < port < 65536
    with socket.socket() as other, pytest.raises(OSError) as taken:  # no other process can take it meanwhile
        other.bind(("127.0.0.1", port))
    assert taken.value.errno == errno.EADDRINUSE
    client = join_rendezvous("127.0.0.1", port, 2, timeout_s=60)
    store.set("from rank 0", "hello")
    client.set("from rank 1", "hi")
    assert client.get("from rank 0") == b"hello" and store.get("from rank 1") == b"hi"


def _policy(dtype: str = "float32", decoupled: bool = False):
    """A tiny Llama policy; ``bfloat16`` keeps the weights in bf16 and trains through fp32 masters."""
    from synco.core.policy import GRPOConfig
    from synco.learn.hf_policy import HFPolicy
    from synco.core.policy import PolicyConfig
    from synco.learn.charlm import char_tokenizer, tiny_llama

    tok = char_tokenizer()
    model = tiny_llama(tok, seed=0, hidden_size=32, num_layers=2).to(getattr(torch, dtype))
    cfg = PolicyConfig(model_path="tiny", device="cpu", dtype=dtype,
                       grpo=GRPOConfig(lr=1e-2, micro_batch_size=2, max_grad_norm=0.5, decoupled=decoupled))
    return HFPolicy(model, tok, cfg)


def _batches(pol, behaviour: bool = False):
    """Two GRPO batches; ``behaviour``: with made-up sampling log-probs (-6 and -3 in turn), for the decoupled loss."""
    from synco.core.sampling import Experience

    def row(prompt: str, completion: str, adv: float) -> Experience:
        ids = list(pol.tokenizer(completion, add_special_tokens=False)["input_ids"]) + [2]
        old = [(-6.0, -3.0)[t % 2] for t in range(len(ids))] if behaviour else None
        return Experience(prompt_ids=pol.encode_prompt(prompt), completion_ids=ids, advantage=adv, old_logprobs=old)

    first = [row("12+7=", "19", 1.0), row("12+7=", "21", -1.0), row("x", "zero", 0.0), row("30-4=", "26", 0.5),
             row("30-4=", "a longer one", -0.5)]  # 4 active rows over 2 ranks x micro-batches of 2, one skipped
    second = [row("8*3=", "24", 0.8), row("8*3=", "25", -0.3), row("9+9=", "18", 0.6)]  # 3 rows: one rank pads
    return first, second


def _worker(rank: int, world: int, init_method: str, out: str, dtype: str = "float32", decoupled: bool = False) -> None:
    from synco.learn.fsdp import full_state_dict, full_tensors, shard_policy

    with rank_group(rank, world, init_method):
        torch.set_num_threads(1)
        pol = shard_policy(_policy(dtype, decoupled))
        stats = [pol.update(b) for b in _batches(pol, decoupled)]
        state = full_state_dict(pol.model)
        masters = full_tensors(pol.masters.state_dict())
        if rank == 0:
            torch.save({"state": state, "masters": masters,
                        "stats": [(s.loss, s.grad_norm, s.clip_frac, s.stepped) for s in stats],
                        "weights": [_weights(s) for s in stats]}, out)


def _weights(s) -> tuple:
    return (s.is_weight_mean, s.is_weight_std, s.is_weight_max, s.is_truncated_frac)


def test_two_processes_give_the_same_update_as_one(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    one = _policy()
    stats = [one.update(b) for b in _batches(one)]
    out = tmp_path / "sharded.pt"
    spawn_ranks(_worker, str(out), world=2, folder=tmp_path)
    got = torch.load(out, weights_only=False)
    for (loss, norm, clip, stepped), s in zip(got["stats"], stats, strict=True):
        assert stepped and s.stepped
        assert loss == pytest.approx(s.loss, rel=1e-5, abs=1e-7)
        assert norm == pytest.approx(s.grad_norm, rel=1e-5)
        assert clip == pytest.approx(s.clip_frac, abs=1e-6)
    ref = one.model.state_dict()
    for name, value in got["state"].items():
        assert torch.allclose(value, ref[name], atol=1e-6), name
    init = _policy().model.state_dict()
    moved = sum(int(not torch.equal(init[n], ref[n])) for n in ref)
    assert moved == len(ref)  # the updates moved every tensor (so equality is not trivial)


def test_bf16_with_fp32_masters_sharded_equals_one_process(tmp_path: Path) -> None:
    """The paper presets' path: bf16 weights, fp32 masters and AdamW state, sharded with FSDP2 over two ranks."""
    torch.set_num_threads(1)
    one = _policy("bfloat16")
    assert one.masters and next(one.model.parameters()).dtype == torch.bfloat16
    stats = [one.update(b) for b in _batches(one)]
    out = tmp_path / "sharded.pt"
    spawn_ranks(_worker, str(out), "bfloat16", world=2, folder=tmp_path)
    got = torch.load(out, weights_only=False)
    for (loss, norm, _, stepped), s in zip(got["stats"], stats, strict=True):
        assert stepped and s.stepped
        assert loss == pytest.approx(s.loss, rel=1e-3, abs=1e-5)
        assert norm == pytest.approx(s.grad_norm, rel=1e-3)
    masters = one.masters.state_dict()
    assert len(got["masters"]) == len(masters) > 0
    init_masters = _policy("bfloat16").masters.state_dict()
    for ours, theirs, start in zip(got["masters"], masters, init_masters, strict=True):
        assert ours.dtype == torch.float32
        d_ours, d_theirs = (ours - start).flatten(), (theirs - start).flatten()
        # bf16 gradients are summed in another order across ranks, so the masters agree to bf16 rounding of the
        # gradient, not to fp32: every tensor's update points the same way (measured cosine >= 0.9998)
        assert float(torch.nn.functional.cosine_similarity(d_ours, d_theirs, dim=0)) > 0.999
        assert float((ours - theirs).abs().max()) < 5e-3 < float(d_theirs.abs().max())
    ref = one.model.state_dict()
    for name, value in got["state"].items():
        assert value.dtype == torch.bfloat16
        assert torch.allclose(value.float(), ref[name].float(), atol=1e-2), name
    init = _policy("bfloat16").model.state_dict()
    assert all(not torch.equal(init[n], ref[n]) for n in ref)


def test_decoupled_sharded_equals_one_process(tmp_path: Path) -> None:
    """The off-policy correction's importance-weight numbers (sums and the max) are reduced over the ranks."""
    torch.set_num_threads(1)
    one = _policy(decoupled=True)
    stats = [one.update(b) for b in _batches(one, behaviour=True)]
    out = tmp_path / "sharded.pt"
    spawn_ranks(_worker, str(out), "float32", True, world=2, folder=tmp_path)
    got = torch.load(out, weights_only=False)
    for (loss, norm, _, stepped), weights, s in zip(got["stats"], got["weights"], stats, strict=True):
        assert stepped and s.stepped and s.is_truncated_frac is not None and 0 < s.is_truncated_frac < 1
        assert loss == pytest.approx(s.loss, rel=1e-5, abs=1e-7) and norm == pytest.approx(s.grad_norm, rel=1e-5)
        assert weights == pytest.approx(_weights(s), rel=1e-5)
    ref = one.model.state_dict()
    for name, value in got["state"].items():
        assert torch.allclose(value, ref[name], atol=1e-6), name
