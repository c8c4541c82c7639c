"""A sharded learner (two CPU processes, gloo) resumes from a one-process checkpoint, takes an SFT and a GRPO
step equal to one process's, and writes the same checkpoint files one process writes.

Float tolerance: FSDP sums the two ranks' gradients in a reduce-scatter, one process accumulates micro-batches in
another order, so results agree to rounding (~1e-7), not bit for bit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from ranks import rank_group, spawn_ranks
from safetensors.torch import load_file

from synco.core.policy import STATE_FILE


def _policy(folder: str | None = None):  # noqa: ANN202
    """The tiny learner, fresh or (``folder``) loaded from a saved checkpoint, as a resume builds it."""
    from transformers import AutoModelForCausalLM

    from synco.core.policy import GRPOConfig
    from synco.learn.hf_policy import HFPolicy
    from synco.core.policy import PolicyConfig
    from synco.learn.charlm import char_tokenizer, tiny_llama

    tok = char_tokenizer()
    model = AutoModelForCausalLM.from_pretrained(folder) if folder else tiny_llama(tok, seed=0, hidden_size=32, num_layers=2)
    cfg = PolicyConfig(model_path="tiny", device="cpu",
                       grpo=GRPOConfig(lr=1e-2, micro_batch_size=2, max_grad_norm=0.5, warmup_steps=4))
    return HFPolicy(model, tok, cfg)


def _grpo_batch(pol, first: bool):  # noqa: ANN001, ANN202
    from synco.core.sampling import Experience

    def row(prompt: str, completion: str, adv: float) -> Experience:
        ids = list(pol.tokenizer(completion, add_special_tokens=False)["input_ids"]) + [2]
        return Experience(prompt_ids=pol.encode_prompt(prompt), completion_ids=ids, advantage=adv)

    if first:
        return [row("12+7=", "19", 1.0), row("12+7=", "21", -1.0), row("30-4=", "26", 0.5), row("30-4=", "2", -0.5)]
    return [row("8*3=", "24", 0.8), row("8*3=", "25", -0.3), row("9+9=", "18", 0.6)]  # 3 rows: one rank pads


def _sft_batch(pol):  # noqa: ANN001, ANN202
    from synco.core.sampling import SFTExample

    # 3 rows, micro-batches of 2: rank 0 gets row 0, rank 1 rows 1-2 (uneven shares, one micro-batch each);
    # row 1 carries sampled ids (as a rounds attempt does), trained as they are on every rank
    sampled = (*pol.tokenizer("39", add_special_tokens=False)["input_ids"], pol.eos_ids[0])
    return [SFTExample(pol.format_prompt("7+5="), "12"), SFTExample(pol.format_prompt("40-1="), "39", sampled),
            SFTExample(pol.format_prompt("6*6="), "a long completion 36")]


def close_to_scale(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal to rounding relative to the tensor's scale: Adam's moments hold gradient sums that nearly cancel,
    so an element ~1e-4 of the largest can differ in its third digit between summation orders."""
    return a.shape == b.shape and torch.allclose(a, b, rtol=1e-4, atol=1e-5 * float(a.abs().max()))


def _stats(s) -> tuple:  # noqa: ANN001
    return (s.loss, s.grad_norm, s.n_tokens, s.stepped)


def _worker(rank: int, world: int, init_method: str, start: str, out: str) -> None:
    from synco.learn.fsdp import load_full_state, save_full, save_full_state, shard_policy

    with rank_group(rank, world, init_method):
        torch.set_num_threads(1)
        pol = shard_policy(_policy(start))
        load_full_state(pol, start)
        stats = [pol.sft_update(_sft_batch(pol)), pol.update(_grpo_batch(pol, first=False))]
        save_full(pol, Path(out) / "model")
        save_full_state(pol, Path(out) / "model")
        if rank == 0:
            torch.save([_stats(s) for s in stats], Path(out) / "stats.pt")


def test_sharded_resume_sft_and_grpo_steps_and_checkpoint_equal_one_process(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    one = _policy()
    one.update(_grpo_batch(one, first=True))
    start = tmp_path / "start"
    one.save(start)
    one.save_state(start)  # one optimizer step in: Adam moments and step 1, warmup advanced
    stats = [one.sft_update(_sft_batch(one)), one.update(_grpo_batch(one, first=False))]
    one.save(tmp_path / "one")
    one.save_state(tmp_path / "one")

    spawn_ranks(_worker, str(start), str(tmp_path / "two"), world=2, folder=tmp_path)
    got = torch.load(tmp_path / "two" / "stats.pt", weights_only=False)
    for (loss, norm, n_tok, stepped), s in zip(got, stats, strict=True):
        assert stepped and s.stepped and n_tok == s.n_tokens
        assert loss == pytest.approx(s.loss, rel=1e-5, abs=1e-7)
        assert norm == pytest.approx(s.grad_norm, rel=1e-5)

    a, b = tmp_path / "one", tmp_path / "two" / "model"
    assert json.loads((a / "config.json").read_text()) == json.loads((b / "config.json").read_text())
    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert wa.keys() == wb.keys()
    for name in wa:
        assert torch.allclose(wa[name], wb[name], atol=1e-6), name
    init = load_file(start / "model.safetensors")
    assert all(not torch.equal(init[n], wa[n]) for n in wa)  # both steps moved every tensor

    sa, sb = (torch.load(d / STATE_FILE, weights_only=True) for d in (a, b))
    assert sa["step"] == sb["step"] == 3  # 1 loaded + sft + grpo: the loaded state counts (a no-op load gives 2)
    assert sa["scheduler"] == sb["scheduler"] and sa["masters"] == sb["masters"] == []
    assert sa["optimizer"]["param_groups"] == sb["optimizer"]["param_groups"]
    assert sa["optimizer"]["state"].keys() == sb["optimizer"]["state"].keys()
    for i, st in sa["optimizer"]["state"].items():
        assert st.keys() == sb["optimizer"]["state"][i].keys()
        for key, value in st.items():
            other = sb["optimizer"]["state"][i][key]
            assert type(other) is torch.Tensor and other.shape == value.shape  # full tensors, not shards
            assert close_to_scale(value, other), (i, key)
