"""synco analyze / synco compare on hand-made runs and eval dirs, numbers computed by hand."""

import argparse
import base64
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from synco.analysis import (
    AnalysisError,
    configure_analyze,
    configure_compare,
    learn_retain,
    load_run,
    run_analyze,
    run_compare,
)
from synco.analysis.rundata import TaskRow
from synco.analysis.stats import (
    difficulty_order,
    moving_average,
    natural_key,
    pearson,
    step_buckets,
    success_histogram,
    top_share,
)
from synco.core.pool import TaskPool
from synco.core.records import Attempt, TaskCard, TaskRecord, Verdict
from synco.core.rewards import synthesizer_reward

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# (step, slot): (correct of 4 or None if invalid, quality, novelty, difficulty, level, reason)
# Valid tasks: 16. Outcomes: GB = p in {.25,.5,.75} (rewards 1/0 differ), AC = 4/4, AI = 0/4.
CARDS = {
    (0, 0): (2, 1.0, 0.60, "easy", "L1", None),  # GB
    (0, 1): (4, 0.9, 0.50, "easy", "L1", None),  # AC
    (0, 2): (1, 0.8, 0.70, "medium", "L2", None),  # GB
    (0, 3): (None, 0.2, None, None, None, "missing_field: solution"),
    (0, 4): (0, 1.0, 0.40, "hard", "L10", None),  # AI
    (1, 0): (3, 0.9, 0.65, "medium", "L2", None),  # GB
    (1, 1): (4, 1.0, 0.80, "easy", "L1", None),  # AC
    (1, 2): (None, 0.9, 0.10, "easy", "L1", "near_duplicate: task 2"),
    (1, 3): (0, 0.8, 0.45, "hard", "L10", None),  # AI
    (1, 4): (4, 1.0, 0.90, "medium", "L2", None),  # AC
    (2, 0): (4, 1.0, 0.72, "easy", "L1", None),  # AC
    (2, 1): (2, 0.9, 0.85, "hard", "L10", None),  # GB
    (2, 2): (4, 1.0, 0.95, "medium", "L2", None),  # AC
    (2, 3): (None, 0.3, None, None, None, "missing_field: problem"),
    (2, 4): (None, 0.6, 0.50, "hard", "L10", "bad_answer"),
    (3, 0): (4, 0.9, 1.00, "easy", "L1", None),  # AC
    (3, 1): (0, 1.0, 0.55, "hard", "L10", None),  # AI
    (3, 2): (4, 1.0, 0.75, "medium", "L2", None),  # AC
    (3, 3): (4, 1.0, 0.83, "Learnable", None, None),  # AC, no level factor: falls back to the label
    (3, 4): (3, 0.8, 0.78, "medium", "L2", "solution_no_answer"),  # GB; a soft reason on a valid card
}
REASONER_REWARDS = [0.2, 0.4, 0.6, 0.8]
SYNTH_REWARDS = [0.1, 0.3, 0.2, 0.4]


def make_record(step, slot, spec):
    n_correct, quality, novelty, difficulty, level, reason = spec
    card = None
    if difficulty is not None:
        card = TaskCard(teaching_intent="t", target_reasoning_style="s", expected_reasoner_weakness="w",
                        difficulty_estimate=difficulty, problem=f"problem {step}-{slot}", solution="sol",
                        final_answer="1", verification_notes="v", novelty_notes="n",
                        factors={"level": level} if level else {})
    valid = n_correct is not None
    scores = {"novelty": novelty} if novelty is not None else {}
    verdict = Verdict(valid=valid, scores=scores, quality=quality, reliability=1.0 if valid else 0.0,
                      reasons=[reason] if reason else [], reference="1")
    rollouts = [Attempt(text="x", answer="1", correct=i < n_correct, reward=1.0 if i < n_correct else 0.0)
                for i in range(4)] if valid else []
    p = n_correct / 4 if valid else None
    sr = synthesizer_reward(valid, quality, verdict.reliability, p, novelty=novelty or 1.0,
                            reason_codes=verdict.reason_codes)
    return TaskRecord(step=step, slot=slot, raw="{...}", card=card, verdict=verdict, rollouts=rollouts,
                      success_rate=p, synth_reward=sr)


def write_metrics(run: Path, reasoner, synth, mode="cotrain"):
    lines = [json.dumps({"step": s, "mode": mode, "reasoner_reward": r, "synth_reward": y, "n_cards": 5})
             for s, (r, y) in enumerate(zip(reasoner, synth))]
    (run / "metrics.jsonl").write_text("".join(ln + "\n" for ln in lines))


def build_run(run: Path, reasoner=REASONER_REWARDS, synth=SYNTH_REWARDS, mode="cotrain", heldout=True) -> Path:
    run.mkdir(parents=True)
    with TaskPool(run / "pool.sqlite") as pool:
        for step in range(4):
            pool.record_step(step, [make_record(step, slot, CARDS[(step, slot)]) for slot in range(5)])
    write_metrics(run, reasoner, synth, mode)
    (run / "reports").mkdir()
    (run / "reports" / "step_2.txt").write_text("old report")
    (run / "reports" / "step_4.txt").write_text("newest <b>report</b>")
    if heldout:  # as `synco train` writes them: before, the heldout_every curve, the final one in summary.json
        (run / "heldout_before.json").write_text(json.dumps({"greedy": {"L1": 0.5, "L2": 0.1}, "sampled": {}}))
        (run / "heldout.jsonl").write_text(json.dumps({"step": 2, "mean": 0.4, "greedy": {"L1": 0.6, "L2": 0.2}}) + "\n")
        (run / "summary.json").write_text(json.dumps({"steps": 4, "heldout_after": {"L1": 0.7, "L2": 0.3}}))
    return run


def analyze_args(*argv):
    p = argparse.ArgumentParser()
    configure_analyze(p)
    return p.parse_args([str(a) for a in argv])


def compare_args(*argv):
    p = argparse.ArgumentParser()
    configure_compare(p)
    return p.parse_args([str(a) for a in argv])


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    run = build_run(tmp_path_factory.mktemp("runs") / "cotrain")
    assert run_analyze(analyze_args(run, "--buckets", 2, "--window", 2)) == 0
    out = run / "analysis"
    return run, out, json.loads((out / "summary.json").read_text())


def signal(summary, name):
    return next(s for s in summary["signals"] if s["name"] == name)


# ------------------------------------------------------------------ summary numbers


def test_prevalence_outcomes_and_pass_rate(analysed):
    _, _, s = analysed
    assert (s["n_steps"], s["n_tasks"], s["n_valid"]) == (4, 20, 16)
    assert s["pass_rate"] == pytest.approx(0.8)
    assert s["prevalence"] == pytest.approx(5 / 16)
    assert s["outcomes"]["counts"] == {"gradient_bearing": 5, "all_correct": 8, "all_incorrect": 3, "other": 0}
    assert s["mode"] == "cotrain"


def test_curriculum_buckets(analysed):
    _, _, s = analysed
    b0, b1 = s["buckets"]
    assert (b0["step_lo"], b0["step_hi"], b1["step_lo"], b1["step_hi"]) == (0, 1, 2, 3)
    assert (b0["n_tasks"], b0["n_valid"], b1["n_tasks"], b1["n_valid"]) == (10, 8, 10, 8)
    assert b0["outcomes"]["shares"] == pytest.approx(
        {"gradient_bearing": 3 / 8, "all_correct": 3 / 8, "all_incorrect": 2 / 8, "other": 0.0})
    assert b1["outcomes"]["shares"] == pytest.approx(
        {"gradient_bearing": 2 / 8, "all_correct": 5 / 8, "all_incorrect": 1 / 8, "other": 0.0})
    assert b0["mean_quality"] == pytest.approx(7.4 / 8)
    assert b1["mean_quality"] == pytest.approx(7.6 / 8)
    assert b0["mean_novelty"] == pytest.approx(5.0 / 8)
    assert b1["mean_novelty"] == pytest.approx(6.43 / 8)


def test_teachability_correlation_matches_point_biserial_by_hand(analysed):
    _, _, s = analysed
    # teach: GB tasks 1, .5, .5, 1, .5 (mean .7); the 11 others 0. Point-biserial with population sd.
    n, n1, n0 = 16, 5, 11
    mean_all = 3.5 / n
    sd = math.sqrt(2.75 / n - mean_all**2)
    expected = (0.7 - 0.0) / sd * math.sqrt(n1 * n0 / n**2)
    t = signal(s, "teachability")
    assert t["n"] == 16
    assert t["r"] == pytest.approx(expected)
    assert t["top_k"] == 4 and t["top_share"] == pytest.approx(1.0)
    assert t["lift"] == pytest.approx(16 / 5)


def test_top_quartile_shares_with_ties_and_constant_signal(analysed):
    _, _, s = analysed
    # quality 1.0 is shared by 9 valid tasks, 1 of them gradient-bearing: 4 slots at rate 1/9.
    assert signal(s, "quality")["top_share"] == pytest.approx(1 / 9)
    # novelty top 4 (1.0, .95, .90, .85): only .85 is gradient-bearing.
    assert signal(s, "novelty")["top_share"] == pytest.approx(0.25)
    # reliability is 1.0 for every valid task: no correlation, top share = prevalence.
    rel = signal(s, "reliability")
    assert rel["r"] is None
    assert rel["top_share"] == pytest.approx(5 / 16)


def test_difficulty_groups_and_learnable_precision_recall(analysed):
    _, _, s = analysed
    d = s["difficulty"]
    assert d["order"]["method"] == "vocabulary"
    groups = {g["label"]: g for g in d["groups"]}
    assert [g["label"] for g in d["groups"]] == ["easy", "Learnable", "medium", "hard"]
    assert (groups["easy"]["n"], groups["easy"]["gradient_bearing_rate"]) == (5, pytest.approx(0.2))
    assert groups["easy"]["all_correct_share"] == pytest.approx(0.8)
    assert (groups["medium"]["n"], groups["medium"]["gradient_bearing_rate"]) == (6, pytest.approx(0.5))
    assert (groups["hard"]["gradient_bearing_rate"], groups["hard"]["all_incorrect_share"]) == (
        pytest.approx(0.25), pytest.approx(0.75))
    assert groups["Learnable"]["learnable"] and groups["medium"]["learnable"] and not groups["hard"]["learnable"]
    pr = d["learnable"]
    assert (pr["predicted"], pr["actual"], pr["true_positive"]) == (7, 5, 3)
    assert pr["precision"] == pytest.approx(3 / 7)
    assert pr["recall"] == pytest.approx(3 / 5)


def test_success_histogram_rewards_verification_and_factors(analysed):
    _, _, s = analysed
    assert s["success_histogram"]["labels"] == ["0", "0.25", "0.5", "0.75", "1"]
    assert s["success_histogram"]["counts"] == [3, 1, 2, 2, 8]
    r = s["rewards"]
    assert r["reasoner"]["moving_average"] == pytest.approx([0.2, 0.3, 0.5, 0.7])
    assert r["reasoner"]["last_moving_average"] == pytest.approx(0.7)
    assert r["synthesizer"]["moving_average"] == pytest.approx([0.1, 0.2, 0.25, 0.3])
    v = s["verification"]
    assert [p["pass_rate"] for p in v["per_step"]] == pytest.approx([0.8, 0.8, 0.6, 1.0])
    assert v["reason_totals"] == {"missing_field": 2, "bad_answer": 1, "near_duplicate": 1}
    assert list(v["reason_totals"]) == ["missing_field", "bad_answer", "near_duplicate"]
    assert v["valid_reason_totals"] == {"solution_no_answer": 1}
    assert v["per_step"][3]["reasons"] == {}  # soft reasons of valid cards are not rejections
    f = s["factor_success"]
    assert f["groups"] == ["L1", "L2", "L10", "Learnable"]
    assert f["n_fallback"] == 1
    assert f["success"][0] == pytest.approx({"L1": 2.5 / 3, "L2": 2 / 3, "L10": 0.0})
    assert f["success"][1] == pytest.approx({"L1": 1.0, "L2": 2.75 / 3, "L10": 0.25, "Learnable": 1.0})
    assert (s["n_reports"], s["latest_report_step"]) == (2, 4)


# ------------------------------------------------------------------ files


def assert_report_embeds_every_plot(out: Path):
    html = (out / "report.html").read_text()
    pngs = sorted(out.rglob("*.png"))
    assert pngs
    for png in pngs:
        data = png.read_bytes()
        assert len(data) > 1000 and data.startswith(PNG_MAGIC) and data.endswith(b"IEND\xaeB`\x82")
        assert png.relative_to(out).as_posix() in html
        assert base64.b64encode(data).decode() in html
    return html, pngs


def test_report_html_references_every_valid_png(analysed):
    _, out, _ = analysed
    html, pngs = assert_report_embeds_every_plot(out)
    assert {p.name for p in pngs} == {"curriculum.png", "signals.png", "difficulty.png", "success_hist.png",
                                      "rewards.png", "verification.png", "factor_success.png", "heldout.png"}
    assert "newest &lt;b&gt;report&lt;/b&gt;" in html  # the capability report, escaped


def test_several_runs_are_overlaid_into_out(tmp_path, capsys):
    a = build_run(tmp_path / "cotrain")
    b = build_run(tmp_path / "frozen", reasoner=[0.1, 0.1, 0.1, 0.1], mode="frozen")
    out = tmp_path / "cmp"
    assert run_analyze(analyze_args(a, b, "--out", out, "--buckets", 2, "--window", 2)) == 0
    s = json.loads((out / "summary.json").read_text())
    assert list(s["runs"]) == ["cotrain", "frozen"]
    assert s["runs"]["frozen"]["rewards"]["reasoner"]["last_moving_average"] == pytest.approx(0.1)
    assert s["runs"]["frozen"]["mode"] == "frozen"
    html, pngs = assert_report_embeds_every_plot(out)
    assert {p.name for p in pngs} == {"rewards.png", "gradient_share.png", "verification.png", "success_hist.png",
                                      "signals.png", "heldout.png"}
    assert "Run cotrain" in html and "Run frozen" in html
    assert not (a / "analysis").exists()  # several runs write only to --out
    assert "frozen" in capsys.readouterr().out


def test_same_directory_names_get_distinct_labels(tmp_path):
    from synco.analysis.cli import run_labels

    assert run_labels([tmp_path / "x" / "run", tmp_path / "y" / "run", tmp_path / "z"]) == ["x/run", "y/run", "z"]


# ------------------------------------------------------------------ robustness


def test_empty_pool_gives_a_report_without_numbers(tmp_path):
    run = tmp_path / "empty"
    run.mkdir()
    TaskPool(run / "pool.sqlite").close()
    (run / "metrics.jsonl").write_text("")
    assert run_analyze(analyze_args(run)) == 0
    s = json.loads((run / "analysis" / "summary.json").read_text())
    assert (s["n_tasks"], s["prevalence"], s["pass_rate"], s["buckets"]) == (0, None, None, [])
    assert all(sig["r"] is None and sig["top_share"] is None for sig in s["signals"])
    assert s["difficulty"]["learnable"]["precision"] is None
    assert_report_embeds_every_plot(run / "analysis")


def test_missing_metrics_is_a_clear_error(tmp_path, capsys):
    run = tmp_path / "nometrics"
    run.mkdir()
    TaskPool(run / "pool.sqlite").close()
    assert run_analyze(analyze_args(run)) == 2
    err = capsys.readouterr().err
    assert "metrics.jsonl" in err and str(run) in err and "Traceback" not in err
    assert not (run / "analysis").exists()


def test_missing_pool_and_broken_metrics_name_the_file(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    with pytest.raises(AnalysisError, match="pool.sqlite"):
        load_run(run)
    (run / "pool.sqlite").write_bytes(b"this is not an SQLite file" * 10)
    with pytest.raises(AnalysisError, match="not a synco pool"):
        load_run(run)
    (run / "pool.sqlite").unlink()
    TaskPool(run / "pool.sqlite").close()
    (run / "metrics.jsonl").write_text('{"step": 0}\nnot json\n')
    with pytest.raises(AnalysisError, match=r"metrics\.jsonl:2"):
        load_run(run)


def test_heldout_curve_joins_before_every_and_after(analysed, tmp_path):
    _, _, summary = analysed
    assert [(p["step"], p["greedy"]["L1"], p["mean"]) for p in summary["heldout"]] == [
        (0, 0.5, pytest.approx(0.3)), (2, 0.6, pytest.approx(0.4)), (4, 0.7, pytest.approx(0.5))]
    bare = build_run(tmp_path / "bare", heldout=False)
    assert load_run(bare).heldout == []
    (bare / "heldout.jsonl").write_text('{"step": 2, "greedy": "oops"}\n')
    with pytest.raises(AnalysisError, match=r"heldout\.jsonl"):
        load_run(bare)


def test_analysis_leaves_the_pool_untouched(analysed):
    run, _, _ = analysed
    before = (run / "pool.sqlite").stat().st_mtime_ns
    load_run(run)
    assert (run / "pool.sqlite").stat().st_mtime_ns == before


def test_module_does_not_import_torch():
    code = ("import sys, synco.analysis, synco.analysis.plots, synco.analysis.html; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------ compare


def write_eval(root: Path, bench: dict[str, list[tuple[object, bool]]]) -> Path:
    (root / "raw").mkdir(parents=True)
    for name, rows in bench.items():
        (root / "raw" / f"{name}.jsonl").write_text(
            "".join(json.dumps({"id": i, "correct": c, "completion": "..."}) + "\n" for i, c in rows))
    (root / "accuracy.json").write_text(json.dumps({name: 50.0 for name in bench}))
    return root


@pytest.fixture
def eval_dirs(tmp_path):
    T, F = True, False
    base = write_eval(tmp_path / "base", {
        "gsm8k": [(1, T), (2, T), (3, F), (4, F), (5, F), (6, T), (7, T)],
        "math": [("a", T), ("a", F), ("b", F), ("b", F), ("b", T), ("c", T)],
        "aime": [(1, F)],
    })
    trained = write_eval(tmp_path / "trained", {
        "gsm8k": [(1, T), (2, F), (3, T), (4, T), (5, F), (6, T), (8, T)],
        "math": [("a", F), ("a", F), ("b", T), ("b", T), ("b", F), ("c", T)],
    })
    return base, trained


def test_compare_learn_retain_numbers(eval_dirs, tmp_path, capsys):
    base, trained = eval_dirs
    out = tmp_path / "lr.json"
    assert run_compare(compare_args(base, trained, "--json", out)) == 0
    c = json.loads(out.read_text())
    g, m, p = (*c["benchmarks"], c["pooled"])
    assert [g["benchmark"], m["benchmark"]] == ["gsm8k", "math"]
    assert (g["n"], g["dropped_base_only"], g["dropped_trained_only"]) == (6, 1, 1)
    assert (g["learn"]["n"], g["retain"]["n"]) == (3, 3)
    assert g["learn"]["trained_accuracy"] == pytest.approx(2 / 3)
    assert g["retain"]["trained_accuracy"] == pytest.approx(2 / 3)
    assert (g["learn_gain"], g["retain_loss"], g["extra_solved"]) == (2, 1, 1)
    assert (g["base_accuracy"], g["trained_accuracy"], g["delta"]) == (
        pytest.approx(0.5), pytest.approx(4 / 6), pytest.approx(1 / 6))
    # math: a = [T, F] (mean .5, counts as solved -> Retain), b = 1/3 (Learn), c solved.
    assert (m["learn"]["n"], m["retain"]["n"]) == (1, 2)
    assert m["learn"]["base_accuracy"] == pytest.approx(1 / 3)
    assert m["learn"]["trained_accuracy"] == pytest.approx(2 / 3)
    assert m["retain"]["base_accuracy"] == pytest.approx(0.75)
    assert m["retain"]["trained_accuracy"] == pytest.approx(0.5)
    assert (m["learn_gain"], m["retain_loss"], m["extra_solved"]) == (1, 1, 0)
    assert m["base_accuracy"] == pytest.approx(11 / 18) and m["trained_accuracy"] == pytest.approx(5 / 9)
    assert (p["n"], p["learn"]["n"], p["retain"]["n"]) == (9, 4, 5)
    assert p["learn"]["trained_accuracy"] == pytest.approx(2 / 3)
    assert p["retain"]["trained_accuracy"] == pytest.approx(3 / 5)
    assert (p["learn_gain"], p["retain_loss"], p["extra_solved"]) == (3, 2, 1)
    assert (p["dropped_base_only"], p["dropped_trained_only"]) == (1, 1)
    assert c["only_in_base"] == ["aime"] and c["only_in_trained"] == []
    assert c["base_reported_accuracy"] == {"aime": 50.0, "gsm8k": 50.0, "math": 50.0}
    text = capsys.readouterr().out
    assert "pooled" in text and "gsm8k" in text and "aime" in text


def test_compare_errors_are_clear(tmp_path, capsys):
    base = write_eval(tmp_path / "base", {"gsm8k": [(1, True)]})
    assert run_compare(compare_args(base, tmp_path / "nope")) == 2
    assert "raw" in capsys.readouterr().err
    bad = tmp_path / "bad"
    (bad / "raw").mkdir(parents=True)
    (bad / "raw" / "gsm8k.jsonl").write_text('{"id": 1, "correct": "yes"}\n')
    assert run_compare(compare_args(base, bad)) == 2
    err = capsys.readouterr().err
    assert "gsm8k.jsonl:1" in err and "Traceback" not in err


def test_learn_retain_without_common_ids():
    r = learn_retain("x", {"1": 1.0}, {"2": 0.0})
    assert (r.n, r.base_accuracy, r.delta, r.learn.trained_accuracy) == (0, None, None, None)
    assert (r.dropped_base_only, r.dropped_trained_only) == (1, 1)


# ------------------------------------------------------------------ pure statistics


def test_pearson_and_constant_series():
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert pearson([0.1, 0.1, 0.1], [0, 1, 0]) is None
    assert pearson([1.0], [1.0]) is None
    # x = 0,1,2,3 ; y = 0,0,1,1 -> r = 2 / sqrt(5 * 1) = 0.894...
    assert pearson([0, 1, 2, 3], [0, 0, 1, 1]) == pytest.approx(2 / math.sqrt(5))


def test_top_share_resolves_ties_by_expectation():
    # 8 items, top quarter = 2; one strictly-above positive, then 1 slot among 4 tied with 1 positive.
    scores = [5, 3, 3, 3, 3, 1, 1, 1]
    positive = [True, True, False, False, False, True, True, True]
    t = top_share(scores, positive)
    assert t is not None and t.k == 2 and t.share == pytest.approx((1 + 1 / 4) / 2)
    assert top_share([], []) is None


def test_orderings_buckets_and_moving_average():
    assert sorted(["L10", "L2", "L1"], key=natural_key) == ["L1", "L2", "L10"]
    nat = difficulty_order(["L10", "L2", "L1", "L2"])
    assert nat.method == "natural" and nat.ranks == {"L1": 0, "L2": 1, "L10": 2}
    voc = difficulty_order(["Hard", "easy", "very hard", "Medium-hard", "weird"])
    assert voc.method == "vocabulary" and voc.unranked == ["weird"]
    assert voc.ranks["easy"] < voc.ranks["Medium-hard"] < voc.ranks["Hard"] < voc.ranks["very hard"]
    assert step_buckets(0, 9, 5) == [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9)]
    assert step_buckets(3, 5, 5) == [(3, 3), (4, 4), (5, 5)]
    assert step_buckets(0, 6, 3) == [(0, 1), (2, 3), (4, 6)]
    assert moving_average([1, 2, 3, 4], 3) == pytest.approx([1, 1.5, 2, 3])
    h = success_histogram([i / 100 for i in range(101)])  # 101 distinct values -> 10 bins
    assert h.counts == [10] * 9 + [11] and h.labels[-1] == "[0.9,1]"


def test_other_outcome_when_rewards_tie_despite_mixed_correctness():
    row = TaskRow(task_id=1, step=0, valid=True, gradient_bearing=False, quality=1, reliability=1, novelty=None,
                  success_rate=0.5, synth_total=None, difficulty=None)
    assert row.outcome == "other" and row.teachability == 1.0
