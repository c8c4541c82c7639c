"""A protocol added from outside the package: registered by name, it runs on the real trainer (tiny arith models),
synchronously and through the asynchronous pipeline, with no edit in ``synco.cotrain`` or ``synco.run``: its plan,
its ``after``, its round end, its checkpoint and resume check and its summary lines all reach the run.

(Named ``test_protocol_registry`` because ``tests/domains/test_registry.py`` exists: test files need distinct names.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import pytest

from synco.cli import main
from synco.config import ConfigError, load_config
from synco.cotrain.protocols.base import TrainingProtocol
from synco.cotrain.protocols.registry import build_protocol, protocol_names, register_protocol, unregister_protocol
from synco.cotrain.settings import StepPlan
from synco.cotrain.stats import StepStats
from synco.run.loop import train
from synco.run.state import new_run_id

AFTER: list[tuple[str, int]] = []  # (run, step) of each `after` call, in order


@dataclass(frozen=True, kw_only=True)
class ReasonerFirst(TrainingProtocol):
    """A protocol written outside the package: the Synthesizer is frozen for ``warmup`` steps (round 0), then both
    agents learn (round 1); the warm-up's last step closes a round."""

    name: str = "reasoner_first"
    warmup: int = 2
    run_id: str = ""

    def run_mode(self, mode: str) -> str:
        if mode != "cotrain":
            raise ValueError(f"protocol=reasoner_first trains the Synthesizer after its warm-up: mode={mode!r}")
        return mode

    def plan(self, step: int) -> StepPlan:
        warm = step < self.warmup
        return StepPlan(update_synthesizer=not warm, protocol=self.name, round=0 if warm else 1,
                        phase="warmup" if warm else "joint")

    def after(self, state: Any, step: int, stats: StepStats) -> StepStats:
        AFTER.append((self.run_id, step))
        return stats

    def closes_round(self, step: int) -> bool:
        return step == self.warmup - 1

    def settings(self) -> dict[str, Any]:
        return {"reasoner_first": {"warmup": self.warmup}}

    def describe(self, rows: Sequence[dict[str, Any]]) -> list[str]:
        return [f"protocol reasoner_first: {sum(r['phase'] == 'warmup' for r in rows)} warm-up steps"]


@dataclass(frozen=True, kw_only=True)
class GoldOnly(TrainingProtocol):
    """A protocol written outside the package that declares it fine-tunes on references: the config asks the domain
    for replayable gold episodes, with no edit in ``synco.config`` either."""

    name: str = "gold_only"

    @property
    def sft_on_references(self) -> bool:
        return True


def factory(cfg: Any) -> ReasonerFirst:
    return ReasonerFirst(steps=cfg.steps, effect_every=cfg.evosyn.effect_every, run_id=str(cfg.run_id))


@pytest.fixture
def registered() -> Iterator[None]:
    AFTER.clear()
    register_protocol("reasoner_first", factory)
    try:
        yield
    finally:
        unregister_protocol("reasoner_first")


TINY = ["steps=3", "n_cards=8", "k=2", "heldout_per_group=0", "progress=false", "tensorboard=false", "threads=1",
        "report_refresh_every=10", "save_every=1", "keep_checkpoints=5"]


def rows(run: Path) -> list[dict]:
    return [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]


def test_a_name_is_a_protocol_only_once_registered() -> None:
    with pytest.raises(ConfigError, match="unknown protocol 'reasoner_first'"):
        load_config("arith", overrides=["protocol=reasoner_first"])
    register_protocol("reasoner_first", factory)
    try:
        assert protocol_names()[:4] == ("online", "rounds", "alternating", "rft") and "reasoner_first" in protocol_names()
        with pytest.raises(ValueError, match="already registered"):
            register_protocol("reasoner_first", factory)
        with pytest.raises(ConfigError, match="mode='frozen'"):  # its own check of the mode, at load
            load_config("arith", overrides=["protocol=reasoner_first", "mode=frozen"])
        assert isinstance(build_protocol(load_config("arith", overrides=["protocol=reasoner_first"])), ReasonerFirst)
    finally:
        unregister_protocol("reasoner_first")
    with pytest.raises(ValueError, match="identifier"):
        register_protocol("not a name", factory)


def test_a_registered_protocols_declarations_reach_the_config_and_the_run_folder(registered) -> None:  # noqa: ANN001
    register_protocol("gold_only", lambda cfg: GoldOnly(steps=cfg.steps))
    try:
        assert load_config("tools", overrides=["protocol=gold_only"]).protocol == "gold_only"  # tools: gold episodes
        with pytest.raises(ConfigError, match="no replayable gold episode: protocol='gold_only'"):
            load_config("rgym", overrides=["protocol=gold_only"])  # rgym's Reasoner acts, with no gold episode
        assert load_config("rgym", overrides=["protocol=reasoner_first"]).protocol == "reasoner_first"
        assert new_run_id(load_config("arith", overrides=["protocol=gold_only"])).startswith("arith-gold_only-s0-")
        assert new_run_id(load_config("arith", overrides=["mode=frozen"])).startswith("arith-frozen-s0-")  # online
    finally:
        unregister_protocol("gold_only")


@pytest.mark.slow
@pytest.mark.parametrize("staleness", [0, 1])
def test_a_registered_protocol_runs_on_the_trainer(tmp_path, registered, one_thread, staleness) -> None:  # noqa: ANN001
    run_id = f"rf{staleness}"
    summary = train(load_config("arith", overrides=[*TINY, "protocol=reasoner_first", f"max_staleness={staleness}",
                                                    f"runs_dir={tmp_path}", f"run_id={run_id}"]))
    run = tmp_path / run_id
    metrics = rows(run)
    assert [(m["protocol"], m["round"], m["phase"]) for m in metrics] == [
        ("reasoner_first", 0, "warmup"), ("reasoner_first", 0, "warmup"), ("reasoner_first", 1, "joint")]
    assert [m["synth_loss"] for m in metrics[:2]] == [None, None]  # its plan froze the Synthesizer
    assert metrics[2]["synth_loss"] is not None
    assert AFTER == [(run_id, 0), (run_id, 1), (run_id, 2)]  # its `after`, once per step, in order
    assert (run / "reports" / "step_2.txt").is_file()  # its round end refreshed the report (the cadence is 10)
    assert not (run / "reports" / "step_1.txt").exists()
    assert summary.protocol == "reasoner_first" and summary.protocol_notes == ["protocol reasoner_first: 2 warm-up steps"]

    import torch

    saved = torch.load(run / "checkpoints" / "step_1" / "trainer_state.pt", weights_only=False)["protocol"]
    assert saved == {"protocol": "reasoner_first", "round": 0, "settings": {"reasoner_first": {"warmup": 2}}}
    if staleness == 0:  # a resume under another protocol is refused before anything is rewound
        assert main(["train", "--resume", str(run), "protocol=online"]) == 2
        assert rows(run) == metrics
