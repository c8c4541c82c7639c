"""`synco verify FILE`: one JSON verdict per non-blank line, exit 0 for any cards, 2 for a bad file or config."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from synco.cli import main
from synco.domains.arith import ArithDomain

DOMAIN = ArithDomain()


def _verify(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[dict], str]:
    rc = main(["verify", *argv])
    out, err = capsys.readouterr()
    return rc, [json.loads(line) for line in out.splitlines()], err


def test_verify_prints_one_verdict_per_card_line_in_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cards = DOMAIN.static_cards(random.Random(3), 3)
    held = DOMAIN.heldout(1, seed=2)[0]
    held_card = json.dumps({**json.loads(cards[0]), "problem": held.problem, "final_answer": held.answer})
    lines = [cards[0], "", cards[1], "{not json", '{"problem": "2+2"}', held_card, cards[1], json.dumps(cards[2]), ""]
    f = tmp_path / "cards.jsonl"
    f.write_text("\n".join(lines))
    rc, verdicts, err = _verify(capsys, str(f))
    assert rc == 0 and err == ""  # no progress bar when stderr is not a terminal
    assert [v["line"] for v in verdicts] == [1, 3, 4, 5, 6, 7, 8]
    assert [v["valid"] for v in verdicts] == [True, True, False, False, False, False, True]
    assert verdicts[2]["reasons"] == ["no_json"]
    assert verdicts[3]["reasons"] == ["missing_field"]
    assert verdicts[4]["reasons"] == ["heldout_problem"]
    assert verdicts[5]["reasons"] == ["duplicate_in_step"]
    assert verdicts[6]["reference"] == json.loads(cards[2])["final_answer"]  # a JSON string line, decoded
    assert set(verdicts[0]) >= {"line", "valid", "reasons", "reference", "details", "quality", "factors"}


def test_verify_shows_progress_on_stderr_only_when_it_is_a_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    f = tmp_path / "cards.jsonl"
    f.write_text("\n".join(DOMAIN.static_cards(random.Random(0), 2)))
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    rc, verdicts, err = _verify(capsys, str(f))
    assert rc == 0 and len(verdicts) == 2 and "verify" in err and "2/2" in err  # stdout stays pure JSON lines


def test_verify_of_an_empty_file_prints_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "empty.jsonl"
    f.write_text("")
    assert _verify(capsys, str(f)) == (0, [], "")
    f.write_text("\n  \n")
    assert _verify(capsys, str(f)) == (0, [], "")


def test_verify_reads_standard_input_for_a_dash(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.StringIO("\n" + DOMAIN.static_cards(random.Random(0), 1)[0] + "\n"))
    rc, verdicts, _ = _verify(capsys, "-")
    assert rc == 0 and [(v["line"], v["valid"]) for v in verdicts] == [(2, True)]


def test_verify_follows_overrides_like_train(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cards = DOMAIN.static_cards(random.Random(0), 1)
    f = tmp_path / "cards.jsonl"
    f.write_text(cards[0] + "\n")
    # the arith preset allows 3-40 characters; under this override a 7-character problem is too short
    rc, verdicts, _ = _verify(capsys, str(f), "verifier.min_problem_chars=20")
    assert rc == 0 and verdicts[0]["valid"] is False and verdicts[0]["reasons"] == ["problem_too_short"]


def test_verify_of_a_missing_file_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, verdicts, err = _verify(capsys, str(tmp_path / "nope.jsonl"))
    assert rc == 2 and verdicts == []
    assert err.count("\n") == 1 and err.startswith("synco verify: cannot read") and "nope.jsonl" in err
    rc, _, err = _verify(capsys, str(tmp_path))  # a folder
    assert rc == 2 and err.startswith("synco verify: cannot read")


def test_verify_with_a_bad_override_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "cards.jsonl"
    f.write_text(DOMAIN.static_cards(random.Random(0), 1)[0])
    rc, verdicts, err = _verify(capsys, str(f), "stepz=3")
    assert rc == 2 and verdicts == [] and "stepz" in err and "Traceback" not in err
    rc, _, err = _verify(capsys, str(f), "domain=nope")
    assert rc == 2 and "unknown domain 'nope'" in err


def test_verify_help_documents_the_input_the_output_and_the_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["verify", "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    for word in ("FILE", "KEY=VALUE", "--preset", "JSON string literal", "blank lines", "reasons", "reference",
                 "duplicate_in_step", "Exit status", "progress bar"):
        assert word in text, word


def test_verify_screens_tools_cards_and_hostile_action_lists_by_reason_code(tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from synco.domains.tools.domain import ToolsDomain

    tools = ToolsDomain()
    good = tools.static_cards(random.Random(5), 2)
    base = json.loads(good[0])
    hostile = [
        {**base, "solution": "find_user(bob);" * 200},                      # far too many actions
        {**base, "solution": "__import__('os').system('x')"},               # code, not calls
        {**base, "solution": "find_user(" + "b" * 5000 + ")"},               # a giant argument
        {**base, "solution": "nuke_db(all)"},                                # an unknown tool
        {**base, "solution": "find_user(bob);cancel_order(o58)", "problem": "cancel bob's order"},  # id never read
        {**base, "problem": "what does b\u00f6b have?"},                    # not the world's charset
    ]
    f = tmp_path / "tools.jsonl"
    f.write_text("\n".join([*good, *(json.dumps(h) for h in hostile)]))
    rc, verdicts, _ = _verify(capsys, str(f), "--preset", "tools")
    assert rc == 0 and len(verdicts) == 8
    assert [v["valid"] for v in verdicts] == [True, True] + [False] * 6
    codes = [v["reasons"][0] for v in verdicts[2:]]
    assert codes[0] in ("too_many_actions", "bad_actions") and codes[1] == "bad_actions"
    assert codes[2] in ("bad_actions", "bad_arguments") and codes[3] == "unknown_tool"
    assert codes[4] == "ungrounded_argument" and codes[5] == "bad_instruction"
    assert verdicts[0]["factors"]["pattern"] in ("r", "rw", "rwr", "rw+")


def test_verify_accepts_every_tau2_airline_task_and_rejects_corrupted_copies(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's check, through the command: τ²'s own 50 airline tasks as τ² task JSON lines, then corrupted
    copies of one (an unknown tool, an id no record has, a wrong argument type), each with its reason code."""
    pytest.importorskip("tau2")
    from synco.domains.tau2.world import require_tau2

    root = Path(str(require_tau2().__file__)).parent / "data" / "tau2" / "domains" / "airline"
    tasks = json.loads((root / "tasks.json").read_text(encoding="utf-8"))
    cancel = next(t for t in tasks if [a["name"] for a in t["evaluation_criteria"]["actions"]] == ["cancel_reservation"])

    def corrupt(name: str | None = None, **arguments: object) -> str:
        bad = json.loads(json.dumps(cancel))
        action = bad["evaluation_criteria"]["actions"][0]
        action["name"] = name or action["name"]
        action["arguments"].update(arguments)
        return json.dumps(bad)

    lines = [json.dumps(t) for t in tasks] + [corrupt("cancel_everything"), corrupt(reservation_id="ZZZ999"),
                                             corrupt(reservation_id=12345)]
    f = tmp_path / "airline.jsonl"
    f.write_text("\n".join(lines))
    rc, verdicts, err = _verify(capsys, str(f), "domain=tau2", "tau2.domain=airline")
    assert rc == 0, err
    assert rc == 0 and len(verdicts) == len(tasks) + 3
    assert [v["valid"] for v in verdicts[:len(tasks)]] == [True] * len(tasks)
    assert [v["reasons"] for v in verdicts[len(tasks):]] == [["unknown_tool"], ["unknown_id"], ["bad_arguments"]]


def test_verify_reads_a_tau2_cards_non_answer_as_the_oracles_empty_list(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """`None`, `none`, `[]`: nothing to communicate, the oracle's `[]` as a run's verifier reads it, so the card is no
    correction (a corrected row's export loses its solution, and the Synthesizer its credit)."""
    pytest.importorskip("tau2")
    from synco.domains.registry import DomainContext, get_domain
    from synco.domains.tau2.settings import Tau2Settings

    domain = get_domain("tau2", DomainContext(settings=Tau2Settings(domain="mock")))
    cards = {json.loads(t)["problem"]: json.loads(t) for t in domain.static_cards(random.Random(0), 40)}
    assert len(cards) >= 3 and all(c["final_answer"] == "[]" for c in cards.values())
    lines = [json.dumps({**c, "final_answer": said}) for c, said in zip(cards.values(), ["None", "none", "[]"])]
    f = tmp_path / "cards.jsonl"
    f.write_text("\n".join(lines))
    rc, verdicts, err = _verify(capsys, str(f), "--preset", "tau2-smollm2", "tau2.domain=mock")
    assert rc == 0, err
    assert [(v["valid"], v["reasons"], v["reference"]) for v in verdicts] == [(True, [], "[]")] * 3


def test_verify_rejects_a_repeated_tau2_task_as_a_duplicate_in_step(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """The file is one batch for τ²'s own task lines too: the second copy of a task is `duplicate_in_step`, as the
    second copy of an arith or tools card is; so is a card repeating a task line."""
    pytest.importorskip("tau2")
    from synco.domains.tau2.tasks import card_of_task
    from synco.domains.tau2.world import require_tau2

    root = Path(str(require_tau2().__file__)).parent / "data" / "tau2" / "domains" / "airline"
    task = json.loads((root / "tasks.json").read_text(encoding="utf-8"))[0]
    from tau2.data_model.tasks import Task

    as_card = json.dumps(card_of_task(Task.model_validate(task)).flat())  # the nine fields, as a Synthesizer writes them
    f = tmp_path / "twice.jsonl"
    f.write_text("\n".join([json.dumps(task), json.dumps(task), as_card]))
    rc, verdicts, err = _verify(capsys, str(f), "domain=tau2", "tau2.domain=airline")
    assert rc == 0, err
    assert [(v["valid"], v["reasons"]) for v in verdicts][:2] == [(True, []), (False, ["duplicate_in_step"])]
    assert "duplicate_in_step" in verdicts[2]["reasons"] and verdicts[1]["factors"] == {}
    assert verdicts[1]["details"][0].startswith("duplicate_in_step: sim=1.00 slot=0")


def test_verify_accepts_a_runs_own_valid_tasks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`synco verify runs/x/valid_tasks.jsonl` (its --help's example): every row of a run's own export is valid, its
    reference the row's verified final_answer, rows whose answer the oracle corrected (solution null) included."""
    assert main(["train", "steps=1", "n_cards=16", "k=2", "heldout_per_group=0", "progress=false", "tensorboard=false",
                 "threads=1", f"runs_dir={tmp_path}", "run_id=r"]) == 0
    capsys.readouterr()
    export = tmp_path / "r" / "valid_tasks.jsonl"
    rows = [json.loads(line) for line in export.read_text().splitlines()]
    assert rows and any(r["solution"] is None and r["answer_corrected"] for r in rows)
    rc, verdicts, err = _verify(capsys, str(export))
    assert rc == 0, err
    assert [(v["valid"], v["reasons"], v["reference"]) for v in verdicts] == [(True, [], r["final_answer"]) for r in rows]
