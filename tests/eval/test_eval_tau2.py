"""synco.eval.tau2: ``synco eval --tau2`` -- the gold agent through the whole pipeline, a tiny model's recorded
episodes, resuming, refusals, and the per-task / summary arithmetic."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from synco.core.episodes import Turn
from synco.eval.evaluation import configure_eval
from synco.eval.tau2 import (RESULTS_FILE, SUMMARY_FILE, TASKS_FILE, TRIALS_FILE, GoldPolicy, ScriptedUser, Tau2Trial,
                             add_tau2_arguments, gold_reasons, read_trials, run_tau2_eval, summarize,
                             task_result)

pytest.importorskip("tau2")

from synco.domains.tau2.gold import gold_turns  # noqa: E402
from synco.domains.tau2.world import load_world  # noqa: E402  (after the skip: needs τ²)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    configure_eval(p)
    add_tau2_arguments(p)
    return p


def run(argv: list[str]) -> int:
    return run_tau2_eval(parser().parse_args([*argv, "--no-progress"]))


def summary(out: Path) -> dict:
    return json.loads((out / SUMMARY_FILE).read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- the gold agent


def test_gold_scores_one_on_airline_test_tasks_through_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "air"
    assert run(["--tau2", "airline", "--model", "gold", "--out", str(out), "--limit", "3"]) == 0
    s = summary(out)
    assert (s["split"], s["user"], s["solo"], s["n"], s["scored"], s["apart"]) == ("test", "scripted", False, 3, 3, {})
    assert s["metrics"]["pass_hat_k"]["1"]["value"] == 1.0 and s["not_perfect"] == []
    assert s["terminations"] == {"agent_stop": 3}
    trials = read_trials(out / TRIALS_FILE)
    test_ids = [t.id for t in load_world("airline").tasks("test")[:3]]
    assert [t.task_id for t in trials] == test_ids
    for t in trials:
        assert t.parts == {"DB": 1.0, "COMMUNICATE": 1.0, "stop": 1.0} and t.success
        calls = [u for u in t.turns if u.role == "agent" and u.tool_call is not None]
        assert t.tool_calls == len(calls) and t.errors == 0
        assert len(t.mask) == len(t.completion_ids) and 0 in t.mask or t.tool_calls == 0
        assert t.messages[0]["content"] == "Hi! How can I help you today?"  # τ²'s transcript, greeting first
    assert "pass^1: 1.000" in capsys.readouterr().out
    # the same trials in τ²'s own results format, read back by τ²'s own loader
    from tau2.data_model.simulation import Results

    res = Results.load(out / RESULTS_FILE)
    assert [r.task_id for r in res.simulations] == test_ids and [t.id for t in res.tasks] == test_ids
    assert all(r.reward_info is not None and r.reward_info.reward == 1.0 for r in res.simulations)
    assert {r.termination_reason.value for r in res.simulations} == {"agent_stop"}
    assert res.info.agent_info.llm == "gold" and res.info.environment_info.domain_name == "airline"
    assert [len(r.messages) for r in res.simulations] == [len(t.messages) for t in trials]


@pytest.mark.parametrize("mode,apart", [
    ("solo", {"update_task_with_message_history": ["no_ticket"],
              "update_task_with_history_and_env_assertions": ["no_ticket"]}),
    ("simulated", {"update_task_with_history_and_env_assertions": ["gold_misses_ENV_ASSERTION"]}),
])
def test_gold_scores_one_on_every_satisfiable_mock_task(tmp_path: Path, mode: str, apart: dict) -> None:
    out = tmp_path / mode
    assert run(["--tau2", "mock", "--tau2-user", mode, "--model", "gold", "--out", str(out)]) == 0
    s = summary(out)
    assert s["split"] == "base" and s["tasks"] == 9 and s["apart"] == apart
    assert s["scored"] == 9 - len(apart) and s["metrics"]["tasks"] == s["scored"]
    assert s["metrics"]["pass_hat_k"]["1"]["value"] == 1.0 and s["not_perfect"] == []
    tasks = {r["task_id"]: r for r in json.loads((out / TASKS_FILE).read_text(encoding="utf-8"))}
    assert all(r["mean_reward"] == 1.0 for r in tasks.values() if not r["apart"])
    # a task reported apart is still run and recorded (unless it cannot run: no ticket in a solo run)
    assert set(tasks) == {t.id for t in load_world("mock").tasks("base")} - {k for k, v in apart.items() if v == ["no_ticket"]}


def test_gold_reasons_come_from_tau2s_own_replay_of_the_task() -> None:
    mock, telecom = load_world("mock"), load_world("telecom")
    assert gold_reasons(mock, mock.task("update_task_with_history_and_env_assertions"), solo=False) == [
        "gold_misses_ENV_ASSERTION"]
    assert gold_reasons(mock, mock.task("create_task_1"), solo=False) == []
    task = telecom.tasks("small")[0]
    assert any(a.requestor == "user" for a in task.evaluation_criteria.actions)
    assert gold_reasons(telecom, task, solo=True) == []  # a solo agent acts on the phone itself
    assert gold_reasons(telecom, task, solo=False)[0] == "user_actions"  # a scripted user does nothing


def test_gold_turns_and_the_stateless_gold_policy() -> None:
    mock = load_world("mock")
    task = mock.task("create_task_1")
    turns = gold_turns(task, solo=False)
    assert turns[0].startswith("<tool_call>") and "create_task" in turns[0] and turns[-1].endswith("###STOP###")
    assert gold_turns(task, solo=True)[-1] == '<tool_call>\n{"name": "done", "arguments": {}}\n</tool_call>'
    policy = GoldPolicy(["A1", "B2", "C3"])
    assert policy.next_turn("") == "A1"
    assert policy.next_turn("A1\nobs: ok\n") == "B2"
    assert policy.next_turn("A1 obs B2 obs") == "C3" and policy.next_turn("A1 x B2 y C3") == ""
    prompt = policy.encode_prompt(policy.format_prompt("héllo", system="sys"))
    row = prompt + policy.encode_text("A1") + policy.encode_text("\ntool: é\n")
    [[c]] = policy.generate_ids([row], 1)
    assert c.text == "B2" and policy.decode(c.completion_ids) == "B2" and c.logprobs == [0.0, 0.0]
    with pytest.raises(ValueError):
        GoldPolicy([])


def test_scripted_user_never_adds_information() -> None:
    from tau2.data_model.message import AssistantMessage, UserMessage

    user = ScriptedUser(stop_after=1)
    agent = AssistantMessage(role="assistant", content="hello")
    said = UserMessage(role="user", content="x")
    assert user.reply(None, [agent]) == "Hi, I need help with a request."
    assert "###STOP###" not in user.reply(None, [agent, said])
    assert user.reply(None, [agent, said, agent, said]).endswith("###STOP###")


# --------------------------------------------------------------------------- resuming and refusals


def test_resume_adds_trials_and_refuses_other_settings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r"
    base = ["--tau2", "mock", "--model", "gold", "--out", str(out), "--limit", "2"]
    assert run(base) == 0
    first = (out / TRIALS_FILE).read_text(encoding="utf-8")
    assert run(base) == 0  # nothing missing: nothing run, nothing appended
    assert (out / TRIALS_FILE).read_text(encoding="utf-8") == first
    assert run([*base, "--trials", "3"]) == 0  # two more trials per task, appended after the first
    trials = read_trials(out / TRIALS_FILE)
    assert (out / TRIALS_FILE).read_text(encoding="utf-8").startswith(first)
    assert sorted((t.task_id, t.trial) for t in trials) == sorted((i, k) for i in {t.task_id for t in trials} for k in range(3))
    s = summary(out)
    assert s["n"] == s["n_expected"] == 6 and sorted(s["metrics"]["pass_hat_k"]) == ["1", "2", "3"]
    assert all(v["value"] == 1.0 for v in s["metrics"]["pass_hat_k"].values())
    # an interrupted write (a partial last line) is cut and redone
    with (out / TRIALS_FILE).open("a", encoding="utf-8") as fh:
        fh.write('{"task_id": "cut')
    assert run([*base, "--trials", "3"]) == 0 and len(read_trials(out / TRIALS_FILE)) == 6
    capsys.readouterr()
    # another user side into the same folder is refused, before anything runs
    assert run([*base, "--tau2-user", "simulated"]) == 2
    err = capsys.readouterr().err
    assert "different settings" in err and "user" in err
    assert run([*base, "--tau2-user", "simulated", "--overwrite"]) == 0
    assert summary(out)["user"] == "scripted" and summary(out)["n"] == 2


def test_usage_errors_name_the_bad_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "e")
    cases = [
        (["--tau2", "airline", "--model", "gold", "--out", out, "--split", "nope"], "--split 'nope'"),
        (["--tau2", "airline", "--model", "gold", "--out", out, "--samples", "4"], "--samples"),
        (["--tau2", "airline", "--model", "gold", "--out", out, "--temperature", "x=0.5"], "NAME=VALUE"),
        (["--tau2", "airline", "--model", "gold", "--out", out, "--tau2-user", "solo"], "no solo mode"),
        (["--tau2", "airline", "--model", str(tmp_path), "--out", out], "--user-model"),
    ]
    for argv, needle in cases:
        assert run(argv) == 2, argv
        assert needle in capsys.readouterr().err, argv
    assert not (tmp_path / "e" / TRIALS_FILE).exists()


def test_help_describes_every_tau2_option() -> None:
    text = parser().format_help()
    for flag in ("--tau2 DOMAIN", "--split", "--trials", "--tau2-user", "--user-model", "--max-turns", "--episode-tokens",
                 "pass^k", "gold"):
        assert flag in text, flag


# --------------------------------------------------------------------------- arithmetic


def trial(task_id: str, k: int, reward: float, termination: str = "agent_stop") -> Tau2Trial:
    return Tau2Trial(task_id=task_id, trial=k, solo=True, reward=reward, success=reward == 1.0, parts={},
                     termination=termination, user="solo", agent_turns=1, tool_calls=0, errors=0, prompt="p",
                     turns=[Turn(role="agent", text="x")], prompt_tokens=1, completion_ids=[5], mask=[1])  # type: ignore[arg-type]


def test_task_result_and_summary_hand_computed() -> None:
    r = task_result("a", [trial("a", 2, 0.0, "max_turns"), trial("a", 0, 1.0), trial("a", 1, 1.0)], [])
    assert (r.trials, r.successes, r.rewards) == (3, 2, [1.0, 1.0, 0.0])
    assert r.pass_hat_k == pytest.approx({1: 2 / 3, 2: 1 / 3, 3: 0.0})
    assert r.mean_reward == pytest.approx(2 / 3) and r.terminations == {"agent_stop": 2, "max_turns": 1}
    records = [trial("a", 0, 1.0), trial("a", 1, 0.0), trial("a", 0, 0.0),  # a duplicate pair: the first counts
               trial("b", 0, 1.0), trial("b", 1, 1.0), trial("c", 0, 0.0), trial("c", 1, 0.0),
               trial("z", 0, 1.0)]  # a task not asked for: left out
    results, fields = summarize(records, ["a", "b", "c"], 2, {"c": ["needs_llm_judge"]})
    assert [x.task_id for x in results] == ["a", "b", "c"] and fields["complete"] and fields["n"] == 6
    m = fields["metrics"]  # over a and b only: pass^1 (1/2 + 1) / 2, pass^2 (0 + 1) / 2
    assert (m.tasks, m.trials) == (2, 2)
    assert m.pass_hat_k[1].value == pytest.approx(0.75) and m.pass_hat_k[2].value == pytest.approx(0.5)
    assert fields["not_perfect"] == ["a"] and fields["apart"] == {"c": ["needs_llm_judge"]} and fields["scored"] == 2
    _, partial = summarize(records[:4], ["a", "b", "c"], 2, {})
    assert not partial["complete"] and partial["metrics"] is None and partial["n"] == 3


# --------------------------------------------------------------------------- a model


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from synco.learn.charlm import char_tokenizer, tiny_llama

    path = tmp_path_factory.mktemp("tiny_tau2")
    tok = char_tokenizer()
    tiny_llama(tok, seed=0, hidden_size=32, num_layers=2, max_positions=8192).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_tool_choice_required_prefills_a_call_at_every_turn(tiny_model_dir: Path, tmp_path: Path) -> None:
    from synco.domains.tau2.calls import CALL_PREFIX

    out = tmp_path / "req"
    argv = ["--tau2", "mock", "--tau2-user", "solo", "--tool-choice", "required", "--model", str(tiny_model_dir),
            "--out", str(out), "--limit", "2", "--max-tokens", "12", "--max-turns", "3", "--device", "cpu"]
    assert run(argv) == 0
    trials = read_trials(out / TRIALS_FILE)
    assert trials and all(t.prompt.endswith(CALL_PREFIX) for t in trials)
    assert all(u.text.endswith(CALL_PREFIX) for t in trials for u in t.turns if u.role == "env")
    assert run(["--tau2", "airline", "--tool-choice", "required", "--model", str(tiny_model_dir), "--user-model",
                "scripted", "--out", str(tmp_path / "no"), "--limit", "1", "--device", "cpu"]) != 0  # needs solo


def test_a_tiny_model_records_episodes_and_resumes(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "m"
    argv = ["--tau2", "mock", "--tau2-user", "simulated", "--user-model", "scripted", "--model", str(tiny_model_dir),
            "--out", str(out), "--limit", "2", "--trials", "2", "--max-tokens", "12", "--max-turns", "3",
            "--device", "cpu", "--seed", "3"]
    assert run(argv) == 0
    trials = read_trials(out / TRIALS_FILE)
    assert sorted((t.task_id, t.trial) for t in trials) == sorted(
        (t.id, k) for t in load_world("mock").tasks("base")[:2] for k in range(2))
    for t in trials:
        assert t.user == "scripted" and not t.solo and t.prompt.startswith("# Mock Domain Policy")
        assert "<tools>" in t.prompt and "create_task" in t.prompt  # the tools in the system prompt (no chat template)
        assert 1 <= t.agent_turns <= 3 and len(t.completion_ids) == len(t.mask)
        agent_ids = sum(u.n_tokens for u in t.turns if u.role == "agent")
        assert sum(t.mask) == agent_ids and all(u.n_tokens <= 12 for u in t.turns if u.role == "agent")
        if t.agent_turns > 1:  # the scripted user's replies are in the trajectory with mask 0
            assert any(u.role == "env" for u in t.turns) and 0 in t.mask
        # graded by τ²'s evaluators ("stop" among the parts; an env assertion on a record never created scores 0)
        assert "stop" in t.parts and t.reward == 0.0 and not t.success
        assert t.termination in ("agent_error", "max_turns", "too_many_errors", "user_stop", "agent_stop", "token_budget")
    assert any(u.role == "env" and "user:" in u.text for t in trials for u in t.turns)
    s = summary(out)
    assert s["complete"] and s["metrics"]["pass_hat_k"]["1"]["value"] == 0.0 and sorted(s["metrics"]["pass_hat_k"]) == ["1", "2"]
    before = (out / TRIALS_FILE).read_text(encoding="utf-8")
    assert run(argv) == 0 and (out / TRIALS_FILE).read_text(encoding="utf-8") == before  # resumed: nothing to do
    # a fresh folder, same settings: the same episodes (seeded per task and first trial)
    assert run([a if a != str(out) else str(tmp_path / "m2") for a in argv]) == 0
    again = read_trials(tmp_path / "m2" / TRIALS_FILE)
    assert [t.completion_ids for t in again] == [t.completion_ids for t in trials]
    assert run([a if a != "12" else "13" for a in argv]) == 2  # another turn budget into the same folder: refused


@pytest.fixture(scope="module")
def letters_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model that always writes "a" or "b" (never an empty reply): the final norm keeps one hidden unit,
    and the output rows of "a" and "b" read it with opposite signs, every other row zero."""
    import torch
    from transformers import LlamaForCausalLM

    from synco.learn.charlm import char_tokenizer, tiny_llama_config

    tok = char_tokenizer()
    cfg = tiny_llama_config(len(tok), hidden_size=32, num_layers=1, max_positions=8192, pad_token_id=tok.pad_token_id,
                            bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    cfg.tie_word_embeddings = False
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        model.model.norm.weight.zero_()
        model.model.norm.weight[0] = 1.0
        model.lm_head.weight.zero_()
        model.lm_head.weight[tok.convert_tokens_to_ids("a"), 0] = 5.0
        model.lm_head.weight[tok.convert_tokens_to_ids("b"), 0] = -5.0
    path = tmp_path_factory.mktemp("letters")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_a_local_model_plays_the_user(tiny_model_dir: Path, letters_model_dir: Path, tmp_path: Path) -> None:
    """``--user-model PATH``: a frozen local model (the adapter training uses) writes the user's turns."""
    out = tmp_path / "u"
    argv = ["--tau2", "mock", "--tau2-user", "simulated", "--user-model", str(letters_model_dir), "--model",
            str(tiny_model_dir), "--out", str(out), "--limit", "1", "--max-tokens", "8", "--max-turns", "2",
            "--device", "cpu"]
    assert run(argv) == 0
    [t] = read_trials(out / TRIALS_FILE)
    assert t.user == str(letters_model_dir) and summary(out)["user"] == str(letters_model_dir)
    assert json.loads((out / RESULTS_FILE).read_text())["info"]["user_info"]["llm"] == str(letters_model_dir)
    users = [m["content"] for m in t.messages if m["role"] == "user"]
    assert users and set(users[0]) <= {"a", "b"} and len(users[0]) > 1
    assert t.prompt.endswith(users[0])  # the simulated user's opening is the agent's first message
    if t.agent_turns > 1:  # the agent's message got the user's reply, as an observation (mask 0)
        assert len(users) >= 2 and any(u.role == "env" and users[1] in u.text for u in t.turns)


def test_settings_recorded_by_an_eval_that_ran_no_trial_do_not_refuse_the_next(tmp_path: Path) -> None:
    from synco.eval.tau2 import Tau2EvalError, Tau2EvalSettings, check_tau2_resume

    def with_model(model: str) -> Tau2EvalSettings:
        return Tau2EvalSettings(domain="mock", split="base", model=model)

    check_tau2_resume(tmp_path, with_model("gone"))  # what a start that failed before its first trial leaves
    check_tau2_resume(tmp_path, with_model("gold"))
    (tmp_path / TRIALS_FILE).write_text("{}\n")  # a trial now exists
    with pytest.raises(Tau2EvalError, match="different settings"):
        check_tau2_resume(tmp_path, with_model("other"))
