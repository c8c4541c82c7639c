"""The arith world's warm-start recipe: tiny deterministic runs, the cache, and what we ship."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import synco.run.pretrain.arith as pretrain
from synco.domains.arith import ARITH_FACTORS, ArithDomain
from synco.domains.arith_warm_start import HELDOUT_SEED, TargetMix, card_stats, control_targets
from synco.run.pretrain.arith import (
    ASSET_DIR,
    PretrainMeta,
    evaluate_reasoner,
    load_arith_warm_start,
    measure_control,
    pretrain_arith,
    sample_cards,
)

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
