"""Episodes and gold trajectories in `synco analyze`: hand-written metrics.jsonl lines, numbers computed by hand."""

import argparse
import base64
import contextlib
import io
import json
from pathlib import Path

import pytest

from synco.analysis import configure_analyze, load_run, run_analyze
from synco.analysis.run import RunAnalysis
from synco.analysis.rundata import MetricsLine, RunData
from synco.analysis.trajectory import finish_totals, trajectory_analysis
from synco.core.pool import TaskPool

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# step: (mean_turns, finishes, interaction coverage, trajectory diversity, contrastive support, distinct sequences)
TOOLS = {
    0: (2.0, {"done": 6, "max_turns": 2}, 0.1, 0.2, 0.0, 3),
    1: (3.0, {"max_turns": 1, "done": 7}, 0.2, 0.4, 0.5, 5),
    2: (None, None, 0.0, 0.0, 0.0, 5),  # no valid task: no episode, empty gold metrics, the count carries over
    3: (4.0, {"token_budget": 3, "done": 5}, 0.3, 0.6, 0.25, 8),
}
KEYS = ("mean_turns", "finishes", "interaction_coverage", "trajectory_diversity", "contrastive_support",
        "distinct_action_sequences")


def tools_line(step: int) -> dict:
    """A metrics.jsonl line as the tools world writes it (keys left out while None, as StepStats does)."""
    line = {"step": step, "mode": "cotrain", "reasoner_reward": 0.5, "synth_reward": 0.1, "n_cards": 4}
    return line | {k: v for k, v in zip(KEYS, TOOLS[step]) if v is not None}


def arith_line(step: int) -> dict:
    return {"step": step, "mode": "cotrain", "reasoner_reward": 0.5, "synth_reward": 0.1, "n_cards": 4}


def build_run(run: Path, line=tools_line) -> Path:
    """A run directory with an empty pool and four metrics lines."""
    run.mkdir(parents=True)
    TaskPool(run / "pool.sqlite").close()
    (run / "metrics.jsonl").write_text("".join(json.dumps(line(s)) + "\n" for s in TOOLS))
    return run


def analyze_args(*argv):
    p = argparse.ArgumentParser()
    configure_analyze(p)
    return p.parse_args([str(a) for a in argv])


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    run = build_run(tmp_path_factory.mktemp("runs") / "tools")
    out = run / "analysis"
    return run, out


@pytest.fixture(scope="module")
def printed(analysed) -> str:
    """What `synco analyze RUN` prints (capsys is function-scoped, so stdout is redirected here)."""
    run, _ = analysed
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert run_analyze(analyze_args(run)) == 0
    return buf.getvalue()


@pytest.fixture(scope="module")
def summary(analysed, printed):
    _, out = analysed
    return json.loads((out / "summary.json").read_text())["trajectory"]


def test_metrics_keys_are_read_and_absent_ones_are_none(analysed):
    run, _ = analysed
    m = load_run(run).metrics
    assert (m[1].mean_turns, m[1].finishes, m[1].interaction_coverage, m[1].trajectory_diversity,
            m[1].contrastive_support, m[1].distinct_action_sequences) == TOOLS[1]
    assert m[2].mean_turns is None and m[2].finishes is None and m[2].has_trajectory
    assert not MetricsLine(step=0, reasoner_reward=0.5).has_trajectory


def test_summary_numbers(summary):
    assert summary["steps"] == [0, 1, 2, 3]
    # 4 steps: the first / last 10 % are one step each
    cov = summary["interaction_coverage"]
    assert cov["values"] == [0.1, 0.2, 0.0, 0.3]
    assert (cov["first"], cov["last"], cov["mean"]) == (pytest.approx(0.1), pytest.approx(0.3), pytest.approx(0.15))
    div = summary["trajectory_diversity"]
    assert (div["first"], div["last"], div["mean"]) == (pytest.approx(0.2), pytest.approx(0.6), pytest.approx(0.3))
    con = summary["contrastive_support"]
    assert (con["first"], con["last"], con["mean"]) == (0.0, pytest.approx(0.25), pytest.approx(0.1875))
    turns = summary["mean_turns"]  # step 2 had no episode: left out of the mean, (2 + 3 + 4) / 3
    assert turns["values"] == [2.0, 3.0, None, 4.0]
    assert (turns["first"], turns["last"], turns["mean"]) == (2.0, 4.0, pytest.approx(3.0))
    assert summary["distinct_action_sequences"] == [3, 5, 5, 8]
    assert summary["distinct_action_sequences_final"] == 8
    # 6 + 7 + 5 done, 2 + 1 max_turns, 3 token_budget = 24 episodes, in the Finish order
    assert summary["n_episodes"] == 24
    assert list(summary["finishes"].items()) == [("done", 18), ("max_turns", 3), ("token_budget", 3)]
    assert summary["finish_shares"] == {"done": 0.75, "max_turns": 0.125, "token_budget": 0.125}


def test_windows_are_a_tenth_of_the_steps_that_recorded_trajectories():
    # 20 steps with trajectories (windows of 2) and two single-turn lines that are not counted;
    # coverage = step / 20 except step 1, which did not record it
    rows = [MetricsLine(step=s, interaction_coverage=None if s == 1 else s / 20, distinct_action_sequences=s)
            for s in range(20)]
    rows = [MetricsLine(step=-1), *rows, MetricsLine(step=20)]
    t = trajectory_analysis(RunData(path=Path("."), label="x", tasks=[], steps=[], metrics=rows))
    assert t is not None and t.steps == list(range(20))
    assert t.interaction_coverage.first == 0.0  # steps 0 and 1; step 1 has no value
    assert t.interaction_coverage.last == pytest.approx((18 + 19) / 40)
    assert t.interaction_coverage.mean == pytest.approx((190 - 1) / 20 / 19)
    assert t.trajectory_diversity.first is None and t.trajectory_diversity.values == [None] * 20
    assert t.distinct_action_sequences_final == 19
    assert t.n_episodes == 0 and t.finishes == {} and t.finish_shares == {}


def test_finish_totals_keep_the_finish_order_then_unknown_names_sorted():
    rows = [MetricsLine(step=0, finishes={"zeta": 1, "token_budget": 2}),
            MetricsLine(step=1, finishes={"alpha": 1, "done": 3, "token_budget": 1}), MetricsLine(step=2)]
    assert list(finish_totals(rows).items()) == [("done", 3), ("token_budget", 3), ("alpha", 1), ("zeta", 1)]


def test_report_has_a_trajectory_section_with_the_plot_and_tables(summary, analysed):
    _, out = analysed
    png = (out / "trajectory.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 1000
    html = (out / "report.html").read_text()
    section = html[html.index("<h2>Episodes and trajectories</h2>"):]
    assert base64.b64encode(png).decode() in section and 'href="trajectory.png"' in section
    for cell in ("<td>interaction coverage</td><td>0.100</td><td>0.300</td><td>0.150</td><td>4</td>",
                 "<td>contrastive support</td><td>0.000</td><td>0.250</td><td>0.188</td><td>4</td>",
                 "<td>turns per episode</td><td>2.000</td><td>4.000</td><td>3.000</td><td>3</td>",
                 "<th>finish: done</th><th>finish: max_turns</th><th>finish: token_budget</th>",
                 "<td>8</td><td>24</td><td>75.0% (18)</td><td>12.5% (3)</td><td>12.5% (3)</td>"):
        assert cell in section, cell


def test_text_summary_has_the_trajectory_line(printed):
    line = next(ln for ln in printed.splitlines() if "trajectories:" in ln)
    for part in ("tools trajectories:", "interaction coverage 0.10 -> 0.30", "diversity 0.20 -> 0.60",
                 "contrastive support 0.00 -> 0.25", "8 distinct action sequences", "turns per episode 3.00",
                 "24 episodes (finish: done 75.0%, max_turns 12.5%, token_budget 12.5%)"):
        assert part in line, part


def test_single_turn_run_has_no_trajectory_key_plot_or_section(tmp_path, capsys):
    run = build_run(tmp_path / "arith", line=arith_line)
    assert run_analyze(analyze_args(run)) == 0
    out = run / "analysis"
    summary = json.loads((out / "summary.json").read_text())
    assert "trajectory" not in summary
    assert set(summary) == set(RunAnalysis.model_fields) - {"trajectory", "heldout_by_family"}  # both absent here
    assert not (out / "trajectory.png").exists()
    assert "Episodes and trajectories" not in (out / "report.html").read_text()
    assert "trajectories:" not in capsys.readouterr().out
    # the record still round-trips: the field defaults to None
    assert RunAnalysis.model_validate(summary).trajectory is None


def test_overlay_draws_trajectories_when_one_run_has_them(tmp_path, capsys):
    a, b = build_run(tmp_path / "tools"), build_run(tmp_path / "arith", line=arith_line)
    out = tmp_path / "cmp"
    assert run_analyze(analyze_args(a, b, "--out", out)) == 0
    png = (out / "trajectory.png").read_bytes()
    html = (out / "report.html").read_text()
    assert png.startswith(PNG_MAGIC) and base64.b64encode(png).decode() in html
    assert html.count("<h3>Episodes and trajectories</h3>") == 1  # the tables of the run that has them only
    runs = json.loads((out / "summary.json").read_text())["runs"]
    assert runs["tools"]["trajectory"]["distinct_action_sequences_final"] == 8 and "trajectory" not in runs["arith"]
    assert sum("trajectories:" in ln for ln in capsys.readouterr().out.splitlines()) == 1

    only_arith = tmp_path / "cmp2"
    assert run_analyze(analyze_args(b, build_run(tmp_path / "arith2", line=arith_line), "--out", only_arith)) == 0
    assert not (only_arith / "trajectory.png").exists()
