"""``synco merge``: a saved LoRA adapter merged into its base, as a full HF model folder.

    synco merge runs/<run>/checkpoints/step_99/reasoner --out merged/reasoner

The adapter folder is what a LoRA policy's ``save`` (and every LoRA checkpoint,
shared-base or not) writes: ``adapter_config.json`` plus
``adapter_model.safetensors``, usually with the tokenizer. The base model is
``--base`` when given, else the ``base_model_name_or_path`` recorded in
``adapter_config.json``; preset names (``smollm2``, ``builtin:arith/<role>``)
are resolved like everywhere else. The output folder holds the merged model
(``config.json``, safetensors) and the tokenizer (from the adapter folder when
it has one, else from the base), ready for ``synco eval``, vLLM or any
``from_pretrained``. Heavy imports happen inside :func:`merge_adapter`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
DTYPES = ("auto", "float32", "bfloat16", "float16")


class MergeError(ValueError):
    """The adapter folder, the base or the output folder is unusable (the message says which and why)."""


def read_adapter_config(adapter_dir: str | Path) -> dict[str, Any]:
    """The adapter's ``adapter_config.json``, after checking the folder is a usable LoRA adapter.

    Raises ``FileNotFoundError`` for a missing folder and :class:`MergeError`
    for anything else wrong (not a folder, no or broken config, not LoRA, no weights).
    """
    d = Path(adapter_dir)
    if not d.exists():
        raise FileNotFoundError(f"adapter directory not found: {d}")
    if not d.is_dir():
        raise MergeError(f"{d} is not a directory (expected a LoRA adapter folder with {ADAPTER_CONFIG})")
    cfg_file = d / ADAPTER_CONFIG
    if not cfg_file.is_file():
        hint = ": it holds config.json, a full model with nothing to merge" if (d / "config.json").is_file() else ""
        raise MergeError(f"{d} is not a LoRA adapter folder: no {ADAPTER_CONFIG}{hint}")
    try:
        data = json.loads(cfg_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise MergeError(f"{cfg_file} is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise MergeError(f"{cfg_file} must hold a JSON object, got {type(data).__name__}")
    peft_type = data.get("peft_type")
    if peft_type is not None and str(peft_type).upper() != "LORA":
        raise MergeError(f"{cfg_file}: peft_type is {peft_type!r}; only LoRA adapters can be merged")
    if not any((d / w).is_file() for w in ADAPTER_WEIGHTS):
        raise MergeError(f"{d} has no adapter weights ({' or '.join(ADAPTER_WEIGHTS)})")
    return data


def resolve_base(path: str) -> str:
    """``builtin:arith/<role>`` and model preset names (``smollm2``) -> local folders; anything else unchanged."""
    from synco.learn.models import resolve_model

    if path.startswith(("builtin:arith/", "builtin:tools/")):
        from synco.learn.build import resolve_model_path

        path = resolve_model_path(path)
    return resolve_model(path)


def _has_tokenizer(d: Path) -> bool:
    return (d / "tokenizer_config.json").is_file() or (d / "tokenizer.json").is_file()


def merge_adapter(adapter_dir: str | Path, out: str | Path, base: str | None = None, dtype: str = "auto",
                  overwrite: bool = False) -> Path:
    """Merge the LoRA adapter in ``adapter_dir`` into its base and save model + tokenizer to ``out``.

    ``base`` overrides the adapter's recorded ``base_model_name_or_path``.
    ``dtype='auto'`` keeps the base checkpoint's dtype. ``out`` must not exist
    or be empty unless ``overwrite``; it is written under a temporary name and
    renamed at the end, so a failed merge leaves no half-written model.
    """
    adapter_dir = Path(adapter_dir)
    data = read_adapter_config(adapter_dir)
    if dtype not in DTYPES:
        raise MergeError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    recorded = data.get("base_model_name_or_path")
    base_name = base or recorded
    if not base_name:
        raise MergeError(f"{adapter_dir / ADAPTER_CONFIG} records no base model (base_model_name_or_path); "
                         "pass --base PATH")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise MergeError(f"--out {out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise MergeError(f"--out {out} is not empty (pass --overwrite to replace it)")
    if out.resolve() == adapter_dir.resolve():
        raise MergeError("--out must differ from the adapter folder")

    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base_path = resolve_base(str(base_name))
    kwargs: dict[str, Any] = {"dtype": "auto" if dtype == "auto" else getattr(torch, dtype)}
    try:
        model = AutoModelForCausalLM.from_pretrained(base_path, **kwargs)
    except (OSError, ValueError) as e:
        src = "--base" if base else f"base_model_name_or_path in {adapter_dir / ADAPTER_CONFIG}"
        raise MergeError(f"cannot load the base model {base_path!r} ({src}): {e}") from None
    try:
        merged = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    except (RuntimeError, ValueError, KeyError) as e:  # shape mismatch: adapter made for another base
        raise MergeError(f"cannot apply the adapter {adapter_dir} to the base {base_path!r}: {e}") from None
    tokenizer = AutoTokenizer.from_pretrained(str(adapter_dir) if _has_tokenizer(adapter_dir) else base_path)

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        merged.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


# --------------------------------------------------------------------------- CLI


def configure_merge(p: argparse.ArgumentParser) -> None:
    """Arguments of ``synco merge``."""
    p.description = ("Merge a saved LoRA adapter (a folder with adapter_config.json and adapter weights, e.g. "
                     "runs/<run>/checkpoints/step_N/reasoner) into its base model and save the result as a "
                     "full Hugging Face model folder with the tokenizer, for evaluation or serving.")
    p.add_argument("adapter_dir", type=Path, metavar="ADAPTER_DIR",
                   help="LoRA adapter folder (adapter_config.json + adapter_model.safetensors)")
    p.add_argument("--out", type=Path, required=True, metavar="DIR",
                   help="output folder for the merged model and tokenizer (must not exist or be empty)")
    p.add_argument("--base", default=None, metavar="PATH",
                   help="base model folder, hub id or preset (smollm2, builtin:arith/<role>); "
                        "default: base_model_name_or_path from ADAPTER_DIR/adapter_config.json")
    p.add_argument("--dtype", choices=DTYPES, default="auto",
                   help="dtype to load the base and save the merged model in (default: %(default)s = the base's)")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty --out folder")


def run_merge(args: argparse.Namespace) -> int:
    try:
        out = merge_adapter(args.adapter_dir, args.out, base=args.base, dtype=args.dtype, overwrite=args.overwrite)
    except (MergeError, FileNotFoundError) as e:
        print(f"synco merge: {e}", file=sys.stderr)
        return 2
    print(f"merged {args.adapter_dir} into {out}")
    return 0
