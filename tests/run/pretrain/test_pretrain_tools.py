"""The tools world's warm-start recipe: deterministic agents, the shipped warm start, database variants, the CLI."""

from __future__ import annotations

from synco.domains.tools.domain import ToolsDomain


def test_the_warm_start_is_deterministic_in_its_seed(tmp_path) -> None:  # noqa: ANN001 - a path
    import torch
    from safetensors.torch import load_file

    from synco.learn.pretrain import train_saved
    from synco.run.pretrain.tools import role_spec

    for run in ("a", "b"):
        train_saved(role_spec("reasoner", 3, 3, 4, 1e-3, tmp_path / run, progress=False))
    a = load_file(str(tmp_path / "a" / "reasoner" / "model.safetensors"))
    b = load_file(str(tmp_path / "b" / "reasoner" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    train_saved(role_spec("reasoner", 4, 3, 4, 1e-3, tmp_path / "c", progress=False))
    c = load_file(str(tmp_path / "c" / "reasoner" / "model.safetensors"))
    assert not all(torch.equal(a[k], c[k]) for k in a)  # another seed, other weights


def test_the_shipped_warm_start_is_the_recorded_one() -> None:
    """The shipped tools agents load, and their meta records the recipe that made them."""
    import json

    from synco.run.pretrain.tools import ASSET_DIR, load_tools_warm_start

    assert load_tools_warm_start() == ASSET_DIR
    meta = json.loads((ASSET_DIR / "meta.json").read_text())
    assert meta["seed"] == 0 and meta["reasoner_steps"] == 400 and meta["synthesizer_steps"] == 1500
    assert set(meta["heldout_success"]) == {i.group for i in ToolsDomain().heldout(meta["heldout_per_group"], seed=0)}
    from synco.run.pretrain.tools import ToolsPretrainMeta

    assert ToolsPretrainMeta.model_validate(meta).db_variants == 0  # made on the fixed world (meta before the field)
    from synco.evosyn.config import ReflectorConfig

    # the shipped Synthesizer writes the family it is asked for, so a promoted `family` passes the run's control check
    assert meta["control"]["family"] >= ReflectorConfig().min_control and meta["control"]["pattern"] >= 0.9


def test_a_toy_warm_start_on_variants_records_them_in_meta(tmp_path, one_thread) -> None:  # noqa: ANN001 - fixtures
    """``pretrain_tools`` end to end at toy size (2 SFT steps per agent, 1 held-out task per group, 2 cards) with
    ``db_variants=4``: both agents saved, ``meta.json`` records the setting and held-out success on variants."""
    from synco.run.pretrain.tools import ToolsPretrainMeta, pretrain_tools

    meta = pretrain_tools(tmp_path, seed=0, reasoner_steps=2, synthesizer_steps=2, batch=2, heldout_per_group=1,
                          n_cards=2, parallel=False, progress=False, db_variants=4)
    saved = ToolsPretrainMeta.model_validate_json((tmp_path / "meta.json").read_text())
    assert saved == meta and saved.db_variants == 4 and saved.reasoner_steps == 2
    assert set(saved.heldout_success) == set(saved.heldout_success_on_variants or {}) == {
        i.group for i in ToolsDomain().heldout(1, seed=0)}
    assert (tmp_path / "reasoner" / "model.safetensors").exists() and (tmp_path / "synthesizer" / "config.json").exists()
    names = [d.name for d in ToolsDomain().factor_defs()]
    assert list(saved.control or {}) == names and all(0.0 <= v <= 1.0 for v in saved.control.values())


def test_the_cli_passes_the_tools_section_to_the_tools_warm_start(tmp_path, monkeypatch, capsys) -> None:  # noqa: ANN001
    """``synco pretrain --world tools tools.db_variants=N``: the world's own settings, validated by its model."""
    import synco.run.pretrain.tools as pretrain_tools_module
    from synco.cli import main

    calls = []
    monkeypatch.setattr(pretrain_tools_module, "pretrain_tools", lambda out, **kw: calls.append((out, kw)) or "meta")
    assert main(["pretrain", "--world", "tools", "tools.db_variants=16", "--out", str(tmp_path)]) == 0
    assert main(["pretrain", "--world", "tools", "--out", str(tmp_path)]) == 0
    assert [kw for _, kw in calls] == [{"seed": 0, "db_variants": 16}, {"seed": 0, "db_variants": 0}]
    assert main(["pretrain", "--world", "tools", "tools.db_variants=5000", "--out", str(tmp_path)]) == 2
    assert "tools.db_variants: Input should be less than or equal to 4096 (got 5000)" in capsys.readouterr().err
    assert main(["pretrain", "--world", "arith", "tools.db_variants=4", "--out", str(tmp_path)]) == 2
    assert "tools.db_variants: --world arith takes no settings" in capsys.readouterr().err
    assert len(calls) == 2 and not (tmp_path / "reasoner").exists()
