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
