"""EvoSyn in `synco analyze`: a hand-made run directory with the factor-space files, numbers computed by hand."""

import argparse
import base64
import json
import math
from pathlib import Path

import pytest

from synco.analysis import AnalysisError, configure_analyze, load_run, run_analyze
from synco.analysis.evosyn import allocation_series, evosyn_analysis, gap_points, in_cell
from synco.analysis.rundata import MetricsLine, TaskRow, read_designer_target
from synco.core.pool import TaskPool
from synco.core.records import Attempt, TaskCard, TaskRecord, Verdict
from synco.core.rewards import synthesizer_reward

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
EVOSYN_PNGS = {"evosyn_allocation.png", "evosyn_gap.png", "evosyn_metrics.png", "evosyn_effect.png"}

# step -> [(level, carries, correct of 4 or None if invalid)]
TASKS = {
    0: [("L1", "0", 4), ("L1", "1", 4), ("L2", "0", 2), ("L2", "1", 1)],  # L1 p=1 (gap 0); L2 p=.375 (gap .75)
    1: [("L1", "0", 3), ("L1", "1", 1), ("L2", "0", 2), ("L2", "1", 0)],  # gaps .5, .5, 1, 0
    2: [("L1", "0", 2), ("L2", "0", None)],  # L1,c0 p=.5 (gap 1); the invalid L2 task is not measured
    3: [("L2", "1", 4)],
}
ALLOCATIONS = {  # the Designer's slots; carries is promoted after step 1 and retired after step 2
    0: {"level=L1": 4, "level=L2": 4},
    1: {"level=L1": 2, "level=L2": 6},
    2: {"level=L1,carries=0": 2, "level=L1,carries=1": 2, "level=L2,carries=0": 3, "level=L2,carries=1": 1},
    3: {"level=L1": 5, "level=L2": 3},
}
METRICS = {  # step: (controllability, coverage, balance, allocation-gap rho, space version)
    0: (0.2, 1.0, 0.9, None, 0),
    1: (0.4, 0.5, 0.8, 1.0, 0),
    2: (0.6, 0.75, 0.7, 0.5, 1),
    3: (0.8, 1.0, 0.6, 0.0, 2),
}
CARRIES = {"cmi": 0.042, "cmi_null": 0.012, "p_value": 0.004975, "n_tasks": 160, "n_attempts": 640,
           "failure_by_bucket": {"0": 0.25, "1": 0.625}, "n_by_bucket": {"0": 70, "1": 90}}
CARRIES_LATER = {**CARRIES, "cmi": 0.013, "cmi_null": 0.012, "p_value": 0.41}
ZEROS = {"cmi": 0.005, "cmi_null": 0.006, "p_value": 0.7, "n_tasks": 160, "n_attempts": 640,
         "failure_by_bucket": {"no": 0.5, "yes": 0.45}, "n_by_bucket": {"no": 120, "yes": 40}}
CHANGES = [
    {"step": 1, "action": "promote", "factor": "carries", "version": 1, "evidence": CARRIES, "note": ""},
    {"step": 2, "action": "retire", "factor": "carries", "version": 2, "evidence": CARRIES_LATER,
     "note": "p = 0.410 > retire_alpha <0.2>"},
]
REFLECTIONS = [
    {"step": 1, "n_tasks": 160, "space_version": 1, "candidates": {"carries": CARRIES, "zeros": ZEROS}},
    {"step": 2, "n_tasks": 160, "space_version": 2, "candidates": {"carries": CARRIES_LATER, "zeros": ZEROS}},
    {"step": 3, "n_tasks": 12, "space_version": 2, "candidates": {}},  # too few tasks: not "the last reflection"
]
SPACE = {"version": 2, "n_cells": 2, "factors": [
    {"name": "level", "buckets": ["L1", "L2"], "status": "standard", "origin": "builtin"},
    {"name": "carries", "buckets": ["0", "1"], "status": "retired", "origin": "promoted", "since_step": 1}]}


def record(step: int, slot: int, level: str, carries: str, n_correct: int | None) -> TaskRecord:
    card = TaskCard(teaching_intent="t", target_reasoning_style="s", expected_reasoner_weakness="w",
                    difficulty_estimate="medium", problem=f"problem {step}-{slot}", solution="sol", final_answer="1",
                    verification_notes="v", novelty_notes="n", factors={"level": level, "carries": carries})
    valid = n_correct is not None
    verdict = Verdict(valid=valid, scores={}, quality=1.0, reliability=1.0 if valid else 0.0,
                      reasons=[] if valid else ["bad_answer"], reference="1")
    rollouts = [Attempt(text="x", answer="1", correct=i < n_correct, reward=float(i < n_correct))
                for i in range(4)] if valid else []
    p = n_correct / 4 if valid else None
    return TaskRecord(step=step, slot=slot, raw="{...}", card=card, verdict=verdict, rollouts=rollouts,
                      success_rate=p, synth_reward=synthesizer_reward(valid, 1.0, verdict.reliability, p))


def jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def build_run(run: Path, evosyn: bool = True) -> Path:
    """A 4-step run; with ``evosyn`` its metrics carry EvoSyn's fields and the three EvoSyn files exist."""
    run.mkdir(parents=True)
    with TaskPool(run / "pool.sqlite") as pool:
        for step, rows in TASKS.items():
            pool.record_step(step, [record(step, i, *row) for i, row in enumerate(rows)])
    lines = []
    for step, (ctrl, cov, bal, rho, version) in METRICS.items():
        line = {"step": step, "mode": "cotrain", "reasoner_reward": 0.5, "synth_reward": 0.1, "n_cards": 4}
        if evosyn:
            line |= {"controllability": ctrl, "factor_coverage": cov, "factor_balance": bal,
                     "allocation": ALLOCATIONS[step], "allocation_gap_spearman": rho, "space_version": version}
        lines.append(line)
    jsonl(run / "metrics.jsonl", lines)
    if evosyn:
        jsonl(run / "factors.jsonl", CHANGES)
        jsonl(run / "reflector.jsonl", REFLECTIONS)
        (run / "factor_space.json").write_text(json.dumps(SPACE))
        (run / "config.yaml").write_text("steps: 4\nevosyn:\n  designer_settings:\n    target: 0.5\n")
    return run


def analyze_args(*argv):
    p = argparse.ArgumentParser()
    configure_analyze(p)
    return p.parse_args([str(a) for a in argv])


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    run = build_run(tmp_path_factory.mktemp("runs") / "evo")
    out = run / "analysis"
    return run, out


@pytest.fixture(scope="module")
def summary(analysed):
    run, out = analysed
    assert run_analyze(analyze_args(run, "--buckets", 2)) == 0
    return json.loads((out / "summary.json").read_text())["evosyn"]


def test_files_are_read_into_typed_records(analysed):
    run, _ = analysed
    files = load_run(run).evosyn
    assert files is not None
    assert [(c.step, c.action, c.factor, c.version) for c in files.changes] == [
        (1, "promote", "carries", 1), (2, "retire", "carries", 2)]
    assert files.changes[0].evidence.excess == pytest.approx(0.030)
    assert [r.step for r in files.reflections] == [1, 2, 3]
    assert files.reflections[1].candidates["carries"].p_value == 0.41
    assert files.space.version == 2 and files.space.active_names() == ["level"] and files.n_cells == 2
    assert files.designer_target == 0.5
    m = load_run(run).metrics[2]
    assert m.allocation == ALLOCATIONS[2] and m.space_version == 1 and m.has_evosyn


def test_summary_numbers(summary):
    assert summary["steps"] == [0, 1, 2, 3]
    assert summary["controllability_first"] == pytest.approx(0.2)  # 4 steps: first / last 10 % = one step
    assert summary["controllability_last"] == pytest.approx(0.8)
    assert summary["coverage_mean"] == pytest.approx(0.8125)
    assert summary["balance_mean"] == pytest.approx(0.75)
    assert summary["allocation_gap_spearman_mean"] == pytest.approx(0.5)  # the step without a rho is left out
    assert (summary["n_promotions"], summary["n_confirmations"], summary["n_retirements"]) == (1, 0, 1)
    assert summary["last_reflection"]["step"] == 2  # step 3 tested no candidate
    assert summary["n_reflections"] == 3
    assert (summary["space_version"], summary["active_factors"], summary["n_cells"]) == (2, ["level"], 2)


def test_gap_at_t_is_paired_with_the_allocation_at_t_plus_one(summary):
    got = [(p["step"], p["cell"], p["n_tasks"], pytest.approx(p["gap"]), pytest.approx(p["next_share"]))
           for p in summary["gap_points"]]
    assert got == [
        (0, "level=L1", 2, 0.0, 0.25), (0, "level=L2", 2, 0.75, 0.75),
        (1, "level=L1,carries=0", 1, 0.5, 0.25), (1, "level=L1,carries=1", 1, 0.5, 0.25),
        (1, "level=L2,carries=0", 1, 1.0, 0.375), (1, "level=L2,carries=1", 1, 0.0, 0.125),
        (2, "level=L1", 1, 1.0, 0.625),  # level=L2 had only an invalid task at step 2: left out
    ]
    # ranks: gap (1.5 5 3.5 3.5 6.5 1.5 6.5), share (3 7 3 3 5 1 6) -> Pearson on ranks
    assert summary["gap_next_spearman"] == pytest.approx(21.5 / math.sqrt(26.5 * 26))


def test_allocation_shares_and_grouping(summary):
    a = summary["allocation"]
    assert a["grouping"] == "cell" and a["n_cells"] == 6 and a["steps"] == [0, 1, 2, 3]
    assert a["groups"] == ["level=L1", "level=L1,carries=0", "level=L1,carries=1",  # a level's cells side by side
                           "level=L2", "level=L2,carries=0", "level=L2,carries=1"]
    assert a["shares"][1] == [0.25, 0, 0, 0.75, 0, 0]
    assert a["shares"][2] == [0, 0.25, 0.25, 0, 0.375, 0.125]

    rows = [MetricsLine(step=s, allocation=alloc) for s, alloc in ALLOCATIONS.items()]
    by_level = allocation_series(rows, max_groups=2)
    assert by_level.grouping == "first_factor" and by_level.groups == ["level=L1", "level=L2"]
    assert by_level.shares[2] == pytest.approx([0.5, 0.5])
    top = allocation_series([MetricsLine(step=0, allocation={"a=1": 5, "b=1": 3, "c=1": 2})], max_groups=2)
    assert top.grouping == "top" and top.groups == ["a=1", "other"] and top.shares == [pytest.approx([0.5, 0.5])]
    assert allocation_series([MetricsLine(step=0)]) is None  # Designer off


def test_report_has_an_evosyn_section_with_plots_and_tables(summary, analysed):
    _, out = analysed
    html = (out / "report.html").read_text()
    section = html[html.index("<h2>EvoSyn</h2>"):]
    for name in EVOSYN_PNGS:
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 1000
        assert base64.b64encode(data).decode() in section and f'href="{name}"' in section
    changes = section[section.index("Factor-space changes"):section.index("Reflection at step 2")]
    # promotion: step, action, factor, CMI, excess CMI, p-value, n tasks, failure rate per bucket
    for cell in ("<td>1</td><td>promote</td><td>carries</td>", "<td>0.0420</td>", "<td>0.0300</td>",
                 "<td>0.0050</td>", "<td>160</td>", "0: 25.0% (n=70), 1: 62.5% (n=90)",
                 "<td>2</td><td>retire</td><td>carries</td>", "<td>0.4100</td>", "retire_alpha &lt;0.2&gt;"):
        assert cell in changes, cell
    candidates = section[section.index("Reflection at step 2"):]
    assert "<td>carries</td><td>retire</td>" in candidates and "<td>zeros</td><td>–</td>" in candidates
    assert "no: 50.0% (n=120), yes: 45.0% (n=40)" in candidates


def test_text_summary_has_the_evosyn_numbers(tmp_path, capsys):
    run = build_run(tmp_path / "evo")
    assert run_analyze(analyze_args(run, "--out", tmp_path / "out")) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "EvoSyn" in ln)
    for part in ("controllability 0.20 -> 0.80", "coverage 0.81", "balance 0.75", "allocation-gap rho 0.50",
                 "gap -> next allocation 0.82", "1 promotions", "0 confirmations", "1 retirements"):
        assert part in line, part


def test_run_without_evosyn_files_still_analyses(tmp_path, capsys):
    run = build_run(tmp_path / "old", evosyn=False)
    assert load_run(run).evosyn is None
    assert run_analyze(analyze_args(run)) == 0
    out = run / "analysis"
    assert json.loads((out / "summary.json").read_text())["evosyn"] is None
    assert not any((out / name).exists() for name in EVOSYN_PNGS)
    assert "EvoSyn" not in (out / "report.html").read_text()
    assert "EvoSyn" not in capsys.readouterr().out


def test_overlay_draws_evosyn_when_one_run_has_it(tmp_path):
    a, b = build_run(tmp_path / "evo"), build_run(tmp_path / "plain", evosyn=False)
    out = tmp_path / "cmp"
    assert run_analyze(analyze_args(a, b, "--out", out)) == 0
    png = (out / "evosyn.png").read_bytes()
    html = (out / "report.html").read_text()
    assert png.startswith(PNG_MAGIC) and base64.b64encode(png).decode() in html
    assert html.count("<h3>EvoSyn</h3>") == 1  # the tables of the run that has EvoSyn only


def test_broken_evosyn_files_name_the_file_and_line(tmp_path):
    run = build_run(tmp_path / "r")
    (run / "factors.jsonl").write_text(json.dumps(CHANGES[0]) + '\n{"step": 2, "action": "bogus"}\n')
    with pytest.raises(AnalysisError, match=r"factors\.jsonl:2: .*action"):
        load_run(run)
    (run / "factors.jsonl").unlink()
    (run / "factor_space.json").write_text("{not json")
    with pytest.raises(AnalysisError, match=r"factor_space\.json"):
        load_run(run)


def test_only_metrics_fields_or_only_files_still_count_as_evosyn(tmp_path):
    run = build_run(tmp_path / "r")
    for name in ("factors.jsonl", "reflector.jsonl", "factor_space.json", "config.yaml"):
        (run / name).unlink()
    e = evosyn_analysis(load_run(run))
    assert e is not None and e.designer_target == 0.5 and e.changes == [] and e.last_reflection is None
    assert e.space_version == 2  # from the last metrics line when factor_space.json is absent


def test_designer_target_from_config_and_fallbacks(tmp_path):
    cfg = tmp_path / "config.yaml"
    assert read_designer_target(cfg) is None
    cfg.write_text("evosyn:\n  designer_settings:\n    target: 0.25\n")
    assert read_designer_target(cfg) == 0.25
    for bad in ("evosyn: [1, 2]\n", "evosyn:\n  designer_settings:\n    target: 7\n", "a: [unclosed\n"):
        cfg.write_text(bad)
        assert read_designer_target(cfg) is None, bad
    # the target sets the gap: at target .25, p = .375 is .5 of the way from .25 to 1 -> need 5/6
    task = TaskRow(task_id=1, step=0, valid=True, gradient_bearing=True, quality=1, reliability=1, novelty=None,
                   success_rate=0.375, synth_total=None, difficulty=None, factors={"level": "L2"})
    pts = gap_points([MetricsLine(step=1, allocation={"level=L2": 3})], [task], target=0.25)
    assert [(p.gap, p.next_share) for p in pts] == [(pytest.approx(5 / 6), 1.0)]


def test_in_cell_matches_every_factor_and_rejects_bad_keys():
    task = TaskRow(task_id=1, step=0, valid=True, gradient_bearing=False, quality=1, reliability=1, novelty=None,
                   success_rate=1.0, synth_total=None, difficulty=None, factors={"level": "L1", "carries": "0"})
    assert in_cell(task, "level=L1") and in_cell(task, "level=L1,carries=0")
    assert not in_cell(task, "level=L1,carries=1") and not in_cell(task, "zeros=no")
    assert not in_cell(task, "") and not in_cell(task, "garbage")


def test_a_control_check_decision_is_reported_with_its_control_rate(tmp_path, capsys):
    run = build_run(tmp_path / "evo")
    observe = {"step": 3, "action": "observe", "factor": "zeros", "version": 3, "note": "control 0.40 < 0.75",
               "control": {"rate": 0.4, "chance": 0.26, "n_cards": 218}}
    with open(run / "factors.jsonl", "a") as f:
        f.write(json.dumps(observe) + "\n")
    space = {**SPACE, "factors": [*SPACE["factors"], {"name": "zeros", "buckets": ["no", "yes"], "status": "experimental",
                                                       "origin": "promoted", "since_step": 2, "steered": False}]}
    (run / "factor_space.json").write_text(json.dumps(space))
    out = tmp_path / "out"
    assert run_analyze(analyze_args(run, "--out", out)) == 0
    assert "1 observed only" in next(ln for ln in capsys.readouterr().out.splitlines() if "EvoSyn" in ln)
    summary = json.loads((out / "summary.json").read_text())["evosyn"]
    assert summary["n_observed"] == 1 and summary["active_factors"] == ["level", "zeros (observed)"]
    assert "<td>3</td><td>observe</td><td>zeros</td>" in (out / "report.html").read_text()
    assert "0.40 (0.26), 218 cards" in (out / "report.html").read_text()
