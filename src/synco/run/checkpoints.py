"""Checkpoints: when to save one, saving it whole or not at all, and finding the newest intact one on resume.

``checkpoints/step_N/{synthesizer,reasoner}/`` hold the models in HF format (the adapter only under LoRA),
``{role}_state`` their optimizer and scheduler states, ``trainer_state.pt`` the step, RNG states, report,
factor space, thread count and protocol state; ``damaged-step_N`` is a checkpoint found truncated on resume.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path
from typing import Callable

from synco.config import RunConfig
from synco.run.build import sampler_rng_states
from synco.run.rng import rng_state
from synco.run.state import Run


def checkpoint_due(cfg: RunConfig, step: int, minutes_since_last: float) -> bool:
    """Whether to checkpoint after ``step``: every ``save_every`` steps when set, else once ``save_every_minutes``
    have passed since the last checkpoint (or the start). Never after the last step: ``train`` saves that one.

    One cadence at a time: a step cadence is a deliberate choice (e.g. for checkpoints of many GB)."""
    if step + 1 >= cfg.steps:
        return False
    if cfg.save_every > 0:
        return (step + 1) % cfg.save_every == 0
    return cfg.save_every_minutes > 0 and minutes_since_last >= cfg.save_every_minutes


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
    evo = run.state.evo
    torch.save({"step": step, "rng": rng_state(run.state.rng), "report": run.state.report.to_json(),
                "factor_space": evo.space.model_dump_json() if evo is not None else None,
                "threads": torch.get_num_threads(), "protocol": run.protocol.checkpoint(step),
                "pipeline": run.pipeline.checkpoint() if run.pipeline is not None else None,
                "samplers": sampler_rng_states(run.state.synthesizer, run.state.reasoner)},
               tmp / "trainer_state.pt")
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)  # a checkpoint is either whole or absent
    kept = sorted((int(p.name.split("_")[1]), p) for p in run.ckpt_dir.glob("step_*"))
    for _, old in kept[:-run.cfg.keep_checkpoints]:
        shutil.rmtree(old, ignore_errors=True)
    return path


def latest_checkpoint(run_dir: Path) -> Path | None:
    steps = sorted((int(p.name.split("_")[1]), p) for p in (run_dir / "checkpoints").glob("step_*")
                   if (p / "trainer_state.pt").is_file())
    return steps[-1][1] if steps else None


def checkpoints(run_dir: Path) -> list[Path]:
    """Every ``checkpoints/step_N`` folder, oldest first."""
    found = [p for p in (run_dir / "checkpoints").glob("step_*") if p.is_dir() and p.name[5:].isdigit()]
    return sorted(found, key=lambda p: int(p.name[5:]))


def usable_checkpoint(run_dir: Path, log: Callable[[str], None] = print) -> Path | None:
    """The newest intact checkpoint, or None. A damaged one (a truncated file) is moved aside to
    ``damaged-step_N`` and the next older one tried; one line says so."""
    for leftover in (run_dir / "checkpoints").glob(".tmp_step_*"):  # a kill while saving
        shutil.rmtree(leftover, ignore_errors=True)
    for ckpt in reversed(checkpoints(run_dir)):
        problem = checkpoint_problem(ckpt)
        if problem is None:
            return ckpt
        aside = ckpt.with_name("damaged-" + ckpt.name)
        shutil.rmtree(aside, ignore_errors=True)
        ckpt.rename(aside)
        log(f"checkpoint {ckpt} is damaged ({problem}): moved to {aside.name}, falling back to an older one")
    return None


def checkpoint_problem(ckpt: Path) -> str | None:
    """What makes a checkpoint folder unusable (a missing or truncated file), or None; loads no weights.

    ``.pt`` / ``.bin`` files are zip archives whose index sits at the end, so truncation loses it;
    a ``.safetensors`` file's header states its exact size; ``.json`` files must parse.
    """
    if not (ckpt / "trainer_state.pt").is_file():
        return "trainer_state.pt is missing"
    for role in ("synthesizer", "reasoner"):
        if not any((ckpt / role).glob("*.safetensors")) and not any((ckpt / role).glob("*.bin")):
            return f"{role}/ holds no weights"
    for f in sorted(ckpt.rglob("*")):
        try:
            if f.suffix in (".pt", ".bin"):
                zipfile.ZipFile(f).close()
            elif f.suffix == ".safetensors":
                _check_safetensors(f)
            elif f.suffix == ".json":
                json.loads(f.read_bytes())
        except (OSError, ValueError, zipfile.BadZipFile) as e:
            return f"{f.relative_to(ckpt)}: {e}"
    return None


def _check_safetensors(path: Path) -> None:
    """Raise ValueError unless the file is as long as its header says (8-byte length, JSON header, data)."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        if size < 8 or 8 + n > size:
            raise ValueError(f"truncated: {size} bytes, header claims {n}")
        header = json.loads(fh.read(n))
    end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
    if 8 + n + end != size:
        raise ValueError(f"truncated: {size} bytes, expected {8 + n + end}")
