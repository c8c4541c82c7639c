"""Runs with served agents against a real ``vllm serve`` (tests/served.py): a frozen Synthesizer on the chat
endpoint in the default world (and EvoSyn's LLM factor proposer asking it), a served Reasoner trained through its hot-loaded LoRA adapter (every attempt
recording the version that sampled it), and a server that goes away mid-run or answers with a malformed reply: the run
stops with one message, the pool stays at the last finished step, and ``--resume`` continues exactly once the server
is back; a key set for the run reaches the server and none of the run's files."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from synco.cli import main

pytestmark = [pytest.mark.xdist_group("served"), pytest.mark.slow]

TIMINGS = {"t_generate", "t_train", "t_other"}


def served_synth(url: str) -> list[str]:
    return ["mode=frozen", "synthesizer.rollout_engine=served", f"synthesizer.served.base_url={url}",
            "synthesizer.served.model=smol", "synthesizer.served.endpoint=chat", "synthesizer.served.max_retries=1",
            "synthesizer.served.backoff_s=0.05", "synthesizer.sampling.max_new_tokens=48"]


def small(tmp: Path, run_id: str) -> list[str]:
    return ["seed=0", "threads=1", "n_cards=4", "heldout_per_group=1", "heldout_samples=0", f"runs_dir={tmp}",
            f"run_id={run_id}", "progress=false", "tensorboard=false"]


def metrics(run: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(x).items() if k not in TIMINGS}
            for x in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="session")  # session: the served group interleaves modules on its worker, and a module fixture would run again
def uninterrupted(vllm_server, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: ANN001
    """The frozen served Synthesizer's 3-step run, uninterrupted: what an interrupted and resumed one must equal."""
    tmp = tmp_path_factory.mktemp("served-runs")
    assert main(["train", "steps=3", "save_every=1", *served_synth(vllm_server.base_url), *small(tmp, "whole")]) == 0
    return tmp / "whole"


def test_a_frozen_served_synthesizer_runs_the_default_world(vllm_server, tmp_path: Path) -> None:  # noqa: ANN001
    assert main(["train", "steps=2", *served_synth(vllm_server.base_url), *small(tmp_path, "frozen")]) == 0
    run = tmp_path / "frozen"
    assert len(metrics(run)) == 2
    record = json.loads((run / "checkpoints" / "step_1" / "synthesizer" / "served.json").read_text())
    assert record == {"base_url": vllm_server.base_url, "model": "smol", "endpoint": "chat"}  # who played the role
    roles = json.loads((run / "roles.json").read_text())
    assert roles["synthesizer"] == {"engine": "served", "base_url": vllm_server.base_url, "model": "smol",
                                    "endpoint": "chat"}  # no local weights: no model_path
    assert roles["reasoner"] == {"engine": "hf", "model_path": "builtin:arith/reasoner"}
    con = sqlite3.connect(run / "pool.sqlite")
    assert con.execute("SELECT DISTINCT synth_version FROM tasks").fetchall() == [(0,)]


def test_a_served_reasoner_trains_through_its_adapter_and_records_versions(vllm_server, tmp_path: Path) -> None:  # noqa: ANN001
    url = vllm_server.base_url
    code = main(["train", "--preset", "smollm2-arith", "steps=2", "k=4", "reasoner.lora.rank=8",
                 "reasoner.lora.alpha=16", "reasoner.lora.target_modules=[q_proj,v_proj]", "reasoner.grpo.lr=1e-3",
                 "reasoner.rollout_engine=served", f"reasoner.served.base_url={url}", "reasoner.served.model=smol",
                 "reasoner.served.max_retries=1", *small(tmp_path, "reasoner"), "heldout_per_group=0"])  # 4 cards x 4
    assert code == 0
    run = tmp_path / "reasoner"
    lines = metrics(run)
    con = sqlite3.connect(run / "pool.sqlite")
    got = con.execute("SELECT t.step, r.policy_version FROM rollouts r JOIN tasks t USING (task_id) "
                      "GROUP BY t.step, r.policy_version ORDER BY t.step").fetchall()
    updates, want = 0, []
    for line in lines:
        want.append((line["step"], updates))
        updates += line["reasoner_loss"] is not None
    assert got == want and updates >= 1  # step 1 sampled from the adapter step 0 trained


def test_a_server_lost_mid_run_stops_it_cleanly_and_resume_continues_exactly(
        vllm_server, uninterrupted: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:  # noqa: ANN001
    from urllib.parse import urlparse

    from served import Relay

    import synco.run.steps as steps

    relay = Relay(urlparse(vllm_server.base_url).port or 80).start()
    real = steps.cotrain_step

    def cut_at_step_2(state, step, plan):  # noqa: ANN001, ANN202
        if step == 2:
            relay.cut()  # the server goes away while step 2 samples
        return real(state, step, plan)

    monkeypatch.setattr(steps, "cotrain_step", cut_at_step_2)
    cut = ["steps=3", "save_every=1", *served_synth(relay.base_url)]
    code = main(["train", *cut, *small(tmp_path, "cut")])
    err = capsys.readouterr().err
    assert code == 4 and "Traceback" not in err and relay.base_url in err and "--resume" in err
    run = tmp_path / "cut"
    con = sqlite3.connect(run / "pool.sqlite")
    assert con.execute("SELECT MAX(step) FROM steps").fetchone() == (1,)  # the step in progress left nothing
    con.close()
    monkeypatch.setattr(steps, "cotrain_step", real)
    relay.start()  # the server is back
    assert main(["train", "--resume", str(run)]) == 0
    relay.cut()
    assert metrics(run) == metrics(uninterrupted)  # continued exactly


SECRET = "sk-synco-test-4f1c9e27b0d3-never-written"


def test_a_malformed_reply_mid_run_stops_it_cleanly_resume_continues_and_the_key_is_in_no_file(
        vllm_server, uninterrupted: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:  # noqa: ANN001
    """A chat reply whose message is null at step 2 (the relay rewrites the server's own reply): exit 4, one message
    naming the endpoint, the pool at step 1; ``--resume`` with the server sane again equals the uninterrupted run.
    The run has an API key set: the server got it on every request, and no file the run wrote holds it."""
    from urllib.parse import urlparse

    from served import Relay, only, rewrite

    import synco.run.steps as steps

    monkeypatch.setenv("SYNCO_TEST_KEY", SECRET)
    relay = Relay(urlparse(vllm_server.base_url).port or 80, http=True).start()
    real = steps.cotrain_step

    def null_message(data: dict) -> None:
        data["choices"][0]["message"] = None

    def break_at_step_2(state, step, plan):  # noqa: ANN001, ANN202
        if step == 2:
            relay.fault = only("/chat/completions", rewrite(null_message))
        return real(state, step, plan)

    monkeypatch.setattr(steps, "cotrain_step", break_at_step_2)
    args = ["steps=3", "save_every=1", *served_synth(relay.base_url), "synthesizer.served.api_key_env=SYNCO_TEST_KEY"]
    try:
        code = main(["train", *args, *small(tmp_path, "bad")])
        err = capsys.readouterr().err
        assert code == 4 and "Traceback" not in err and err.count("POST /chat/completions") == 1, err
        assert relay.base_url in err and "--resume" in err
        run = tmp_path / "bad"
        con = sqlite3.connect(run / "pool.sqlite")
        assert con.execute("SELECT MAX(step) FROM steps").fetchone() == (1,)  # the step in progress left nothing
        con.close()
        monkeypatch.setattr(steps, "cotrain_step", real)
        relay.fault = None  # the server answers sanely again
        assert main(["train", "--resume", str(run)]) == 0
    finally:
        relay.cut()
    assert metrics(run) == metrics(uninterrupted)  # continued exactly
    key = SECRET.encode()
    assert relay.heads and all(b"Bearer " + key in h for h in relay.heads)  # the server got the key every time
    written = [f for f in tmp_path.rglob("*") if f.is_file()]
    assert len(written) > 10 and not [f for f in written if key in f.read_bytes()]
    assert SECRET not in "".join(capsys.readouterr())


def test_the_evosyn_served_preset_runs_a_step_on_the_cpu(vllm_server, tmp_path: Path) -> None:  # noqa: ANN001
    """``--preset evosyn-served steps=1`` against the local server, shrunk to a CPU: τ²'s mock domain (solo, so no
    user), SmolLM2 as the served frozen Synthesizer, the shipped tiny Reasoner; every role is recorded."""
    pytest.importorskip("tau2")
    url = vllm_server.base_url
    code = main(["train", "--preset", "evosyn-served", "steps=1", "tau2.domain=mock", "tau2.user=solo",
                 f"synthesizer.served.base_url={url}", "synthesizer.served.model=smol",
                 "synthesizer.sampling.max_new_tokens=64", f"tau2.served.base_url={url}", "tau2.served.model=smol",
                 "reasoner.model_path=builtin:arith/reasoner", "reasoner.rollout_engine=hf", "reasoner.dtype=float32",
                 "reasoner.device=cpu", "reasoner.gradient_checkpointing=false", "reasoner.enable_thinking=null",
                 "reasoner.sampling.max_new_tokens=8", "n_cards=2", "k=1", "max_turns=2", "max_episode_tokens=64",
                 *small(tmp_path, "evosyn"), "n_cards=2", "heldout_per_group=0"])
    assert code == 0
    run = tmp_path / "evosyn"
    [line] = metrics(run)
    assert line["protocol"] == "rounds" and line["phase"] == "train" and line["n_cards"] == 2
    roles = json.loads((run / "roles.json").read_text())
    assert roles["synthesizer"]["engine"] == "served" and roles["tau2.user"]["base_url"] == url


def test_the_factor_proposer_asks_a_served_chat_synthesizer(vllm_server, tmp_path: Path) -> None:  # noqa: ANN001
    """EvoSyn's LLM proposer with the Synthesizer on a chat endpoint: the run's proposer hook sends its prompt to the
    server and records what came back in factors.jsonl (a proposal, or a reject quoting the model's text: either
    way the server answered, the step was never at risk)."""
    from types import SimpleNamespace

    from synco.config import load_config
    from synco.core.pool import TaskPool
    from synco.core.records import CARD_FIELDS, Attempt, TaskCard, TaskRecord, Verdict
    from synco.evosyn.run import build_evo_state
    from synco.rollout.served import ServedPolicy
    from synco.run.build import build_domain
    from synco.run.hooks import propose_factor

    cfg = load_config("smollm2", overrides=[*served_synth(vllm_server.base_url), "synth_decoding=free",
                                            "evosyn.proposer=true", "evosyn.proposer_settings.max_new_tokens=64",
                                            f"runs_dir={tmp_path}"])
    domain = build_domain(cfg)
    problems = [("What is 3 + 4?", True), ("A train leaves at 3 pm at 60 km/h; when has it gone 150 km?", False),
                ("What is 10 - 7?", True), ("Find the area of a circle of radius 2.5 cm.", False)]
    records = []
    for i, (problem, solved) in enumerate(problems):
        card = TaskCard(**{**{f: "x" for f in CARD_FIELDS}, "problem": problem})
        records.append(TaskRecord(step=0, slot=i, raw=problem, card=card, verdict=Verdict(valid=True),
                                  rollouts=[Attempt(text="t", correct=solved) for _ in range(2)]))
    with TaskPool(tmp_path / "pool.sqlite") as pool:
        pool.record_step(0, records)
        state = SimpleNamespace(synthesizer=ServedPolicy(cfg.synthesizer, "synthesizer"), pool=pool, domain=domain,
                                evo=build_evo_state(domain))
        propose_factor(SimpleNamespace(cfg=cfg, state=state, dir=tmp_path), 0)  # type: ignore[arg-type]
    [line] = [json.loads(x) for x in (tmp_path / "factors.jsonl").read_text().splitlines()]
    assert line["action"] in ("propose", "reject") and line["step"] == 0
    assert "generation failed" not in line.get("note", ""), line  # the served model answered
