"""Warm start of the arith world: data encoding, tiny deterministic runs, and what we ship."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest
import torch

import synco.learn.pretrain as pretrain
from synco.evosyn.space import factor_values, parse_cell_key
from synco.learn.pretrain import (
    ASSET_DIR,
    HELDOUT_SEED,
    PretrainMeta,
    TargetMix,
    boxed_int,
    card_stats,
    cell_catalog,
    cell_of_problem,
    control_stats,
    control_targets,
    encode_pairs,
    evaluate_reasoner,
    load_arith_warm_start,
    lr_at,
    measure_control,
    pretrain_arith,
    problem_in_cell,
    random_report,
    reasoner_pair,
    sample_cards,
    synthesizer_example,
    synthesizer_pair,
)
from synco.core.records import CARD_FIELDS
from synco.domains.arith import ARITH_FACTORS, ArithDomain, evaluate
from synco.learn.charlm import char_tokenizer

DOMAIN = ArithDomain()
TINY = dict(reasoner_steps=2, synthesizer_steps=2, reasoner_batch=4, synthesizer_batch=2, heldout_per_level=1,
            n_cards=1, num_threads=1, progress=False, parallel=False, control_per_target=1)
NO_EVAL = TINY | dict(heldout_per_level=0, n_cards=0, control_per_target=0)
THREADS_BEFORE: list[int] = []


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> pretrain.PretrainResult:
    torch.set_num_threads(2)
    THREADS_BEFORE.append(torch.get_num_threads())
    return pretrain_arith(tmp_path_factory.mktemp("warm") / "out", seed=3, **TINY)


# ----------------------------------------------------------------- data and schedule


def test_encode_pairs_puts_labels_on_completion_and_eos_only() -> None:
    tok = char_tokenizer()
    ids, mask, labels = encode_pairs(tok, [("ab", "c"), ("a", "bcd")])
    a, b, c, d = (tok.convert_tokens_to_ids(ch) for ch in "abcd")
    eos, pad = tok.eos_token_id, tok.pad_token_id
    assert ids.tolist() == [[a, b, c, eos, pad], [a, b, c, d, eos]]
    assert mask.tolist() == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    assert labels.tolist() == [[-100, -100, c, eos, -100], [-100, b, c, d, eos]]


def test_lr_schedule() -> None:
    assert lr_at(0, 100, 1e-3, 10) == pytest.approx(1e-4)
    assert lr_at(9, 100, 1e-3, 10) == pytest.approx(1e-3)
    assert lr_at(10, 100, 1e-3, 10) == pytest.approx(1e-3)
    assert lr_at(55, 100, 1e-3, 10) == pytest.approx(1e-3 * (0.1 + 0.45))  # cosine midpoint
    assert lr_at(100, 100, 1e-3, 10) == pytest.approx(1e-4)


def test_training_pairs_are_correct() -> None:
    rng = random.Random(0)
    weights = [1.0] + [0.0] * 10
    for _ in range(20):
        prompt, completion = reasoner_pair(DOMAIN, rng, weights)
        problem = prompt.removeprefix("Q:").removesuffix("\nA:")
        assert DOMAIN.level_of(problem) == "L1"
        assert completion == "\\boxed{" + str(evaluate(problem)) + "}"
    for _ in range(20):
        prompt, completion = synthesizer_pair(DOMAIN, rng)
        assert prompt.endswith("\nCARD:") and len(prompt) <= 110
        obj = json.loads(completion)
        assert str(evaluate(obj["problem"])) == obj["final_answer"]
        assert DOMAIN.level_of(obj["problem"]) == obj["difficulty_estimate"]
        assert not DOMAIN.is_heldout(obj["problem"])


def _target_of(prompt: str) -> str | None:
    """The ``DO:`` line of a Synthesizer prompt, or None."""
    lines = prompt.split("\n")
    return lines[-2].removeprefix("DO:") if len(lines) >= 3 and lines[-2].startswith("DO:") else None


def test_synthesizer_pairs_follow_their_target_cell() -> None:
    """Every card is a problem in the prompt's DO: cell; targets are mostly there, name the level and 0..2 more."""
    rng = random.Random(5)
    pairs = [synthesizer_pair(DOMAIN, rng) for _ in range(600)]
    extra_counts: Counter[int] = Counter()
    factors_seen: set[str] = set()
    for prompt, completion in pairs:
        assert prompt.endswith("\nCARD:") and len(prompt) <= 110, prompt
        problem = json.loads(completion)["problem"]
        key = _target_of(prompt)
        if key is None:
            continue
        cell = parse_cell_key(key)
        names = [n for n, _ in cell]
        assert names[0] == "level" and len(set(names)) == len(names)
        assert names == sorted(names, key=[d.name for d in ARITH_FACTORS].index)  # the world's factor order
        realised = factor_values(problem, ARITH_FACTORS)
        assert all(realised[n] == v for n, v in cell), (prompt, problem)
        extra_counts[len(cell) - 1] += 1
        factors_seen |= set(names)
    n_target = sum(extra_counts.values())
    assert 0.78 <= n_target / len(pairs) <= 0.92  # p_target = 0.85
    assert extra_counts[0] and extra_counts[1] and extra_counts[2]
    assert extra_counts[2] < extra_counts[1]  # two extra factors are the rare case
    assert factors_seen == {d.name for d in ARITH_FACTORS}


def test_uniform_cells_reach_rare_cells() -> None:
    """With every cell drawn uniformly, a cell that is rare under the natural distribution is trained often."""
    rng = random.Random(2)
    catalog = cell_catalog()
    mix = TargetMix(p_target=1.0, p_one=1.0, p_two=0.0, p_uniform=1.0)
    rare = (("level", "L1"), ("carries", "3+"))  # 999+1: under 1 % of L1 problems
    assert catalog.share[rare] < 0.02 and rare in catalog.cells[("level", "carries")]
    hits = 0
    for _ in range(400):
        cell, problem = synthesizer_example(DOMAIN, rng, catalog, mix)
        assert cell is not None and cell_of_problem(problem, [n for n, _ in cell]) == cell
        hits += cell == rare
    assert hits >= 2  # ~400 / 5 factors / 39 cells = 2 expected; natural sampling gives ~400 / 5 / 11 * 0.007 = 0.05


def test_cell_catalog_lists_feasible_cells_only() -> None:
    catalog = cell_catalog()
    assert catalog.candidates == ("carries", "answer_digits", "zeros", "lead", "ones")
    assert [c[0][1] for c in catalog.cells[("level",)]] == DOMAIN.levels
    assert all(catalog.share[c] == 1.0 for c in catalog.cells[("level",)])
    carries = catalog.cells[("level", "carries")]
    assert (("level", "L2"), ("carries", "3+")) not in carries  # 3d-1d borrows at most twice
    assert (("level", "L1"), ("answer_digits", "6")) not in catalog.cells[("level", "answer_digits")]
    assert len(catalog.cells[("level", "carries", "lead")]) > len(carries)
    for level in DOMAIN.levels:  # P(bucket | level) sums to at most 1 over the listed buckets
        assert sum(catalog.share[c] for c in carries if c[0][1] == level) <= 1.0 + 1e-9


def test_problem_in_cell_gives_up_on_an_infeasible_cell() -> None:
    rng = random.Random(0)
    assert problem_in_cell(DOMAIN, rng, (("level", "L2"), ("carries", "3+")), max_tries=50) is None
    problem = problem_in_cell(DOMAIN, rng, (("level", "L8"), ("carries", "0")), max_tries=2000)
    assert problem is not None and DOMAIN.factors(problem)["carries"] == "0"


def test_random_report_looks_like_a_compact_report() -> None:
    rng = random.Random(1)
    reports = [random_report(rng, DOMAIN.levels) for _ in range(200)]
    assert "" in reports and "no data" in reports
    for r in reports:
        assert len(r) <= 64 and "\n" not in r
        if r not in ("", "no data"):
            labels = [part.split(":")[0] for part in r.split("|")]
            assert set(labels) <= {"weak", "easy", "hard", "ok", "valid"} and "ok" in labels


def test_boxed_int() -> None:
    assert boxed_int("\\boxed{2082}") == "2082"
    assert boxed_int("x \\boxed{1} then \\boxed{-14}") == "-14"
    assert boxed_int("\\boxed{12a}") is None
    assert boxed_int("\\boxed{") is None
    assert boxed_int("2082") is None
    assert boxed_int("\\boxed{²}") is None and boxed_int("\\boxed{-}") is None


def test_card_stats_counts_hand_made_outputs() -> None:
    good = DOMAIN.format_card("347*6", "L8", "2082")
    held = DOMAIN.heldout(1, seed=0)[0]
    held_card = DOMAIN.format_card(held.problem, held.group, held.answer)
    off_family = DOMAIN.format_card("1+2", "L1", "3")
    missing = json.dumps({k: "x" for k in CARD_FIELDS[:-1]})
    stats = card_stats(DOMAIN, [good, good, held_card, off_family, missing, "{not json", "[]", ""])
    assert stats.n == 8
    assert stats.wellformed_rate == 4 / 8
    assert stats.valid_rate == 2 / 8  # the two copies of 347*6
    assert stats.distinct_rate == 3 / 8
    assert stats.level_counts["L8"] == 2 and sum(stats.level_counts.values()) == 2


def test_control_targets_are_the_designers_feasible_cells() -> None:
    targets = control_targets(DOMAIN)
    assert list(targets) == [d.name for d in ARITH_FACTORS]
    assert targets["level"] == [(("level", lv),) for lv in DOMAIN.levels]
    assert 35 <= len(targets["carries"]) <= 44 and {c[0][1] for c in targets["carries"]} == set(DOMAIN.levels)
    for name in ("answer_digits", "zeros", "lead", "ones"):
        assert targets[name] and all(len(c) == 2 and c[1][0] == name for c in targets[name])


def test_control_stats_scores_hand_made_outputs() -> None:
    catalog = cell_catalog()
    l8_0 = (("level", "L8"), ("carries", "0"))
    held = DOMAIN.heldout(1, seed=0)[0]
    texts = [
        DOMAIN.format_card("111*3", "L8", "333"),  # in the cell
        DOMAIN.format_card("347*6", "L8", "2082"),  # right level, carries 3+
        DOMAIN.format_card("36+47", "L3", "83"),  # wrong level
        DOMAIN.format_card(held.problem, held.group, held.answer),  # held out: not valid
        "{broken",
    ]
    stats = control_stats(DOMAIN, [l8_0] * len(texts), texts, catalog)
    assert (stats.n_targets, stats.n) == (1, 5)
    assert stats.wellformed_rate == 4 / 5 and stats.valid_rate == 3 / 5 and stats.distinct_rate == 4 / 5
    assert stats.hit_rate == pytest.approx(1 / 3) and stats.level_hit_rate == pytest.approx(2 / 3)
    assert stats.chance_given_level == catalog.share[l8_0] and stats.chance == pytest.approx(catalog.share[l8_0] / 11)
    with pytest.raises(ValueError, match="differ in length"):
        control_stats(DOMAIN, [l8_0], texts, catalog)


# ----------------------------------------------------------------- tiny runs


def test_tiny_run_saves_loadable_checkpoints_and_meta(tiny_run: pretrain.PretrainResult) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    for folder in (tiny_run.reasoner_dir, tiny_run.synthesizer_dir):
        model = AutoModelForCausalLM.from_pretrained(folder)
        tok = AutoTokenizer.from_pretrained(folder)
        assert tok.decode(tok("Q:347*6\nA:")["input_ids"]) == "Q:347*6\nA:"
        assert model.config.vocab_size == len(tok)
        assert sum(p.numel() for p in model.parameters()) < 3_000_000
    meta = PretrainMeta.model_validate_json((tiny_run.out_dir / "meta.json").read_text())
    assert meta == tiny_run.meta
    assert (meta.seed, meta.reasoner_steps, meta.synthesizer_steps, meta.num_threads) == (3, 2, 2, 1)
    assert set(meta.heldout_accuracy) == set(DOMAIN.levels)
    assert meta.n_cards == 1 and 0 <= meta.card_wellformed_rate <= 1
    assert meta.n_params_reasoner > 600_000 > meta.n_params_synthesizer > 100_000
    assert meta.seconds_total >= meta.seconds_reasoner
    assert meta.control_per_target == 1 and meta.synthesizer_targets == TargetMix()
    assert set(meta.control) == {f"{d.name}@t{t}" for d in ARITH_FACTORS for t in (0.7, 1.0)}
    assert meta.control["level@t0.7"].n == meta.control["level@t0.7"].n_targets == 11
    assert meta.control_level_t07 == round(meta.control["level@t0.7"].hit_rate, 4)
    assert meta.control_pair_t10 == round(meta.control["carries@t1.0"].hit_rate, 4)
    synth_tok = AutoTokenizer.from_pretrained(tiny_run.synthesizer_dir)
    prompt = DOMAIN.synthesizer_prompt("ok:0.4", target=(("level", "L8"), ("carries", "0")))
    toks = synth_tok.tokenize(prompt)  # the target's factor names are whole tokens
    assert toks[toks.index("DO:level="):][:5] == ["DO:level=", "L", "8", ",carries=", "0"]


def _weights(folder: Path, role: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(folder / role / "model.safetensors")


def test_same_seed_gives_identical_weights(tiny_run: pretrain.PretrainResult, tmp_path: Path) -> None:
    again = pretrain_arith(tmp_path / "again", seed=3, **NO_EVAL)  # evaluation does not touch the weights
    other = pretrain_arith(tmp_path / "other", seed=4, **NO_EVAL)
    for role in ("reasoner", "synthesizer"):
        first, second, third = (_weights(r.out_dir, role) for r in (tiny_run, again, other))
        assert first.keys() == second.keys()
        assert all(torch.equal(first[k], second[k]) for k in first)
        assert not all(torch.equal(first[k], third[k]) for k in first)


def test_synthesizer_settings_leave_the_reasoner_alone(tiny_run: pretrain.PretrainResult, tmp_path: Path) -> None:
    """The Reasoner's weights do not depend on how the Synthesizer is trained (separate seeds and data streams)."""
    other = pretrain_arith(tmp_path / "mix", seed=3, **(NO_EVAL | dict(
        synthesizer_targets=TargetMix(p_target=1.0, p_one=1.0), synthesizer_hidden=32)))
    first, second = _weights(tiny_run.out_dir, "reasoner"), _weights(other.out_dir, "reasoner")
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert other.meta.n_params_synthesizer < tiny_run.meta.n_params_synthesizer


def test_parallel_workers_give_the_same_weights(tiny_run: pretrain.PretrainResult, tmp_path: Path) -> None:
    par = pretrain_arith(tmp_path / "par", seed=3, **(NO_EVAL | {"parallel": True}))
    assert par.meta.parallel and not tiny_run.meta.parallel
    for role in ("reasoner", "synthesizer"):
        first, second = _weights(tiny_run.out_dir, role), _weights(par.out_dir, role)
        assert all(torch.equal(first[k], second[k]) for k in first)


def test_thread_count_is_restored(tiny_run: pretrain.PretrainResult) -> None:
    assert tiny_run.meta.num_threads == 1
    assert torch.get_num_threads() == THREADS_BEFORE[0] == 2


def test_warm_start_falls_back_to_a_complete_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(pretrain, "ASSET_DIR", tmp_path / "missing")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cached = tmp_path / "cache" / "synco" / "arith-0"
    for role in ("reasoner", "synthesizer"):
        (cached / role).mkdir(parents=True)
        (cached / role / "config.json").write_text("{}")
    assert load_arith_warm_start() == cached


# ----------------------------------------------------------------- the shipped warm start

shipped = pytest.mark.skipif(not (ASSET_DIR / "reasoner" / "config.json").is_file(), reason="no shipped warm start")


@shipped
def test_shipped_warm_start_is_the_default() -> None:
    assert load_arith_warm_start() == ASSET_DIR
    meta = PretrainMeta.model_validate_json((ASSET_DIR / "meta.json").read_text())
    assert meta.seed == 0


@shipped
def test_shipped_reasoner_is_partially_competent() -> None:
    """Easy levels solved, the hardest failed, and a partial band (0.2..0.8, with sampling slack) between."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(ASSET_DIR / "reasoner")
    tok = AutoTokenizer.from_pretrained(ASSET_DIR / "reasoner")
    acc = evaluate_reasoner(model, tok, DOMAIN, DOMAIN.heldout(30, seed=HELDOUT_SEED + 1))
    assert acc["L1"] >= 0.8 and acc["L2"] >= 0.7
    assert acc["L11"] <= 0.1
    partial = [lv for lv, a in acc.items() if 0.15 <= a <= 0.85]
    assert len(partial) >= 3, acc


@shipped
def test_shipped_synthesizer_writes_wellformed_diverse_cards() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(ASSET_DIR / "synthesizer")
    tok = AutoTokenizer.from_pretrained(ASSET_DIR / "synthesizer")
    torch.manual_seed(1)
    # at the arith preset's sampling temperature (0.7)
    stats = card_stats(DOMAIN, sample_cards(model, tok, DOMAIN, 64, temperature=0.7, report="weak:l8|ok:0.40"))
    assert stats.wellformed_rate >= 0.85, stats
    assert stats.distinct_rate >= 0.85, stats
    assert sum(n > 0 for n in stats.level_counts.values()) >= 8, stats  # spread over most levels
    assert max(stats.level_counts.values()) <= 24, stats  # no level takes more than 3/8


@shipped
def test_shipped_synthesizer_follows_target_cells() -> None:
    """Cards land in the DO: cell far above chance: the level nearly always, level x carries well above
    what following the level alone gives; and they stay valid and diverse."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(ASSET_DIR / "synthesizer")
    tok = AutoTokenizer.from_pretrained(ASSET_DIR / "synthesizer")
    targets = control_targets(DOMAIN)
    stats = measure_control(model, tok, DOMAIN, {"level": targets["level"], "carries": targets["carries"]},
                            temperature=0.7, per_target=3, seed=11)
    level, carries = stats["level"], stats["carries"]
    assert level.hit_rate >= 0.9 > 0.1 > level.chance, level
    assert carries.level_hit_rate >= 0.9, carries
    assert carries.hit_rate >= carries.chance_given_level + 0.12, carries
    for st in (level, carries):  # valid: the held-out 10 % bucket caps it at ~0.9
        assert st.valid_rate >= 0.75 and st.distinct_rate >= 0.9, st
    meta = PretrainMeta.model_validate_json((ASSET_DIR / "meta.json").read_text())
    assert meta.control_level_t07 is not None and meta.control_level_t07 >= 0.9
    assert meta.control_pair_t07 is not None and meta.control_pair_t07 > meta.control["carries@t0.7"].chance_given_level



_ORPHAN_PARENT = """
import multiprocessing, os, sys, time
from concurrent.futures import ProcessPoolExecutor
from synco.learn.pretrain import exit_with_parent

if __name__ == "__main__":
    pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                               initializer=exit_with_parent, initargs=(os.getpid(), 0.1))
    print(pool.submit(os.getpid).result(), flush=True)  # the worker is up and watching
    pool.submit(time.sleep, 120)
    time.sleep(120)
"""


def _running(pid: int) -> bool:
    """Alive and not a zombie (an exited orphan stays a zombie until init reaps it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_spawn_workers_exit_when_their_parent_is_killed(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "parent.py"
    script.write_text(_ORPHAN_PARENT)
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        worker = int(parent.stdout.readline())
        os.kill(parent.pid, signal.SIGKILL)  # no cleanup runs in the parent
        parent.wait(timeout=10)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if not _running(worker):
                return
            time.sleep(0.1)
        os.kill(worker, signal.SIGKILL)
        pytest.fail(f"worker {worker} still running 15 s after its parent was killed")
    finally:
        parent.kill()
