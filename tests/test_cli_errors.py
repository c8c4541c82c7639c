"""`synco` command-line errors: describing a config works where running it cannot; running fails in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from synco.cli import main


def test_config_prints_a_paper_preset_without_the_benchmark_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)  # no data/benchmarks here
    assert main(["config", "--preset", "paper"]) == 0
    out, err = capsys.readouterr()
    printed = yaml.safe_load(out)  # stdout stays pure YAML
    assert printed["domain"] == "math" and printed["verifier"]["benchmark_paths"] == ["data/benchmarks"]
    assert "note" in err and "'data/benchmarks' not found" in err and "synco data --out data/benchmarks" in err
    # with the folder there is nothing to note
    (tmp_path / "data" / "benchmarks" / "gsm8k").mkdir(parents=True)
    (tmp_path / "data" / "benchmarks" / "gsm8k" / "test.jsonl").write_text('{"id": "1", "question": "q", "answer": "1"}\n')
    assert main(["config", "--preset", "paper"]) == 0
    assert capsys.readouterr().err == ""


def test_train_of_a_paper_preset_without_the_benchmark_folder_fails_before_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import synco.run.loop

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(synco.run.loop, "train", lambda *a, **k: pytest.fail("the run must not start"))
    assert main(["train", "--preset", "paper", f"runs_dir={tmp_path / 'runs'}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("synco train: invalid configuration:\n  verifier.benchmark_paths: 'data/benchmarks' not found")
    assert "synco data --out data/benchmarks" in err and not (tmp_path / "runs").exists()


def test_train_with_a_missing_prompts_dir_names_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gone = tmp_path / "prompts"
    assert main(["train", "--preset", "smollm2", f"prompts_dir={gone}", f"runs_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert f"prompts_dir={str(gone)!r}: does not exist" in err and "Traceback" not in err


def test_train_with_an_unknown_starting_factor_names_it_and_the_known_ones(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--preset", "tools", "steps=0", "heldout_per_group=0", "progress=false", "threads=1",
                 "evosyn.factors=[pattern,size]", f"runs_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert "synco train: evosyn.factors: unknown factor(s) ['size'] for this domain; known: pattern," in err
    assert "family" in err and "Traceback" not in err and "Loading weights" not in err  # before any model loads


# ----------------------------------------------------------------- a model that cannot be loaded


def _offline_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No hub, an empty hub cache, a benchmark folder in the working directory, and no model may load."""
    import synco.run.build

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data" / "benchmarks" / "gsm8k").mkdir(parents=True)
    (tmp_path / "data" / "benchmarks" / "gsm8k" / "test.jsonl").write_text('{"id": "1", "question": "q", "answer": "1"}\n')
    monkeypatch.setattr(synco.run.build, "build_policies", lambda *a, **k: pytest.fail("a model was loaded"))


@pytest.mark.parametrize("preset,fields", [
    ("paper", ["synthesizer.model_path", "reasoner.model_path"]),
    ("tau2-paper", ["synthesizer.model_path", "reasoner.model_path", "tau2.user_model"]),
])
def test_train_with_a_hub_model_and_no_hub_names_each_field_before_anything(
        preset: str, fields: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _offline_hub(tmp_path, monkeypatch)
    assert main(["train", "--preset", preset, "steps=1", f"runs_dir={tmp_path / 'runs'}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("synco train: cannot load the run's models:\n")
    for field in fields:
        assert f"  {field}='Qwen/Qwen3-8B': no such local folder, and not in the Hugging Face cache" in err
    assert err.count("\n") == 1 + len(fields) and "point it at a local model folder" in err
    assert "Traceback" not in err and not (tmp_path / "runs").exists()


def test_train_with_an_unreachable_hub_names_the_checker_field_and_what_to_do(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import huggingface_hub

    _offline_hub(tmp_path, monkeypatch)
    monkeypatch.delenv("HF_HUB_OFFLINE")

    def unreachable(self, repo_id, **kwargs):
        raise OSError("[Errno -2] Name or service not known")

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", unreachable)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text("{}")
    assert main(["train", "--preset", "paper", f"synthesizer.model_path={mine}", f"reasoner.model_path={mine}",
                 "consensus_solver=checker", "checker.model_path=no-such-org/checker", f"runs_dir={tmp_path / 'runs'}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "synthesizer" not in err and "reasoner" not in err  # local folders are fine
    assert "  checker.model_path='no-such-org/checker': no such local folder, and the Hugging Face hub could not be " \
           "reached to fetch it (OSError: [Errno -2] Name or service not known)" in err
    assert "or run where the hub is reachable" in err and "Traceback" not in err


def test_resume_checks_only_the_models_it_loads_from_the_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from synco.config import load_config
    from synco.run.setup import configured_models

    cfg = load_config("tau2-paper")
    assert configured_models(cfg) == {"synthesizer.model_path": "Qwen/Qwen3-8B", "reasoner.model_path": "Qwen/Qwen3-8B",
                                      "tau2.user_model": "Qwen/Qwen3-8B"}
    assert configured_models(cfg, from_checkpoint=True) == {"tau2.user_model": "Qwen/Qwen3-8B"}  # agents: the checkpoint
    solo = load_config("tau2-paper", overrides=["tau2.domain=mock"])  # auto on a domain with a solo mode: no user
    assert "tau2.user_model" not in configured_models(solo)
    checker = load_config("smollm2", overrides=["consensus_solver=checker"])  # the checker is the Reasoner's model
    assert configured_models(checker, from_checkpoint=True) == {"reasoner.model_path": "smollm2"}


# ----------------------------------------------------------------- a reader that goes away


@pytest.mark.parametrize("argv", [["config", "--reference"], ["verify", "CARDS"]])
def test_output_to_a_closed_pipe_ends_quietly(argv: list[str], tmp_path: Path) -> None:
    """`synco config --reference | head -1`: the reader closes the pipe; synco stops without a traceback."""
    import random
    import subprocess
    import sys

    from synco.domains.arith import ArithDomain

    cards = tmp_path / "cards.jsonl"
    cards.write_text("\n".join(ArithDomain().static_cards(random.Random(0), 1) * 400) + "\n")
    argv = [str(cards) if a == "CARDS" else a for a in argv]
    proc = subprocess.Popen([sys.executable, "-m", "synco.cli", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # what `head -1` does after its line; here before any, so no output fits in the pipe first
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and err == ""  # 141: as a process SIGPIPE ended


# ----------------------------------------------------------------- synco eval: every option it cannot use, in one line


def _eval_bench(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A one-problem benchmark folder, no hub, and the arguments every eval below shares."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    (tmp_path / "bench" / "tiny").mkdir(parents=True)
    (tmp_path / "bench" / "tiny" / "test.jsonl").write_text('{"id": "1", "question": "1+1?", "answer": "2"}\n')
    return ["--data-dir", str(tmp_path / "bench"), "--out", str(tmp_path / "out"), "--no-progress"]


@pytest.mark.parametrize("argv,line", [
    (["--model", "/nonexistent/model"], "--model '/nonexistent/model': no such local folder, and not a hub id either"),
    (["--model", "builtin:arith/nobody"], "--model 'builtin:arith/nobody': unknown built-in model"),
    (["--tau2", "mock", "--model", "/nonexistent"], "--model '/nonexistent': no such local folder"),
    (["--tau2", "airline", "--model", "gold", "--user-model", "/nope"], "--user-model '/nope': no such local folder"),
    (["--model", "gold", "--tau2", "mock", "--trials", "0"], "--trials 0: must be at least 1"),
    (["--model", "gold", "--tau2", "mock", "--trials", "-3"], "--trials -3: must be at least 1"),
    (["--model", "gold", "--tau2", "mock", "--max-turns", "0"], "--max-turns 0: must be at least 1"),
    (["--model", "x", "--batch-size", "0"], "--batch-size 0: must be at least 1"),
    (["--model", "x", "--threads", "0"], "--threads 0: must be at least 1"),
    (["--model", "x", "--limit", "0"], "--limit 0: must be at least 1"),
])
def test_eval_refuses_an_option_it_cannot_use_in_one_line_before_writing_anything(
        argv: list[str], line: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    common = _eval_bench(tmp_path, monkeypatch)
    assert main(["eval", *argv, *common]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"synco eval: {line}") and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()  # nothing written: the next run into it is not refused as another eval's


def test_every_count_option_of_eval_is_checked() -> None:
    """The class, not the instances: a whole-number option added to `synco eval` is either a count checked to be at
    least 1 (COUNT_OPTIONS) or the seed."""
    import argparse

    from synco.eval import configure_eval_command
    from synco.eval.evaluation import COUNT_OPTIONS

    p = argparse.ArgumentParser()
    configure_eval_command(p)
    ints = {a.dest for a in p._actions if a.type is int}
    assert ints - {"seed"} == set(COUNT_OPTIONS)


def test_eval_loads_a_builtin_warm_start_as_train_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """`builtin:arith/reasoner`, a form a run's model_path and `merge --base` take, is a model eval loads."""
    common = _eval_bench(tmp_path, monkeypatch)
    assert main(["eval", "--model", "builtin:arith/reasoner", "--max-tokens", "4", "--threads", "1", *common]) == 0
    assert (tmp_path / "out" / "raw" / "tiny.jsonl").is_file() and "tiny" in capsys.readouterr().out


def test_pretrain_refuses_a_negative_step_count_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pretrain", "--reasoner-steps", "-1", "--out", str(tmp_path / "w")]) == 2
    assert capsys.readouterr().err == "synco pretrain: --reasoner-steps -1: must be at least 0\n"
    assert not (tmp_path / "w").exists()
