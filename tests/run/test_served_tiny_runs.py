"""The default world trained with a served Reasoner against a real ``vllm serve`` of its own tiny model
(tests/served.py ``TINY``: ``builtin:arith/reasoner``, a 0.65M-parameter Llama with a character-level tokenizer):
every step samples through the LoRA adapter the previous step trained, hot-loaded into the server, and each attempt
records that version; a server lost mid-run and ``--resume`` continue exactly, the resumed run putting the
checkpoint's adapter back up. Its own xdist group: this server starts beside SmolLM2's, on the other worker."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from urllib.parse import urlparse

import pytest

from synco.cli import main
from synco.core.served import ServedClient, ServedSettings

pytestmark = [pytest.mark.xdist_group("served-tiny"), pytest.mark.slow]

TIMINGS = {"t_generate", "t_train", "t_other"}


def served_reasoner(url: str) -> list[str]:
    return ["k=8", "reasoner.lora.rank=8", "reasoner.lora.alpha=16", "reasoner.lora.target_modules=[q_proj,v_proj]",
            "reasoner.grpo.lr=1e-3", "reasoner.rollout_engine=served", f"reasoner.served.base_url={url}",
            "reasoner.served.model=tiny", "reasoner.served.max_retries=1", "reasoner.served.backoff_s=0.05"]


def small(tmp: Path, run_id: str) -> list[str]:
    return ["seed=0", "threads=1", "n_cards=6", "heldout_per_group=0", "heldout_samples=0", f"runs_dir={tmp}",
            f"run_id={run_id}", "progress=false", "tensorboard=false"]


def metrics(run: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(x).items() if k not in TIMINGS}
            for x in (run / "metrics.jsonl").read_text().splitlines()]


def attempts(run: Path) -> list[tuple]:
    """Every attempt as (step, task, sampling policy version, completion, its token ids, reward), in order."""
    con = sqlite3.connect(run / "pool.sqlite")
    try:
        return con.execute("SELECT t.step, t.raw, r.policy_version, r.text, r.token_ids, r.reward FROM rollouts r "
                           "JOIN tasks t USING (task_id) ORDER BY t.step, t.slot, r.idx").fetchall()
    finally:
        con.close()


def served_models(url: str) -> set[str]:
    return set(ServedClient(ServedSettings(base_url=url, model="tiny", max_retries=1)).models())


def test_a_served_tiny_reasoner_trains_in_the_default_world_version_by_version(vllm_tiny_server,
                                                                                tmp_path: Path) -> None:  # noqa: ANN001
    url = vllm_tiny_server.base_url
    before = served_models(url)
    assert main(["train", "steps=3", *served_reasoner(url), *small(tmp_path, "tiny")]) == 0
    run = tmp_path / "tiny"
    roles = json.loads((run / "roles.json").read_text())
    assert roles["reasoner"] == {"engine": "served", "model_path": "builtin:arith/reasoner", "base_url": url,
                                 "model": "tiny", "endpoint": "completions"}  # the server's base is the learner's
    assert roles["synthesizer"] == {"engine": "hf", "model_path": "builtin:arith/synthesizer"}
    got = sorted({(step, version) for step, _, version, *_ in attempts(run)})
    updates, want = 0, []
    for line in metrics(run):
        want.append((line["step"], updates))
        updates += line["reasoner_loss"] is not None
    assert got == want and updates >= 2, got  # step s sampled from the adapter the s updates before it trained
    assert [v for _, v in got][:2] == [0, 1]
    assert served_models(url) == before  # the run unloaded its last adapter when it closed


def test_asynchronously_the_server_samples_the_next_step_on_the_adapter_published_before(
        vllm_tiny_server, tmp_path: Path) -> None:  # noqa: ANN001
    """max_staleness=1: while the learner trains on step s, the server samples step s + 1 on the adapter pushed
    after step s - 1 (no push mid-update), so every step's attempts are one version behind the update."""
    url = vllm_tiny_server.base_url
    assert main(["train", "steps=3", "max_staleness=1", *served_reasoner(url), *small(tmp_path, "async")]) == 0
    run = tmp_path / "async"
    got = sorted({(step, version) for step, _, version, *_ in attempts(run)})
    lines, updates, want = metrics(run), 0, []
    for line in lines:
        want.append((line["step"], max(0, updates - 1) if line["step"] else 0))
        updates += line["reasoner_loss"] is not None
    assert got == want and updates >= 2, got
    assert [m["staleness"] for m in lines] == [0.0, 1.0, 1.0]
    assert all(m["reasoner_is_weight_mean"] is not None for m in lines if m["reasoner_loss"] is not None)


def test_a_served_trained_reasoner_resumes_exactly_after_the_server_is_lost(
        vllm_tiny_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:  # noqa: ANN001
    from served import Relay

    import synco.run.steps as steps

    url = vllm_tiny_server.base_url
    assert main(["train", "steps=3", "save_every=1", *served_reasoner(url), *small(tmp_path, "whole")]) == 0

    relay = Relay(urlparse(url).port or 80).start()
    real = steps.cotrain_step

    def cut_at_step_2(state, step, plan):  # noqa: ANN001, ANN202
        if step == 2:
            relay.cut()  # the server goes away before step 2 puts up the adapter step 1 trained
        return real(state, step, plan)

    monkeypatch.setattr(steps, "cotrain_step", cut_at_step_2)
    code = main(["train", "steps=3", "save_every=1", *served_reasoner(relay.base_url), *small(tmp_path, "cut")])
    err = capsys.readouterr().err
    assert code == 4 and "Traceback" not in err and relay.base_url in err and "--resume" in err
    run = tmp_path / "cut"
    assert {s for s, *_ in attempts(run)} == {0, 1}  # the step in progress left nothing
    monkeypatch.setattr(steps, "cotrain_step", real)
    relay.start()  # the server is back
    try:
        assert main(["train", "--resume", str(run)]) == 0
    finally:
        relay.cut()
    assert metrics(run) == metrics(tmp_path / "whole")  # continued exactly: the same losses and rewards
    resumed, whole = attempts(run), attempts(tmp_path / "whole")
    assert resumed == whole  # the same attempts, each sampled by the same adapter version
    assert {v for s, _, v, *_ in resumed if s == 2} == {2}  # the checkpoint's adapter went back up as version 2
