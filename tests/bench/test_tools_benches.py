"""bench/tools_cotrain.py and bench/tools_diagnosis.py: extra KEY=VALUE overrides reach every run and the scoring
around it (the database variants and a new warm start must be measurable without editing the scripts)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from synco.config import load_config
from synco.run.build import build_domain

_BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str):  # noqa: ANN202 - a module
    if str(_BENCH) not in sys.path:
        sys.path.insert(0, str(_BENCH))  # the benches import their sibling cotrain_modes
    spec = importlib.util.spec_from_file_location(f"{name}_bench", _BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


EXTRA = ["tools.db_variants=16", "reasoner.model_path=builtin:tools/synthesizer"]  # any model path the config accepts


def test_cotrain_bench_overrides_reach_every_arm_and_seed(tmp_path: Path) -> None:
    bench = _load("tools_cotrain")
    jobs = bench.arm_jobs(bench.ARMS, list(bench.ARMS), [1, 2], 5, tmp_path, 2, EXTRA)
    assert len(jobs) == len(bench.ARMS) * 2
    for arm, seed, overrides in jobs:
        cfg = load_config("tools", overrides=overrides)  # what _run and its held-out scoring (_per_item) load
        assert cfg.tools.db_variants == 16 and cfg.reasoner.model_path == "builtin:tools/synthesizer", arm
        assert cfg.seed == seed and cfg.steps == 5 and build_domain(cfg).settings.db_variants == 16
    frozen = next(o for arm, _, o in jobs if arm == "frozen")
    assert load_config("tools", overrides=frozen).mode == "frozen"  # the arm's own settings are kept


def test_diagnosis_overrides_choose_the_domain_and_the_reasoner() -> None:
    bench = _load("tools_diagnosis")
    cfg, domain, limits, greedy = bench.diagnosis_setup(EXTRA)
    assert domain.settings.db_variants == 16 and cfg.reasoner.model_path == "builtin:tools/synthesizer"
    assert (limits.max_turns, limits.max_tokens) == (8, 400) and greedy.greedy and greedy.max_new_tokens == 24
    _, plain, _, _ = bench.diagnosis_setup([])
    assert plain.settings.db_variants == 0  # the preset: the fixed database


def test_families_bench_reads_training_and_heldout_per_family(tmp_path: Path) -> None:
    """bench/tools_families.py: training success per family and quarter from the pool (family from the instruction,
    never the card's claim), held-out solved before -> after per family from the run's per-item records."""
    import json
    import sqlite3

    from synco.domains.tools import ToolsDomain
    from synco.run.setup import heldout_seed

    bench = _load("tools_families")
    con = sqlite3.connect(tmp_path / "pool.sqlite")
    con.execute("CREATE TABLE tasks (task_id INTEGER PRIMARY KEY, step INTEGER, card_json TEXT, payload_json TEXT, "
                "valid INTEGER)")
    con.execute("CREATE TABLE rollouts (task_id INTEGER, idx INTEGER, correct INTEGER)")
    card = lambda instruction, claim: (json.dumps({"difficulty_estimate": claim}),  # noqa: E731 - the header, the payload
                                       json.dumps({"instruction": instruction}))
    con.executemany("INSERT INTO tasks VALUES (?, ?, ?, ?, ?)", [
        (1, 0, *card("what does the lamp cost?", "gift"), 1),  # a lookup, whatever the card claims
        (2, 7, *card("what does the mug cost?", "lookup"), 1),
        (3, 7, *card("cancel bob's pending order", "cancel"), 0)])  # invalid: never counted
    con.executemany("INSERT INTO rollouts VALUES (?, ?, ?)", [(1, 0, 0), (1, 1, 1), (2, 0, 1), (2, 1, 1), (3, 0, 1)])
    con.commit()
    con.close()
    train = bench.training_by_quarter(tmp_path / "pool.sqlite", steps=8)
    assert set(train) == {"lookup"}
    assert [n for n, _ in train["lookup"]] == [2, 0, 0, 2] and train["lookup"][0][1] == 0.5 and train["lookup"][3][1] == 1.0

    items = ToolsDomain().heldout(1, seed=heldout_seed(3))
    before = {f"{i}:{it.group}": 0.0 for i, it in enumerate(items)}
    after = {**before, f"0:{items[0].group}": 1.0}
    (tmp_path / "heldout_before.json").write_text(json.dumps({"greedy_items": before}))
    # heldout.jsonl's last curve point (step 5 of a longer run) is not the final evaluation: never read
    (tmp_path / "heldout.jsonl").write_text(json.dumps({"step": 5, "greedy_items": before}) + "\n")
    with pytest.raises(SystemExit, match="heldout_after.json is missing"):
        bench.heldout_by_family(tmp_path, seed=3, per_group=1)
    (tmp_path / "heldout_after.json").write_text(json.dumps({"greedy_items": after}))
    held = bench.heldout_by_family(tmp_path, seed=3, per_group=1)
    assert sum(n for n, _, _ in held.values()) == len(items) and sum(a for _, _, a in held.values()) == 1
    assert set(held) == {it.group for it in items}  # family groups: one per family
    assert sum(b for _, b, _ in held.values()) == 0

    # a run made before family groups (writes groups w0 .. w3+) is rebuilt with its own grouping
    from synco.domains.tools.settings import ToolsSettings

    items = ToolsDomain(ToolsSettings(heldout_groups="writes")).heldout(1, seed=heldout_seed(3))
    before = {f"{i}:{it.group}": 0.0 for i, it in enumerate(items)}
    (tmp_path / "heldout_before.json").write_text(json.dumps({"greedy_items": before}))
    (tmp_path / "heldout_after.json").write_text(json.dumps({"greedy_items": before}))
    held = bench.heldout_by_family(tmp_path, seed=3, per_group=1)
    assert sum(n for n, _, _ in held.values()) == 4 and len(items) == 4


def test_first_step_bench_trains_the_agents_ids_of_gold_episodes() -> None:
    import random

    from synco.core.policy import PolicyConfig
    from synco.domains.tools import ToolsDomain
    from synco.learn.hf_policy import HFPolicy
    from synco.run.pretrain.tools import load_tools_warm_start

    bench = _load("tools_first_step")
    policy = HFPolicy.from_config(PolicyConfig(model_path=str(load_tools_warm_start() / "reasoner"), device="cpu",
                                               add_bos=False))
    ex = bench.gold_example(policy, ToolsDomain(), random.Random(0))
    assert ex.completion_ids is not None and ex.completion_mask is not None and 0 in ex.completion_mask
    eos = policy.tokenizer.eos_token_id
    assert ex.completion_ids[-1] == eos and ex.completion_mask[-1] == 1  # done(...) + EOS, a target
    assert all(m == 1 for i, m in zip(ex.completion_ids, ex.completion_mask) if i == eos)  # every turn's EOS is trained
    assert 0 < bench.mean_nll(policy, [ex]) < 1.0  # the warm start knows its own gold episodes


def test_family_rl_bench_trains_on_its_families_and_scores_heldout_ones(monkeypatch, capsys) -> None:
    """bench/tools_family_rl.py end to end at toy size: held-out tasks come from the held-out bucket (distinct, of the
    family asked), a bad family name is an error naming it, and the table has a row per family and a total."""
    import random

    import pytest

    from synco.domains.tools import ToolsDomain
    from synco.domains.tools.tasks import family_of_instruction, is_heldout_task
    from synco.run.pretrain.tools import load_tools_warm_start

    bench = _load("tools_family_rl")
    tasks = bench.heldout_tasks(ToolsDomain(), "buy", 5, random.Random(0))
    assert len(tasks) == 5 == len({t.instruction for t in tasks})
    assert all(is_heldout_task(t.actions, t.outputs) and family_of_instruction(t.instruction) == "buy" for t in tasks)
    with pytest.raises(SystemExit, match="unknown families \\['bogus'\\]"):
        bench.families("buy,bogus")
    assert bench.families("all")[0] == "lookup" and len(bench.families("all")) == 19
    # --no-repeat: a family's instructions are drawn once each, then its slots go unused (`cancel` has 4)
    seen: set[str] = set()
    drawn = [bench.draw(ToolsDomain(), random.Random(0), "cancel", seen) for _ in range(6)]
    assert len({t.instruction for t in drawn if t is not None}) == 4 == len(seen) and drawn[-1] is None
    assert bench.draw(ToolsDomain(), random.Random(0), "cancel", None) is not None  # repeats allowed

    reasoner = str(load_tools_warm_start() / "reasoner")
    monkeypatch.setattr("sys.argv", ["tools_family_rl.py", "--reasoner", reasoner, "--train", "buy,transfer",
                                     "--steps", "1", "--tasks", "2", "--k", "2", "--heldout", "2"])
    bench.main()
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| family")]
    assert [r.split(" | ")[0] for r in rows] == ["| buy", "| transfer", "| all"]
    assert rows[-1].split(" | ")[1] == "4"  # two held-out tasks per family
    assert "over seeds" not in out  # one seed, one arm: no summary
    assert "LoRA" not in out and "KL" not in out  # full fine-tuning without a KL term by default

    # --lora / --kl: adapters of that rank on the warm start, a KL reference; named in the table's header
    monkeypatch.setattr("sys.argv", ["tools_family_rl.py", "--reasoner", reasoner, "--train", "buy", "--steps", "1",
                                     "--tasks", "2", "--k", "2", "--heldout", "1", "--lora", "2", "--kl", "0.1"])
    bench.main()
    assert "4 epochs, LoRA rank 2, KL 0.1, seed 0" in capsys.readouterr().out

    # several seeds with the control: a table per seed and arm, then mean ± s.e. per arm and the paired difference
    monkeypatch.setattr("sys.argv", ["tools_family_rl.py", "--reasoner", reasoner, "--train", "buy", "--seed", "1", "2",
                                     "--control", "--steps", "1", "--tasks", "2", "--k", "2", "--heldout", "1"])
    bench.main()
    out = capsys.readouterr().out
    assert sum(line.startswith("| all |") for line in out.splitlines()) == 4
    tail = out.split("held-out gain on buy over seeds 1 2 (greedy | sampled):")[1].splitlines()
    assert [line.split(":")[0].strip() for line in tail[1:4]] == ["trained on buy", "trained on all", "paired, buy - all"]
    assert all(" ± " in line for line in tail[1:4])


def test_pool_stats_bench_counts_rows_distinct_tasks_duplicates_and_windows() -> None:
    """bench/tools_pool_stats.py on hand-made pool rows: a revisited task is two rows and one distinct instruction;
    windows, shares and the pattern mix computed by hand."""
    from synco.analysis.rundata import TaskRow

    bench = _load("tools_pool_stats")

    def row(i: int, step: int, valid: bool, family: str = "buy", pattern: str = "rw", p: float = 0.5,
            reasons: tuple[str, ...] = ()) -> TaskRow:
        return TaskRow(task_id=i, step=step, valid=valid, gradient_bearing=False, quality=1.0, reliability=1.0,
                       novelty=None, success_rate=p, synth_total=None, difficulty=None,
                       factors={"family": family, "pattern": pattern}, reason_codes=reasons)

    tasks = [row(1, 0, True, "buy", "rw", 0.5), row(2, 0, True, "buy", "rw", 0.5),  # the same task twice
             row(3, 1, True, "lookup", "r", 1.0), row(4, 3, True, "transfer", "rw", 0.0),
             row(5, 3, False, reasons=("near_duplicate",)), row(6, 3, False, reasons=("bad_call",))]
    valid_rows = [{"problem": "buy a mug", "actions": [["find_user", "bob"]]},
                  {"problem": "buy a mug", "actions": [["find_user", "bob"]]},
                  {"problem": "what does the lamp cost?", "actions": [["find_product", "lamp"]]},
                  {"problem": "send 40 from sam to tom", "actions": [["find_user", "sam"]]}]
    stats = bench.pool_stats(tasks, valid_rows, window=2)
    assert stats["valid rows"] == 4 and stats["distinct instructions"] == 3 and stats["distinct action lists"] == 3
    assert stats["valid/step first"] == 1.5  # steps 0, 1: 2 + 1 valid
    assert stats["valid/step last"] == 0.5  # steps 2, 3: 0 + 1 valid
    assert stats["duplicate share of rejections"] == 0.5
    assert stats["top families"] == "buy 2, lookup 1, transfer 1" and stats["top-3 share"] == 1.0
    assert stats["families (min..max tasks)"] == "3 (1..2)"
    assert stats["patterns first"] == "r:0.33(1.00) rw:0.67(0.50)"
    assert stats["patterns last"] == "rw:1.00(0.00)"
    assert bench.pool_stats([], [], window=2)["patterns last"] == "-"
