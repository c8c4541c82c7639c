"""LoRA runs through the trainer: adapter-only checkpoints, resume, and shared-base mode in a real co-training step."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from synco.cotrain import engine
from synco.rollout import attempts
from synco.config import load_config
from synco.learn.hf_policy import HFPolicy
from synco.learn.shared_base import AdapterPolicy
from synco.run.build import build_policies
from synco.run.checkpoints import save_checkpoint
from synco.run.setup import setup_run

pytestmark = pytest.mark.slow

TINY = ["n_cards=8", "k=4", "heldout_per_group=0", "progress=false", "tensorboard=false",
        "synthesizer.sampling.max_new_tokens=320", "synthesizer.grpo.lr=1e-2", "reasoner.grpo.lr=1e-2"]
LORA = ["synthesizer.lora={rank: 4, alpha: 8}", "reasoner.lora={rank: 4, alpha: 8}"]
# one base for both agents: the Synthesizer's warm start (it writes valid cards from step 0)
SHARED = ["shared_base=true", "reasoner.model_path=builtin:arith/synthesizer", *LORA]


def cfg(tmp_path: Path, run_id: str, *extra: str):  # noqa: ANN201
    return load_config("arith", overrides=[*TINY, f"runs_dir={tmp_path}", f"run_id={run_id}", *extra])


def adapter(pol: HFPolicy) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in pol.trainable_parameters()}


def base_of(pol: HFPolicy) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in pol.model.named_parameters() if "lora_" not in n}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)


def optimizer_tensors(pol: HFPolicy) -> list[torch.Tensor]:
    assert pol.optimizer is not None
    sd = pol.optimizer.state_dict()["state"]
    return [v for k in sorted(sd) for v in sd[k].values() if isinstance(v, torch.Tensor)]


def check_adapter_checkpoint(ckpt: Path) -> None:
    for role in ("synthesizer", "reasoner"):
        d = ckpt / role
        assert (d / "adapter_config.json").is_file() and (d / "adapter_model.safetensors").is_file()
        assert not (d / "config.json").exists() and not (d / "model.safetensors").exists()


def check_resumed(a: HFPolicy, b: HFPolicy) -> None:
    assert same(adapter(a), adapter(b))
    assert b.step == a.step
    oa, ob = optimizer_tensors(a), optimizer_tensors(b)
    assert len(oa) == len(ob) and all(torch.equal(x, y) for x, y in zip(oa, ob, strict=True))


def test_separate_lora_checkpoints_hold_adapters_and_resume(tmp_path: Path) -> None:
    run = setup_run(cfg(tmp_path, "lora", *LORA))
    st = run.state
    assert st.synthesizer.model is not st.reasoner.model
    for pol in (st.synthesizer, st.reasoner):
        assert isinstance(pol, HFPolicy) and pol.is_peft
        assert pol.trainable_parameters() and all("lora_" in n for n, _ in pol.trainable_parameters())
    engine.cotrain_step(st, 0)
    assert st.synthesizer.step == 1  # the warm-started Synthesizer's cards differ in reward
    ckpt = save_checkpoint(run, 0)
    check_adapter_checkpoint(ckpt)
    st.pool.close()

    again = setup_run(run.cfg, resume=run.dir)
    assert again.start_step == 1
    for role in ("synthesizer", "reasoner"):
        a, b = getattr(st, role), getattr(again.state, role)
        assert b.is_peft and not isinstance(b, AdapterPolicy)
        check_resumed(a, b)
    again.state.pool.close()


def test_shared_base_cotrain_steps_checkpoint_and_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both adapters move in engine steps, the base does not; the checkpoint holds both adapters and resumes exactly.

    The Reasoner's attempts are graded alternately right and wrong.

    (The shared base is the Synthesizer's warm start, which cannot solve tasks: without this every
    attempt group has equal reward and the Reasoner takes no step.)
    """
    real_rollout, count = attempts.answer_attempt, itertools.count()

    def rollout(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        ok = next(count) % 2 == 0
        return real_rollout(*args, **kwargs).model_copy(update={"correct": ok, "reward": 1.0 if ok else 0.0})

    monkeypatch.setattr(attempts, "answer_attempt", rollout)
    run = setup_run(cfg(tmp_path, "both", *SHARED))
    st = run.state
    s, r = st.synthesizer, st.reasoner
    assert isinstance(s, AdapterPolicy) and isinstance(r, AdapterPolicy)
    assert s.model is r.model and s.shared is r.shared
    base0, s0, r0 = base_of(s), adapter(s), adapter(r)
    for step in range(2):
        assert engine.cotrain_step(st, step).n_valid > 0
    assert s.step == 2 and r.step == 2
    assert not same(adapter(s), s0) and not same(adapter(r), r0)
    changed_s = {n for n, p in adapter(s).items() if not torch.equal(p, s0[n])}
    changed_r = {n for n, p in adapter(r).items() if not torch.equal(p, r0[n])}
    assert changed_s == set(s0) and changed_r == set(r0)  # every adapter tensor moved, for both agents
    assert same(base_of(s), base0)  # the shared base never moves
    ckpt = save_checkpoint(run, 1)
    check_adapter_checkpoint(ckpt)
    st.pool.close()

    again = setup_run(run.cfg, resume=run.dir)
    assert again.start_step == 2
    s2, r2 = again.state.synthesizer, again.state.reasoner
    assert isinstance(s2, AdapterPolicy) and isinstance(r2, AdapterPolicy)
    assert s2.model is r2.model and s2.shared is r2.shared
    check_resumed(s, s2)
    check_resumed(r, r2)
    assert same(base_of(s2), base0)
    again.state.pool.close()


def test_frozen_mode_keeps_the_synthesizer_adapter(tmp_path: Path) -> None:
    run = setup_run(cfg(tmp_path, "frozen", *SHARED, "mode=frozen"))
    st = run.state
    s0, base0 = adapter(st.synthesizer), base_of(st.synthesizer)
    engine.cotrain_step(st, 0)
    assert st.synthesizer.step == 0
    assert same(adapter(st.synthesizer), s0) and same(base_of(st.synthesizer), base0)
    st.pool.close()


def test_build_policies_without_shared_base_gives_two_models(tmp_path: Path) -> None:
    s, r = build_policies(cfg(tmp_path, "plain"))
    assert type(s) is HFPolicy and type(r) is HFPolicy and s.model is not r.model
