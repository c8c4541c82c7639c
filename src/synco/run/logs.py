"""The run's logs: metrics.jsonl, alerts.jsonl and heldout.jsonl (plus TensorBoard and W&B when configured),
and dropping the lines a resumed run will write again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from synco.cotrain.stats import StepStats
from synco.cotrain.health import Alert
from synco.core.jsonl import truncate_jsonl
from synco.run.heldout import HeldoutScores, mean
from synco.run.state import Run
from synco.run.stopping import RunError


class Loggers:
    """metrics.jsonl always; TensorBoard and W&B when configured."""

    def __init__(self, run: Run):
        self.run_dir = run.dir
        self.metrics = open(run.dir / "metrics.jsonl", "a")
        self.tb = None
        self.wandb = None
        if run.cfg.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step: a resumed run's TensorBoard hides the events of the steps it redoes
            resumed = (run.dir / "tb").exists()
            self.tb = SummaryWriter(str(run.dir / "tb"), purge_step=run.start_step if resumed else None)
        if run.cfg.wandb:
            try:
                import wandb
            except ImportError as e:
                raise RuntimeError("wandb=true but wandb is not installed: pip install wandb") from e
            self.wandb = wandb.init(project=run.cfg.wandb_project, name=run.dir.name, config=run.cfg.model_dump())

    def log(self, stats: StepStats) -> None:
        self.metrics.write(stats.model_dump_json() + "\n")
        self.metrics.flush()
        scalars = {k: v for k, v in stats.model_dump().items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if self.tb is not None:
            for k, v in scalars.items():
                if k != "step":
                    self.tb.add_scalar(tb_name(k), v, stats.step)
        if self.wandb is not None:
            self.wandb.log({tb_name(k): v for k, v in scalars.items() if k != "step"}, step=stats.step)

    def log_alert(self, alert: Alert) -> None:
        """One health alert: a line of ``alerts.jsonl``, ``health/<check>`` in TensorBoard and W&B."""
        with open(self.run_dir / "alerts.jsonl", "a") as f:
            f.write(alert.model_dump_json() + "\n")
        if self.tb is not None:
            self.tb.add_scalar(f"health/{alert.check}", alert.value, alert.step)
            self.tb.add_text("health/alerts", f"{alert.action}: {alert.message}", alert.step)
        if self.wandb is not None:
            self.wandb.log({f"health/{alert.check}": alert.value}, step=alert.step)

    def log_heldout(self, step: int, scores: HeldoutScores) -> None:
        """One point of the held-out learning curve: ``heldout.jsonl`` (with each item's result, so a curve point
        taken at the end serves Learn / Retain) and ``heldout/*`` scalars."""
        greedy = scores.groups
        with open(self.run_dir / "heldout.jsonl", "a") as f:
            f.write(json.dumps({"step": step, "mean": mean(greedy), "greedy": greedy,
                                "greedy_items": scores.items}) + "\n")
        if self.tb is not None:
            self.tb.add_scalar("heldout/greedy_mean", mean(greedy), step)
            for g, v in greedy.items():
                self.tb.add_scalar(f"heldout/greedy_{g}", v, step)
        if self.wandb is not None:
            self.wandb.log({"heldout/greedy_mean": mean(greedy)}, step=step)

    def close(self) -> None:
        self.metrics.close()
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()


def tb_name(key: str) -> str:
    """The TensorBoard / W&B name of a StepStats field: ``reasoner/...``, ``synthesizer/...``, ``time/...``,
    else ``tasks/...``."""
    if key.startswith("reasoner_"):
        return "reasoner/" + key[len("reasoner_"):]
    if key.startswith("synth_"):
        return "synthesizer/" + key[len("synth_"):]
    if key.startswith("t_"):
        return "time/" + key[2:]
    return "tasks/" + key


def truncate_metrics(path: Path, last_step: int, log: Callable[[str], None] = print) -> None:
    """Drop the JSONL rows logged after ``last_step`` (rows a resumed run will log again): a torn last line is
    dropped and reported, an unreadable line elsewhere is a RunError naming the file and line
    (:func:`synco.core.jsonl.truncate_jsonl`)."""
    truncate_jsonl(path, last_step, error=RunError, log=log)
