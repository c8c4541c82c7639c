"""The evaluation core on a scripted fake policy: accuracy, checks, resume, n samples; the HF eval generator."""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path

import pytest

from synco.grading.checker import AnswerChecker
from synco.grading.grade import Graded, grade
from synco.grading.benchmarks import BenchmarkItem
from synco.eval.evaluation import (
    ACCURACY_FILE,
    CHECKS_FILE,
    METRICS_FILE,
    EvalError,
    EvalSettings,
    ProtocolOverride,
    chat_prompt,
    configure_eval,
    evaluate,
    format_summary,
    load_eval_benchmarks,
    load_hf_policy,
    raw_path,
    read_raw_records,
    run_eval,
    settings_from_args,
    template_reads_thinking,
)
from synco.core.sampling import Completion, SamplingParams
from synco.learn.hf_policy import HFGenerator

TOY = [  # id, question, reference
    ("a", "What is 2+2?", "4"),
    ("b", "What is 3+3?", "6"),
    ("c", "What is 3+4?", "7"),
    ("d", "What is 5+5?", "10"),
    ("e", "What is one half as a decimal?", "0.5"),
]
TOY2 = [("p", "What is 1+0?", "1"), ("q", "What is 9-1?", "8")]

# question -> (completion text, finish reason); a: right, b: wrong, c: right without a box,
# d: cut off before any answer, e: right in another form; p: right, q: wrong.
SCRIPT: dict[str, tuple[str, str]] = {
    "What is 2+2?": (r"2+2 is \boxed{4}.", "stop"),
    "What is 3+3?": (r"It is \boxed{5}.", "stop"),
    "What is 3+4?": ("Adding.\nFinal answer: 7", "stop"),
    "What is 5+5?": ("Let me think about five plus", "length"),
    "What is one half as a decimal?": (r"\boxed{\frac{1}{2}}", "stop"),
    "What is 1+0?": (r"\boxed{1}", "stop"),
    "What is 9-1?": (r"\boxed{9}", "stop"),
}


def items(rows: Sequence[tuple[str, str, str]], bench: str) -> list[BenchmarkItem]:
    return [BenchmarkItem(id=i, question=q, answer=a, benchmark=bench) for i, q, a in rows]


def question_of(prompt: str) -> str:
    """The problem inside a FakePolicy prompt (the Reasoner template puts it first)."""
    user = prompt.split("<user>", 1)[1]
    return user.split("\n\n", 1)[0]


class FakePolicy:
    """Answers each question from a script; the k-th time a question is asked it gives answer k (cycling).

    ``fail_after`` makes the generate call after that many calls raise, like a killed process.
    """

    policy_version = 0

    def __init__(self, script: dict[str, list[tuple[str, str]]], fail_after: int | None = None) -> None:
        self.script = script
        self.fail_after = fail_after
        self.calls = 0
        self.asked: list[str] = []
        self.seeds: list[int] = []
        self._count: dict[str, int] = {}

    def set_seed(self, seed: int) -> None:
        self.seeds.append(seed)

    def format_prompt(self, user_text: str, system: str | None = None) -> str:
        return f"<sys>{system}</sys><user>{user_text}"

    def generate(self, prompts: Sequence[str], n: int, params: SamplingParams | None = None) -> list[list[Completion]]:
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise KeyboardInterrupt("killed")
        self.calls += 1
        out = []
        for prompt in prompts:
            q = question_of(prompt)
            group = []
            for _ in range(n):
                k = self._count.get(q, 0)
                self._count[q] = k + 1
                text, reason = self.script[q][k % len(self.script[q])]
                self.asked.append(q)
                ids = list(range(len(text.split())))  # one "token" per word
                group.append(Completion(text=text, prompt_ids=[1], completion_ids=ids, logprobs=[0.0] * len(ids),
                                        truncated=reason == "length", finish_reason=reason))  # type: ignore[arg-type]
            out.append(group)
        return out


def fixed_script() -> dict[str, list[tuple[str, str]]]:
    return {q: [v] for q, v in SCRIPT.items()}


@pytest.fixture(scope="module")
def checker() -> AnswerChecker:
    return AnswerChecker(use_math_verify=False)


def settings(**kw: object) -> EvalSettings:
    base: dict[str, object] = {"model": "fake", "batch_size": 2}
    base.update(kw)
    return EvalSettings(**base)  # type: ignore[arg-type]


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def numbers(accuracy: dict) -> dict:
    """accuracy.json without its ``stderr`` entry."""
    return {k: v for k, v in accuracy.items() if k != "stderr"}


def test_accuracy_and_checks_match_the_script(tmp_path: Path, checker: AnswerChecker) -> None:
    benches = {"toy": items(TOY, "toy"), "toy2": items(TOY2, "toy2")}
    summary = evaluate(FakePolicy(fixed_script()), benches, tmp_path, settings(), checker, progress=False)

    # toy: a, c, e right of 5 -> 60 %; toy2: p right of 2 -> 50 %; average of the two = 55 %
    # standard errors (sample sd over problems / sqrt(problems)): toy sqrt(0.3 / 5) = 24.49 points,
    # toy2 sqrt(0.5 / 2) = 50 points, the average sqrt(24.49^2 + 50^2) / 2 = sqrt(3100) / 2 = 27.84
    acc = read_json(tmp_path / ACCURACY_FILE)
    se = acc.pop("stderr")
    assert acc == {"toy": 60.0, "toy2": 50.0, "average": 55.0}
    assert se == pytest.approx({"toy": 100 * math.sqrt(0.06), "toy2": 50.0, "average": math.sqrt(3100) / 2})
    assert summary.accuracy == {"toy": 60.0, "toy2": 50.0, "average": 55.0}
    assert summary.stderr == pytest.approx(se)
    metrics = read_json(tmp_path / METRICS_FILE)
    assert metrics["toy"] == {"problems": 5, "samples": 1, "avg_at_k": {"value": 60.0, "stderr": pytest.approx(24.494897)},
                              "pass_at_k": {"1": {"value": 60.0, "stderr": pytest.approx(24.494897)}}}
    checks = read_json(tmp_path / CHECKS_FILE)
    # c answers on a "Final answer:" line and d has no answer at all: 2 without a box, 1 without any
    assert checks["toy"] == {"n": 5, "n_expected": 5, "complete": True, "missing_box": 2, "no_answer": 1, "truncated": 1}
    assert checks["toy2"] == {"n": 2, "n_expected": 2, "complete": True, "missing_box": 0, "no_answer": 0, "truncated": 0}

    recs = {r.id: r for r in read_raw_records(raw_path(tmp_path, "toy"))}
    assert [r.id for r in read_raw_records(raw_path(tmp_path, "toy"))] == ["a", "b", "c", "d", "e"]
    assert (recs["a"].answer, recs["a"].method, recs["a"].correct) == ("4", "boxed", True)
    assert (recs["b"].answer, recs["b"].correct) == ("5", False)
    assert (recs["c"].answer, recs["c"].method, recs["c"].correct) == ("7", "final_answer_line", True)
    assert (recs["d"].answer, recs["d"].method, recs["d"].finish_reason) == (None, "none", "length")
    assert recs["e"].correct and recs["e"].reference == "0.5"
    assert recs["a"].n_tokens == 3 and recs["a"].sample == 0
    # the prompt went through the Reasoner template and the policy's format_prompt (empty system prompt)
    assert recs["a"].prompt.startswith("<sys></sys><user>What is 2+2?\n\n") and r"\boxed{}" in recs["a"].prompt


def test_raw_files_are_what_synco_compare_reads(tmp_path: Path, checker: AnswerChecker) -> None:
    from synco.analysis.compare import read_eval_dir

    evaluate(FakePolicy(fixed_script()), {"toy": items(TOY, "toy")}, tmp_path, settings(), checker, progress=False)
    res = read_eval_dir(tmp_path)
    assert res.benchmarks == {"toy": {"a": 1.0, "b": 0.0, "c": 1.0, "d": 0.0, "e": 1.0}}
    assert res.reported_accuracy == {"toy": 60.0, "average": 60.0}


def test_resume_after_interruption_equals_an_uninterrupted_run(tmp_path: Path, checker: AnswerChecker) -> None:
    benches = {"toy": items(TOY, "toy"), "toy2": items(TOY2, "toy2")}
    whole = tmp_path / "whole"
    evaluate(FakePolicy(fixed_script()), benches, whole, settings(n=2), checker, progress=False)

    cut = tmp_path / "cut"
    first = FakePolicy(fixed_script(), fail_after=3)  # 3 batches of 2 = 6 of toy's 10 samples
    with pytest.raises(KeyboardInterrupt):
        evaluate(first, benches, cut, settings(n=2), checker, progress=False)
    assert len(read_raw_records(raw_path(cut, "toy"))) == 6
    assert read_json(cut / ACCURACY_FILE) == {"toy": None, "toy2": None, "average": None,
                                              "stderr": {"toy": None, "toy2": None, "average": None}}
    assert read_json(cut / METRICS_FILE) == {"toy": None, "toy2": None}
    assert read_json(cut / CHECKS_FILE)["toy"]["n"] == 6
    with raw_path(cut, "toy").open("a", encoding="utf-8") as fh:
        fh.write('{"id": "d", "sample": 0, "prom')  # a line cut off mid-write

    second = FakePolicy(fixed_script())
    evaluate(second, benches, cut, settings(n=2), checker, progress=False)
    # only the 4 missing toy samples and toy2's 4 were generated again
    assert second.asked == ["What is 5+5?"] * 2 + ["What is one half as a decimal?"] * 2 + ["What is 1+0?"] * 2 + ["What is 9-1?"] * 2
    for bench in benches:
        assert raw_path(cut, bench).read_text(encoding="utf-8") == raw_path(whole, bench).read_text(encoding="utf-8")
    assert read_json(cut / ACCURACY_FILE) == read_json(whole / ACCURACY_FILE)
    assert numbers(read_json(whole / ACCURACY_FILE)) == {"toy": 60.0, "toy2": 50.0, "average": 55.0}
    assert read_json(cut / CHECKS_FILE) == read_json(whole / CHECKS_FILE)
    assert read_json(cut / METRICS_FILE) == read_json(whole / METRICS_FILE)


def test_batch_seeds_do_not_depend_on_interruption(tmp_path: Path, checker: AnswerChecker) -> None:
    benches = {"toy": items(TOY, "toy")}
    whole = FakePolicy(fixed_script())
    evaluate(whole, benches, tmp_path / "a", settings(), checker, progress=False)
    first, second = FakePolicy(fixed_script(), fail_after=1), FakePolicy(fixed_script())
    with pytest.raises(KeyboardInterrupt):
        evaluate(first, benches, tmp_path / "b", settings(), checker, progress=False)
    evaluate(second, benches, tmp_path / "b", settings(), checker, progress=False)
    assert len(whole.seeds) == 3 and len(set(whole.seeds)) == 3
    assert first.seeds[:1] + second.seeds == whole.seeds


def test_n_samples_are_averaged(tmp_path: Path, checker: AnswerChecker) -> None:
    right, wrong = (r"\boxed{4}", "stop"), (r"\boxed{3}", "stop")
    script = {"What is 2+2?": [right, wrong, right, right], "What is 3+3?": [wrong]}
    benches = {"toy": items(TOY[:2], "toy")}
    evaluate(FakePolicy(script), benches, tmp_path, settings(n=4, batch_size=3), checker, progress=False)
    # a: 3 of 4 samples right, b: 0 of 4 -> 3 / 8 = 37.5 %; per-problem means 0.75 and 0: SE = |0.75 - 0| / 2
    assert read_json(tmp_path / ACCURACY_FILE) == {"toy": 37.5, "average": 37.5, "stderr": {"toy": 37.5, "average": 37.5}}
    recs = read_raw_records(raw_path(tmp_path, "toy"))
    assert [(r.id, r.sample, r.correct) for r in recs] == [
        ("a", 0, True), ("a", 1, False), ("a", 2, True), ("a", 3, True),
        ("b", 0, False), ("b", 1, False), ("b", 2, False), ("b", 3, False),
    ]  # fmt: skip


def test_limit_and_a_later_larger_limit(tmp_path: Path, checker: AnswerChecker) -> None:
    benches = {"toy": items(TOY, "toy")}
    evaluate(FakePolicy(fixed_script()), benches, tmp_path, settings(limit=2), checker, progress=False)
    assert numbers(read_json(tmp_path / ACCURACY_FILE)) == {"toy": 50.0, "average": 50.0}  # a right, b wrong
    policy = FakePolicy(fixed_script())
    evaluate(policy, benches, tmp_path, settings(limit=4), checker, progress=False)
    assert policy.asked == ["What is 3+4?", "What is 5+5?"]  # a and b were kept
    assert numbers(read_json(tmp_path / ACCURACY_FILE)) == {"toy": 50.0, "average": 50.0}  # a, c of a..d


def test_resume_with_other_sampling_is_refused(tmp_path: Path, checker: AnswerChecker) -> None:
    benches = {"toy": items(TOY[:1], "toy")}
    evaluate(FakePolicy(fixed_script()), benches, tmp_path, settings(), checker, progress=False)
    with pytest.raises(EvalError, match="sampling of toy"):
        evaluate(FakePolicy(fixed_script()), benches, tmp_path, settings(temperature=1.0), checker, progress=False)
    with pytest.raises(EvalError, match="model"):
        evaluate(FakePolicy(fixed_script()), benches, tmp_path, settings(model="other"), checker, progress=False)
    # another benchmark with other settings is fine: they are recorded per benchmark
    evaluate(FakePolicy(fixed_script()), {"toy2": items(TOY2, "toy2")}, tmp_path, settings(max_tokens=10), checker,
             progress=False)
    acc = read_json(tmp_path / ACCURACY_FILE)
    assert numbers(acc) == {"toy": 100.0, "toy2": 50.0, "average": 75.0}
    # toy has one problem: no standard error; so none for the average either
    assert acc["stderr"] == {"toy": None, "toy2": 50.0, "average": None}


def test_per_benchmark_token_budgets() -> None:
    s = EvalSettings()
    p = s.protocol_for("gsm8k")
    assert (p.temperature, p.top_p, p.samples, s.seed) == (0.6, 0.95, 1, 0)
    assert [s.max_tokens_for(b) for b in ("svamp", "asdiv", "gsm8k", "math500", "aime24", "custom")] == [
        2048, 2048, 4096, 8192, 32768, 4096]
    assert EvalSettings(max_tokens=64).sampling_for("aime24").max_new_tokens == 64
    assert EvalSettings(greedy=True).sampling_for("gsm8k").greedy


def write_bench(root: Path, name: str, rows: Sequence[tuple[str, str, str]]) -> None:
    (root / name).mkdir(parents=True)
    lines = [json.dumps({"id": i, "question": q, "answer": a}) for i, q, a in rows]
    (root / name / "test.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_load_eval_benchmarks(tmp_path: Path) -> None:
    write_bench(tmp_path, "toy", TOY)
    write_bench(tmp_path, "gsm8k", TOY2)
    assert list(load_eval_benchmarks(tmp_path)) == ["gsm8k", "toy"]  # known benchmarks first
    assert [i.id for i in load_eval_benchmarks(tmp_path, ["toy"])["toy"]] == ["a", "b", "c", "d", "e"]
    with pytest.raises(EvalError, match="math500"):
        load_eval_benchmarks(tmp_path, ["math500"])
    with pytest.raises(EvalError, match="synco data"):
        load_eval_benchmarks(tmp_path / "missing")


def test_run_eval_reports_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = argparse.ArgumentParser()
    configure_eval(p)
    args = p.parse_args(["--model", "x", "--out", str(tmp_path / "o"), "--data-dir", str(tmp_path / "none")])
    assert run_eval(args) == 2
    assert "not found" in capsys.readouterr().err


# --------------------------------------------------------------------------- protocol, metrics, grading, thinking


def parse_eval_args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    configure_eval(p)
    return p.parse_args(["--model", "m", "--out", "o", *argv])


def test_protocol_table_defaults() -> None:
    s = EvalSettings()
    aime = s.protocol_for("aime24")
    assert (aime.samples, aime.temperature, aime.top_p, aime.max_tokens, aime.pass_k) == (16, 0.6, 0.95, 32768, (1, 4, 16))
    assert s.protocol_for("aime25") == aime
    assert s.protocol_for("minerva").rel_tol == 0.01 and s.protocol_for("math500").rel_tol == 0.0
    assert s.protocol_for("math500").boxed == "last"
    assert [s.protocol_for(b).samples for b in ("gsm8k", "svamp", "math500", "minerva", "custom")] == [1] * 5


def test_command_line_overrides_per_benchmark() -> None:
    args = parse_eval_args("--samples", "aime24=32", "--temperature", "0", "--temperature", "aime24=0.6",
                           "--max-tokens", "math500=100", "--rel-tol", "minerva=0", "--boxed", "math500=all",
                           "--pass-k", "aime24=1,8,32", "--thinking", "off")
    s = settings_from_args(args)
    aime24, aime25 = s.protocol_for("aime24"), s.protocol_for("aime25")
    assert (aime24.samples, aime24.temperature, aime24.pass_k) == (32, 0.6, (1, 8, 32))
    # greedy everywhere else; AIME 25's 16 samples from the table collapse to 1, as they would all be equal
    assert aime25.greedy and aime25.samples == 1 and s.protocol_for("gsm8k").greedy
    assert s.sampling_for("gsm8k").greedy and not s.sampling_for("aime24").greedy
    assert (s.protocol_for("math500").max_tokens, s.protocol_for("math500").boxed) == (100, "all")
    assert s.protocol_for("gsm8k").max_tokens == 4096 and s.protocol_for("minerva").rel_tol == 0.0
    assert s.thinking == "off"
    # --n is the old spelling of --samples; VALUE applies to all, NAME=VALUE wins over it whatever the order
    s = settings_from_args(parse_eval_args("--samples", "aime24=8", "--n", "3"))
    assert (s.protocol_for("aime24").samples, s.protocol_for("gsm8k").samples) == (8, 3)


@pytest.mark.parametrize("argv,flag", [
    (("--samples", "aime24=0"), "--samples"),
    (("--temperature", "hot"), "--temperature"),
    (("--pass-k", "aime24=0,2"), "--pass-k"),
    (("--boxed", "first"), "--boxed"),
    (("--rel-tol", "minerva=1.5"), "--rel-tol"),
])
def test_bad_override_names_the_flag(argv: tuple[str, ...], flag: str) -> None:
    with pytest.raises(EvalError, match=flag):
        settings_from_args(parse_eval_args(*argv))


def test_given_samples_with_greedy_decoding_is_refused() -> None:
    with pytest.raises(EvalError, match="greedy"):
        EvalSettings(n=4, greedy=True).protocol_for("gsm8k")


def test_avg_at_k_and_pass_at_k_hand_computed(tmp_path: Path, checker: AnswerChecker) -> None:
    right4, right7, wrong = (r"\boxed{4}", "stop"), (r"\boxed{7}", "stop"), (r"\boxed{0}", "stop")
    script = {"What is 2+2?": [right4, wrong, right4, wrong], "What is 3+3?": [wrong], "What is 3+4?": [right7]}
    benches = {"toy": items(TOY[:3], "toy")}
    summary = evaluate(FakePolicy(script), benches, tmp_path, settings(n=4, pass_k=(1, 2, 8)), checker, progress=False)
    # per-problem correct of 4: a 2, b 0, c 4. avg@4: means .5, 0, 1 -> 50 %, SE = sd(.5, 0, 1) / sqrt(3) = .5 / sqrt(3)
    # pass@2 per problem: a 1 - C(2,2)/C(4,2) = 5/6, b 0, c 1 -> 11/18; pass@8 needs 8 samples: left out
    m = read_json(tmp_path / METRICS_FILE)["toy"]
    assert (m["problems"], m["samples"]) == (3, 4)
    assert m["avg_at_k"] == {"value": pytest.approx(50.0), "stderr": pytest.approx(100 * 0.5 / math.sqrt(3))}
    assert set(m["pass_at_k"]) == {"1", "2"}
    assert m["pass_at_k"]["1"] == m["avg_at_k"]
    sd2 = math.sqrt(((5 / 6 - 11 / 18) ** 2 + (11 / 18) ** 2 + (7 / 18) ** 2) / 2)
    assert m["pass_at_k"]["2"] == {"value": pytest.approx(100 * 11 / 18), "stderr": pytest.approx(100 * sd2 / math.sqrt(3))}
    assert read_json(tmp_path / ACCURACY_FILE)["stderr"]["toy"] == pytest.approx(100 * 0.5 / math.sqrt(3))
    table = format_summary(summary)
    assert "50.00 ± 28.87" in table and "@2 61.11" in table


def test_each_benchmark_is_graded_with_its_options(tmp_path: Path, checker: AnswerChecker,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Each generation batch goes through the rollout seam and the one grading function once, with its benchmark's
    options."""
    calls: list[tuple[list[str], dict]] = []

    def recording_grade(chk: AnswerChecker, batch: Sequence[tuple[str, str]], **options: object) -> list[Graded]:
        calls.append(([ref for _, ref in batch], options))
        return grade(chk, batch, **options)  # type: ignore[arg-type]

    from synco.rollout import attempts

    monkeypatch.setattr(attempts, "grade", recording_grade)
    benches = {"minerva": items(TOY[:1], "minerva"), "math500": items(TOY[1:2], "math500"), "gsm8k": items(TOY[2:5], "gsm8k")}
    s = settings(per_benchmark={"math500": ProtocolOverride(boxed="all")})
    evaluate(FakePolicy(fixed_script()), benches, tmp_path, s, checker, progress=False)
    assert calls == [
        (["4"], {"mode": "eval", "boxed": "last", "rel_tol": 0.01}),  # minerva
        (["6"], {"mode": "eval", "boxed": "all", "rel_tol": 0.0}),  # math500, boxed=all as asked
        (["7", "10"], {"mode": "eval", "boxed": "last", "rel_tol": 0.0}),  # gsm8k: exact; a batch of 2 in one call
        (["0.5"], {"mode": "eval", "boxed": "last", "rel_tol": 0.0}),
    ]
    assert read_json(tmp_path / "eval_config.json")["grading"]["minerva"] == {"mode": "eval", "boxed": "last", "rel_tol": 0.01}
    assert [r.correct for r in read_raw_records(raw_path(tmp_path, "gsm8k"))] == [True, False, True]
    # records graded one way are never mixed with another grading
    with pytest.raises(EvalError, match="grading of minerva"):
        evaluate(FakePolicy(fixed_script()), benches, tmp_path, settings(rel_tol=0.05), checker, progress=False)


def test_minerva_tolerance_with_the_real_checker(tmp_path: Path, checker: AnswerChecker) -> None:
    rows = [("m1", "What is the electron charge?", "1.6e-19")]
    script = {"What is the electron charge?": [(r"\boxed{1.602 \times 10^{-19}}", "stop")]}
    evaluate(FakePolicy(script), {"minerva": items(rows, "minerva")}, tmp_path / "m", settings(), checker, progress=False)
    assert read_raw_records(raw_path(tmp_path / "m", "minerva"))[0].correct
    # the same answer against the same rounded reference is wrong where grading is exact
    evaluate(FakePolicy(script), {"other": items(rows, "other")}, tmp_path / "o", settings(), checker, progress=False)
    assert not read_raw_records(raw_path(tmp_path / "o", "other"))[0].correct


class TemplateTokenizer:
    """A tokenizer whose chat template may read enable_thinking; records the keywords it was applied with."""

    def __init__(self, reads_thinking: bool) -> None:
        self.chat_template = "{{ messages }}" + ("{% if enable_thinking %}think{% endif %}" if reads_thinking else "")
        self.kwargs: list[dict] = []

    def apply_chat_template(self, messages: list[dict], **kwargs: object) -> str:
        self.kwargs.append(dict(kwargs))
        return "|".join(m["content"] for m in messages)


@pytest.mark.parametrize("reads,mode,expected", [
    (True, "on", True), (True, "off", False), (True, "auto", None), (False, "on", None), (False, "off", None),
])
def test_thinking_reaches_templates_that_read_it(reads: bool, mode: str, expected: bool | None) -> None:
    tok = TemplateTokenizer(reads)
    assert template_reads_thinking(tok) is reads
    assert chat_prompt(tok, "q", "sys", mode) == "sys|q"  # type: ignore[arg-type]
    assert tok.kwargs[-1].get("enable_thinking", "unset") == ("unset" if expected is None else expected)


def test_thinking_is_part_of_the_resume_identity(tmp_path: Path, checker: AnswerChecker) -> None:
    benches = {"toy": items(TOY[:1], "toy")}
    evaluate(FakePolicy(fixed_script()), benches, tmp_path, settings(thinking="off"), checker, progress=False)
    assert read_json(tmp_path / "eval_config.json")["thinking"] == "off"
    with pytest.raises(EvalError, match="thinking"):
        evaluate(FakePolicy(fixed_script()), benches, tmp_path, settings(thinking="on"), checker, progress=False)


def test_reserved_benchmark_names_are_refused(tmp_path: Path, checker: AnswerChecker) -> None:
    with pytest.raises(EvalError, match="stderr"):
        evaluate(FakePolicy(fixed_script()), {"stderr": items(TOY[:1], "stderr")}, tmp_path, settings(), checker,
                 progress=False)


def test_settings_for_a_benchmark_not_run_are_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_bench(tmp_path / "data", "toy", TOY[:1])
    p = argparse.ArgumentParser()
    configure_eval(p)
    args = p.parse_args(["--model", "x", "--out", str(tmp_path / "o"), "--data-dir", str(tmp_path / "data"),
                         "--samples", "aime42=3"])
    assert run_eval(args) == 2
    assert "aime42" in capsys.readouterr().err


def test_help_documents_the_protocol() -> None:
    p = argparse.ArgumentParser()
    configure_eval(p)
    text = p.format_help()
    for needle in ("--samples", "aime24=32", "--thinking", "--pass-k", "--rel-tol", "avg@16", "32768"):
        assert needle in text


# --------------------------------------------------------------------------- the HF backend on a tiny model


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from synco.learn.charlm import char_tokenizer, tiny_llama

    path = tmp_path_factory.mktemp("tiny")
    tok = char_tokenizer()
    tiny_llama(tok, seed=0, hidden_size=32, num_layers=2, max_positions=40).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_eval_generator_keeps_no_logprobs_and_matches_the_training_generator_when_greedy(tiny_model_dir: Path) -> None:
    policy = load_hf_policy(str(tiny_model_dir), device="cpu", batch_size=2)
    gen = policy.generator  # type: ignore[attr-defined]
    assert isinstance(gen, HFGenerator) and not gen.keep_logprobs and gen.max_positions == 40
    prompts = ["1+1=", "22+3=", "7*8="]
    params = SamplingParams(greedy=True, max_new_tokens=6)
    ours = policy.generate(prompts, 1, params)
    ref_gen = HFGenerator(policy.model, policy.tokenizer, policy.eos_ids, policy.pad_id, batch_size=2)  # type: ignore[attr-defined]
    theirs = ref_gen.generate([policy.encode_prompt(p) for p in prompts], 1, params)  # type: ignore[attr-defined]
    assert [c[0].completion_ids for c in ours] == [c[0].completion_ids for c in theirs]
    assert [c[0].finish_reason for c in ours] == [c[0].finish_reason for c in theirs]
    assert all(c[0].logprobs == [] for c in ours)
    # the 40-position context caps the budget: a 30-character prompt (+BOS) leaves 9 new tokens
    long = policy.generate(["x" * 30], 1, SamplingParams(greedy=True, max_new_tokens=64))[0][0]
    assert len(long.completion_ids) <= 9
    assert long.finish_reason == ("stop" if long.completion_ids[-1:] == [policy.eos_ids[0]] else "length")  # type: ignore[attr-defined]


def test_synco_eval_command_end_to_end(tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, out = tmp_path / "data", tmp_path / "out"
    write_bench(data, "toy", TOY[:3])
    p = argparse.ArgumentParser()
    configure_eval(p)
    argv = ["--model", str(tiny_model_dir), "--data-dir", str(data), "--out", str(out), "--greedy", "--max-tokens", "3",
            "--device", "cpu", "--batch-size", "2", "--no-progress"]
    assert run_eval(p.parse_args(argv)) == 0
    printed = capsys.readouterr().out
    assert "toy" in printed and "3/3" in printed
    recs = read_raw_records(raw_path(out, "toy"))
    assert [r.id for r in recs] == ["a", "b", "c"] and all(r.n_tokens <= 3 for r in recs)
    acc = read_json(out / ACCURACY_FILE)
    assert set(acc) == {"toy", "average", "stderr"} and acc["toy"] == acc["average"]
    # run again: everything is there, nothing is generated, the files stay the same
    before = raw_path(out, "toy").read_text(encoding="utf-8")
    assert run_eval(p.parse_args(argv)) == 0
    assert raw_path(out, "toy").read_text(encoding="utf-8") == before
    # other settings into the same folder are refused before any model is loaded
    assert run_eval(p.parse_args([*argv, "--max-tokens", "5"])) == 2  # the last --max-tokens wins
    assert "different settings" in capsys.readouterr().err


def test_hf_policy_passes_thinking_to_a_template_that_reads_it(tiny_model_dir: Path, tmp_path: Path) -> None:
    import shutil

    from transformers import AutoTokenizer

    path = tmp_path / "qwen3-like"
    shutil.copytree(tiny_model_dir, path)
    tok = AutoTokenizer.from_pretrained(path)
    tok.chat_template = ("{% for m in messages %}{{ m['content'] }}{% endfor %}"
                         "{% if enable_thinking is defined and not enable_thinking %}/nothink{% endif %}")
    tok.save_pretrained(path)
    prompts = {mode: load_hf_policy(str(path), device="cpu", thinking=mode).format_prompt("1+1=", system="")  # type: ignore[arg-type]
               for mode in ("off", "on", "auto")}
    assert prompts == {"off": "1+1=/nothink", "on": "1+1=", "auto": "1+1="}


def test_settings_recorded_by_an_eval_that_sampled_nothing_do_not_refuse_the_next(tmp_path: Path) -> None:
    """An eval that stopped before its model loaded left only eval_config.json: the next eval into that folder, with
    another model, starts (nothing would be mixed); once samples exist, other settings are refused."""
    from synco.eval.evaluation import check_resume

    check_resume(tmp_path, settings(model="gone"), ["toy"])  # what a failed start leaves behind
    check_resume(tmp_path, settings(model="mine"), ["toy"])
    assert read_json(tmp_path / "eval_config.json")["model"] == "mine"
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "toy.jsonl").write_text("{}\n")  # a sample now exists
    with pytest.raises(EvalError, match="model"):
        check_resume(tmp_path, settings(model="other"), ["toy"])
