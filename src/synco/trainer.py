"""A co-training run: build everything from the config, loop over steps, checkpoint, resume, summarise.

The step itself lives in ``synco.engine.cotrain_step``; this module is the
plumbing around it: the run directory, the held-out evaluation before and after,
metrics (JSONL, TensorBoard, optional W&B), checkpoints and exact resume.

Run directory::

    runs/<run_id>/config.yaml        resolved config
                  pool.sqlite        every card, verdict, attempt and reward
                  valid_tasks.jsonl  the synthesized dataset (written at the end)
                  metrics.jsonl      one line per step
                  reports/step_N.txt every capability report as rendered
                  checkpoints/step_N/{synthesizer,reasoner}/  HF format (the adapter only under LoRA)
                  checkpoints/step_N/trainer_state.pt          step, RNG states, report
                  summary.json       before/after held-out accuracy and run statistics
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from pydantic import BaseModel

from synco.answers import AnswerChecker, extract_answer
from synco.config import RunConfig, dump_config
from synco.domain import Domain, HeldoutItem, solve
from synco.engine import CoTrainState, StepSettings, StepStats, cotrain_step
from synco.policy import HFPolicy, Policy, PolicyConfig, SamplingParams
from synco.pool import TaskPool
from synco.report import CapabilityReport, build_report
from synco.verifier import TaskVerifier


class RunSummary(BaseModel):
    """What ``synco train`` prints at the end (also ``summary.json``)."""

    run_dir: str
    steps: int
    heldout_before: dict[str, float] = {}
    heldout_after: dict[str, float] = {}
    heldout_sampled_before: dict[str, float] = {}  # mean over heldout_samples answers at the training temperature
    heldout_sampled_after: dict[str, float] = {}
    heldout_curve: dict[int, float] = {}  # step -> greedy held-out mean, from heldout.jsonl (heldout_every)
    gradient_share_first: float = 0.0
    gradient_share_last: float = 0.0
    valid_rate: float = 0.0
    groups_first: dict[str, float] = {}
    groups_last: dict[str, float] = {}
    sec_per_step: float = 0.0
    sec_generate: float = 0.0
    sec_train: float = 0.0
    sec_other: float = 0.0
    n_tasks: int = 0
    n_valid_tasks: int = 0


def resolve_model_path(path: str) -> str:
    """``builtin:arith/<role>`` -> the shipped warm-start checkpoint; a model preset (``smollm2``) -> its
    cached HF folder (converted on first use, see ``synco.models``); anything else unchanged."""
    if path.startswith("builtin:arith/"):
        from synco.pretrain import load_arith_warm_start

        return str(load_arith_warm_start() / path.split("/", 1)[1])
    from synco.models import resolve_model

    return resolve_model(path)


def build_domain(cfg: RunConfig) -> Domain:
    if cfg.domain == "arith":
        from synco.worlds.arith import ArithDomain

        return ArithDomain()
    if cfg.domain == "math":
        from synco.worlds.math import MathDomain

        return MathDomain(prompts_dir=cfg.prompts_dir)
    raise ValueError(f"domain: unknown domain {cfg.domain!r}")


def build_consensus_checker(cfg: RunConfig, domain: Domain, reasoner: Policy | None = None) -> HFPolicy | None:
    """The frozen consensus checker when ``consensus_solver=checker`` applies (no oracle, consensus on), else None.

    ``cfg.checker`` (default: the reasoner's settings and initial model) with ``trainable`` forced off;
    its sampling parameters are the checker's ``sampling``. Under ``shared_base`` without a ``checker``
    section and with fresh adapters, the initial Reasoner is the shared base itself: the checker is a
    view of it with adapters disabled (no second copy in memory).
    """
    if cfg.consensus_solver != "checker" or not cfg.consensus or domain.has_oracle:
        return None
    fresh = cfg.reasoner.lora is None or cfg.reasoner.lora.adapter_path is None
    if cfg.checker is None and cfg.shared_base and fresh and hasattr(reasoner, "shared"):
        from synco.shared_base import BaseView

        return BaseView(reasoner.shared, cfg.reasoner)  # type: ignore[union-attr]
    base = cfg.checker if cfg.checker is not None else cfg.reasoner.model_copy(update={"lora": None})
    return build_policy(base.model_copy(update={"trainable": False}))


def build_policy(cfg: PolicyConfig, model_path: str | None = None) -> HFPolicy:
    """One learner from its config; ``model_path`` (a checkpoint folder) replaces the config's model.

    A LoRA checkpoint folder holds the adapter only (``adapter_config.json``):
    the base still comes from the config and the adapter is loaded on top.
    """
    if model_path is not None and cfg.lora is not None and (Path(model_path) / "adapter_config.json").is_file():
        cfg = cfg.model_copy(update={"lora": cfg.lora.model_copy(update={"adapter_path": model_path})})
        model_path = None
    return HFPolicy.from_config(cfg.model_copy(update={"model_path": model_path or resolve_model_path(cfg.model_path)}))


def build_policies(cfg: RunConfig, ckpt: Path | None = None) -> tuple[HFPolicy, HFPolicy]:
    """(synthesizer, reasoner): two HFPolicy, or two adapter views of one shared base when ``cfg.shared_base``.

    With ``ckpt`` the weights (or adapters) come from ``ckpt/{synthesizer,reasoner}``;
    optimizer states are loaded by the caller.
    """
    dirs = (None, None) if ckpt is None else (str(ckpt / "synthesizer"), str(ckpt / "reasoner"))
    if cfg.shared_base:
        from synco.shared_base import SharedBase

        shared = SharedBase.from_configs(cfg.synthesizer, cfg.reasoner,
                                         model_path=resolve_model_path(cfg.synthesizer.model_path), adapter_dirs=dirs)
        return shared.synthesizer, shared.reasoner
    return build_policy(cfg.synthesizer, dirs[0]), build_policy(cfg.reasoner, dirs[1])


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state(rng: random.Random) -> dict[str, Any]:
    import numpy as np
    import torch

    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "run_rng": rng.getstate()}


def set_rng_state(state: dict[str, Any], rng: random.Random) -> None:
    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    rng.setstate(state["run_rng"])


def evaluate_heldout(policy: Policy, domain: Domain, items: Sequence[HeldoutItem], checker: AnswerChecker,
                     max_new_tokens: int, batch_size: int = 256, params: SamplingParams | None = None,
                     n: int = 1, seed: int = 0) -> dict[str, float]:
    """Held-out accuracy per group (e.g. difficulty level): greedy by default, else the mean over ``n`` samples.

    Sampling runs under a forked torch RNG seeded with ``seed``, so the evaluation is
    repeatable and never shifts the training run's random stream.
    """
    import torch

    params = params or SamplingParams(greedy=True, max_new_tokens=max_new_tokens)
    correct: dict[str, list[bool]] = {}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for start in range(0, len(items), batch_size):
            chunk = items[start:start + batch_size]
            outs = solve(policy, domain, [it.problem for it in chunk], n, params)
            for it, group in zip(chunk, outs):
                for c in group:
                    ans = extract_answer(c.text)
                    correct.setdefault(it.group, []).append(ans is not None and checker.match(ans, it.answer))
    return {g: sum(v) / len(v) for g, v in sorted(correct.items(), key=lambda kv: _group_key(kv[0]))}


def evaluate_heldout_greedy(run: "Run") -> dict[str, float]:
    """Greedy held-out accuracy per group of the run's Reasoner."""
    st = run.state
    return evaluate_heldout(st.reasoner, st.domain, run.heldout, st.checker, run.cfg.reasoner.sampling.max_new_tokens)


def evaluate_heldout_both(run: "Run", greedy: dict[str, float] | None = None) -> dict[str, dict[str, float]]:
    """``{"greedy": ..., "sampled": ...}`` held-out accuracy of the run's Reasoner (sampled only when asked);
    ``greedy``, when given, is a greedy result already computed for the current weights."""
    cfg, st = run.cfg, run.state
    out = {"greedy": greedy if greedy is not None else evaluate_heldout_greedy(run)}
    if cfg.heldout_samples:
        out["sampled"] = evaluate_heldout(st.reasoner, st.domain, run.heldout, st.checker, 0,
                                          params=cfg.reasoner.sampling, n=cfg.heldout_samples, seed=cfg.seed)
    return out


def _mean(d: dict[str, float]) -> float:
    return sum(d.values()) / len(d) if d else float("nan")


def _group_key(g: str) -> tuple[int, str]:
    digits = "".join(ch for ch in g if ch.isdigit())
    return (int(digits) if digits else 10**9, g)


@dataclass
class Run:
    """A live run: its directory, config and the state the step function works on."""

    cfg: RunConfig
    dir: Path
    state: CoTrainState
    start_step: int
    heldout: list[HeldoutItem]

    @property
    def ckpt_dir(self) -> Path:
        return self.dir / "checkpoints"


def new_run_id(cfg: RunConfig) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{cfg.domain}-{cfg.mode}-s{cfg.seed}-{stamp}"


def latest_checkpoint(run_dir: Path) -> Path | None:
    steps = sorted((int(p.name.split("_")[1]), p) for p in (run_dir / "checkpoints").glob("step_*")
                   if (p / "trainer_state.pt").is_file())
    return steps[-1][1] if steps else None


def setup_run(cfg: RunConfig, resume: Path | None = None) -> Run:
    """Create (or reopen, for ``resume``) the run directory and everything the loop needs."""
    import torch

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    if resume is not None:
        run_dir = Path(resume)
        ckpt = latest_checkpoint(run_dir)
        if ckpt is None:
            raise FileNotFoundError(f"--resume {run_dir}: no checkpoint with trainer_state.pt under {run_dir / 'checkpoints'}")
    else:
        run_dir = Path(cfg.runs_dir) / (cfg.run_id or new_run_id(cfg))
        if (run_dir / "pool.sqlite").exists():
            raise FileExistsError(f"run directory {run_dir} already holds a run; use --resume {run_dir} or another run_id")
        ckpt = None
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(dump_config(cfg))
    (run_dir / "reports").mkdir(exist_ok=True)

    seed_everything(cfg.seed)
    rng = random.Random(cfg.seed)
    domain = build_domain(cfg)
    checker = AnswerChecker()
    heldout = domain.heldout(cfg.heldout_per_group, seed=cfg.seed + 12345) if cfg.heldout_per_group else []

    synthesizer, reasoner = build_policies(cfg, ckpt)
    if ckpt is not None:
        synthesizer.load_state(ckpt / "synthesizer_state")
        reasoner.load_state(ckpt / "reasoner_state")

    verifier_cfg = cfg.verifier
    verifier = TaskVerifier(verifier_cfg, checker=checker, oracle=domain.oracle if domain.has_oracle else None)
    pool = TaskPool(run_dir / "pool.sqlite")
    report = build_report([], cfg.report, step=0)
    start_step = 0
    if ckpt is not None:
        trainer_state = torch.load(ckpt / "trainer_state.pt", weights_only=False)
        start_step = trainer_state["step"] + 1
        pool.truncate_after(trainer_state["step"])
        _truncate_metrics(run_dir / "metrics.jsonl", trainer_state["step"])
        _truncate_metrics(run_dir / "heldout.jsonl", trainer_state["step"] + 1)  # its "step" counts steps done
        verifier.load_pool(pool.valid_problems())
        report = CapabilityReport.from_json(trainer_state["report"])
        set_rng_state(trainer_state["rng"], rng)

    settings = StepSettings(
        mode=cfg.mode, n_cards=cfg.n_cards, n_contexts=cfg.n_contexts, k=cfg.k, group_factor=cfg.group_factor,
        synth_sampling=cfg.synthesizer.sampling, reasoner_sampling=cfg.reasoner.sampling,
        reasoner_rewards=cfg.reasoner_rewards, synth_rewards=cfg.synth_rewards,
        synth_scale_by_std=cfg.synthesizer.grpo.scale_adv_by_std,
        reasoner_scale_by_std=cfg.reasoner.grpo.scale_adv_by_std, consensus=cfg.consensus,
        consensus_m=cfg.consensus_m, checker_sampling=(cfg.checker or cfg.reasoner).sampling,
    )
    state = CoTrainState(settings=settings, domain=domain, synthesizer=synthesizer, reasoner=reasoner,
                         verifier=verifier, checker=checker, pool=pool, report=report, rng=rng,
                         consensus_checker=build_consensus_checker(cfg, domain, reasoner))
    return Run(cfg=cfg, dir=run_dir, state=state, start_step=start_step, heldout=heldout)


def save_checkpoint(run: Run, step: int) -> Path:
    """HF-format models plus optimizer/scheduler states, RNG states and the latest report."""
    import torch

    path = run.ckpt_dir / f"step_{step}"
    tmp = run.ckpt_dir / f".tmp_step_{step}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for role, policy in (("synthesizer", run.state.synthesizer), ("reasoner", run.state.reasoner)):
        policy.save(tmp / role)
        policy.save_state(tmp / f"{role}_state")
    torch.save({"step": step, "rng": rng_state(run.state.rng), "report": run.state.report.to_json()},
               tmp / "trainer_state.pt")
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)  # a checkpoint is either whole or absent
    kept = sorted((int(p.name.split("_")[1]), p) for p in run.ckpt_dir.glob("step_*"))
    for _, old in kept[:-run.cfg.keep_checkpoints]:
        shutil.rmtree(old, ignore_errors=True)
    return path


def _truncate_metrics(path: Path, last_step: int) -> None:
    """Drop the JSONL rows logged after ``last_step`` (rows a resumed run will log again)."""
    if not path.exists():
        return
    keep = [ln for ln in path.read_text().splitlines() if ln.strip() and json.loads(ln)["step"] <= last_step]
    path.write_text("".join(ln + "\n" for ln in keep))


class _Loggers:
    """metrics.jsonl always; TensorBoard and W&B when configured."""

    def __init__(self, run: Run):
        self.run_dir = run.dir
        self.metrics = open(run.dir / "metrics.jsonl", "a")
        self.tb = None
        self.wandb = None
        if run.cfg.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(run.dir / "tb"))
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
                    self.tb.add_scalar(_tb_name(k), v, stats.step)
        if self.wandb is not None:
            self.wandb.log({_tb_name(k): v for k, v in scalars.items() if k != "step"}, step=stats.step)

    def log_heldout(self, step: int, greedy: dict[str, float]) -> None:
        """One point of the held-out learning curve: ``heldout.jsonl`` and ``heldout/*`` scalars."""
        with open(self.run_dir / "heldout.jsonl", "a") as f:
            f.write(json.dumps({"step": step, "mean": _mean(greedy), "greedy": greedy}) + "\n")
        if self.tb is not None:
            self.tb.add_scalar("heldout/greedy_mean", _mean(greedy), step)
            for g, v in greedy.items():
                self.tb.add_scalar(f"heldout/greedy_{g}", v, step)
        if self.wandb is not None:
            self.wandb.log({"heldout/greedy_mean": _mean(greedy)}, step=step)

    def close(self) -> None:
        self.metrics.close()
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()


def _tb_name(key: str) -> str:
    if key.startswith("reasoner_"):
        return "reasoner/" + key[len("reasoner_"):]
    if key.startswith("synth_"):
        return "synthesizer/" + key[len("synth_"):]
    if key.startswith("t_"):
        return "time/" + key[2:]
    return "tasks/" + key


def progress_postfix(stats: StepStats) -> dict[str, str]:
    """The live metrics on the progress bar; ``agree`` (label agreement) only when consensus ran."""
    postfix = {"R_rew": f"{stats.reasoner_reward:.2f}", "valid": f"{stats.valid_rate:.2f}",
               "grad": f"{stats.gradient_share:.2f}", "S_rew": f"{stats.synth_reward:+.2f}"}
    if stats.label_agreement is not None:
        postfix["agree"] = f"{stats.label_agreement:.2f}"
    return postfix


def train(cfg: RunConfig, resume: Path | None = None, log=print) -> RunSummary:
    """Run (or resume) a co-training run to ``cfg.steps`` steps and return its summary."""
    from tqdm.auto import tqdm

    run = setup_run(cfg, resume)
    st = run.state
    before_path = run.dir / "heldout_before.json"
    if run.heldout and not before_path.exists():
        before_path.write_text(json.dumps(evaluate_heldout_both(run)))
    loggers = _Loggers(run)
    bar = tqdm(range(run.start_step, cfg.steps), initial=run.start_step, total=cfg.steps, disable=not cfg.progress,
               desc="co-training", dynamic_ncols=True)
    try:
        for step in bar:
            stats = cotrain_step(st, step)
            loggers.log(stats)
            if (step + 1) % cfg.report_refresh_every == 0:
                st.report = build_report(st.pool.recent(cfg.report.window), cfg.report, step=step + 1)
                (run.dir / "reports" / f"step_{step + 1}.txt").write_text(st.domain.synthesizer_prompt(st.report))
            if cfg.save_every and (step + 1) % cfg.save_every == 0 and step + 1 < cfg.steps:
                save_checkpoint(run, step)
            if run.heldout and cfg.heldout_every and (step + 1) % cfg.heldout_every == 0:
                loggers.log_heldout(step + 1, evaluate_heldout_greedy(run))
            bar.set_postfix(progress_postfix(stats), refresh=False)
        if cfg.steps > run.start_step or latest_checkpoint(run.dir) is None:
            save_checkpoint(run, cfg.steps - 1)
    finally:
        bar.close()
        loggers.close()
    st.pool.export_jsonl(run.dir / "valid_tasks.jsonl")
    summary = summarize(run, before_path)
    (run.dir / "summary.json").write_text(summary.model_dump_json(indent=2))
    st.pool.close()
    return summary


def summarize(run: Run, before_path: Path) -> RunSummary:
    """Before/after held-out accuracy and the run's task statistics, from the run's files."""
    rows = [json.loads(ln) for ln in (run.dir / "metrics.jsonl").read_text().splitlines() if ln.strip()]
    summary = RunSummary(run_dir=str(run.dir), steps=len(rows))
    if run.heldout:
        before = json.loads(before_path.read_text())
        if "greedy" not in before:  # a run directory written before sampled evaluation existed
            before = {"greedy": before}
        curve_path = run.dir / "heldout.jsonl"
        curve = ([json.loads(ln) for ln in curve_path.read_text().splitlines() if ln.strip()]
                 if curve_path.exists() else [])
        at_end = curve[-1]["greedy"] if curve and curve[-1]["step"] == len(rows) else None  # no second greedy pass
        after = evaluate_heldout_both(run, greedy=at_end)
        summary.heldout_before, summary.heldout_after = before["greedy"], after["greedy"]
        if "sampled" in before and "sampled" in after:
            summary.heldout_sampled_before, summary.heldout_sampled_after = before["sampled"], after["sampled"]
        if curve:
            summary.heldout_curve = {0: _mean(before["greedy"]), **{c["step"]: c["mean"] for c in curve},
                                     len(rows): _mean(after["greedy"])}
    if rows:
        w = max(1, len(rows) // 10)
        first, last = rows[:w], rows[-w:]

        def share(rs: list[dict[str, Any]]) -> float:
            return sum(r["n_gradient_bearing"] for r in rs) / max(1, sum(r["n_valid"] for r in rs))

        def groups(rs: list[dict[str, Any]]) -> dict[str, float]:
            tot: dict[str, int] = {}
            for r in rs:
                for g, n in r["groups"].items():
                    tot[g] = tot.get(g, 0) + n
            n = max(1, sum(tot.values()))
            return {g: tot[g] / n for g in sorted(tot, key=_group_key)}

        summary.gradient_share_first, summary.gradient_share_last = share(first), share(last)
        summary.groups_first, summary.groups_last = groups(first), groups(last)
        summary.valid_rate = sum(r["n_valid"] for r in rows) / max(1, sum(r["n_cards"] for r in rows))
        n = len(rows)
        summary.sec_generate = sum(r["t_generate"] for r in rows) / n
        summary.sec_train = sum(r["t_train"] for r in rows) / n
        summary.sec_other = sum(r["t_other"] for r in rows) / n
        summary.sec_per_step = summary.sec_generate + summary.sec_train + summary.sec_other
        summary.n_tasks = sum(r["n_cards"] for r in rows)
        summary.n_valid_tasks = sum(r["n_valid"] for r in rows)
    return summary


def format_summary(s: RunSummary) -> str:
    """The end-of-run table printed by ``synco train``."""
    out = [f"run: {s.run_dir}  ({s.steps} steps, {s.n_tasks} cards, {s.n_valid_tasks} valid)"]
    if s.heldout_before:
        sampled = bool(s.heldout_sampled_before)
        out.append("held-out accuracy per group, before -> after: greedy" + ("  |  sampled" if sampled else ""))
        nan = float("nan")
        width = max(6, *(len(g) for g in s.heldout_before))
        for g in [*s.heldout_before, "mean"]:
            if g == "mean":
                b, a = _mean(s.heldout_before), _mean(s.heldout_after)
                sb, sa = _mean(s.heldout_sampled_before), _mean(s.heldout_sampled_after)
                nd = 3
            else:
                b, a = s.heldout_before[g], s.heldout_after.get(g, nan)
                sb, sa = s.heldout_sampled_before.get(g, nan), s.heldout_sampled_after.get(g, nan)
                nd = 2
            line = f"  {g:>{width}}: {b:.{nd}f} -> {a:.{nd}f}  ({a - b:+.{nd}f})"
            if sampled:
                line += f"  |  {sb:.{nd}f} -> {sa:.{nd}f}  ({sa - sb:+.{nd}f})"
            out.append(line)
    if len(s.heldout_curve) > 2:
        out.append("held-out greedy mean by step: " + "  ".join(f"{k}:{v:.3f}" for k, v in s.heldout_curve.items()))
    out.append(f"gradient-bearing share of valid tasks: first 10% of steps {s.gradient_share_first:.2f} -> "
               f"last 10% {s.gradient_share_last:.2f}")
    out.append(f"verification pass rate: {s.valid_rate:.2%}")
    if s.groups_first:
        keys = list(dict.fromkeys([*s.groups_first, *s.groups_last]))
        keys.sort(key=_group_key)
        out.append("task distribution over levels (first 10% -> last 10% of steps):")
        out.append("  " + "  ".join(f"{g}:{s.groups_first.get(g, 0):.2f}->{s.groups_last.get(g, 0):.2f}" for g in keys))
    out.append(f"time per step: {s.sec_per_step:.2f}s = generation {s.sec_generate:.2f}s + training {s.sec_train:.2f}s "
               f"+ other {s.sec_other:.2f}s")
    return "\n".join(out)
