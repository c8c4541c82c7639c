"""Shared-base LoRA: the Synthesizer and the Reasoner as two adapters on one frozen base model.

With ``shared_base: true`` the run loads its base model *once* and gives it two
``peft`` LoRA adapters, ``"synthesizer"`` and ``"reasoner"``. The agents stay
two independently parameterised policies — each adapter has its own optimizer,
scheduler, sampling and GRPO settings and takes its own update — but the base
weights (frozen) exist once in memory, so two agents cost little more than one.

* :class:`SharedBase` owns the ``PeftModel`` holding both adapters and the
  tokenizer; :meth:`SharedBase.activate` switches the active adapter.
* :class:`AdapterPolicy` is one agent: an :class:`~synco.learn.hf_policy.HFPolicy` whose
  ``model`` is the shared ``PeftModel``. It activates its own adapter before
  every generate / gradient computation / save, and its optimizer holds only
  its own adapter's parameters (selected by name, not by ``requires_grad``,
  which ``peft``'s ``set_adapter`` flips for every switch). Only the active
  adapter takes part in a forward pass, so sampling with one adapter never
  uses the other's weights and one agent's update never touches the other's
  parameters.
* ``save`` writes the agent's adapter alone (``adapter_config.json`` and
  ``adapter_model.safetensors``, plus the tokenizer), in the same layout as a
  single LoRA policy, so ``synco merge`` and ``LoraSettings.adapter_path``
  work on it.

The engine only sees the :class:`~synco.core.policy.Policy` protocol and does not
know the base is shared. The KL reference of either agent (``kl_coef > 0``) is
the shared base with adapters disabled.
"""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import torch

from synco.learn.hf_policy import (DTYPES, GradientStats, HFGenerator, HFPolicy, SnapshotSampler,
                                   enable_checkpointing, frozen_copy, lora_config, resolve_device)
from synco.core.policy import PolicyConfig, Sampler, UpdateStats
from synco.core.sampling import Experience
from synco.core.sampling import SFTExample

ROLES = ("synthesizer", "reasoner")
"""Adapter names of the two agents (also their checkpoint folder names)."""

_SAME_FIELDS = ("model_path", "dtype", "device", "attn_implementation", "gradient_checkpointing")
_SAME_LORA_FIELDS = ("rank", "alpha", "dropout", "target_modules")


def shared_base_problems(synthesizer: PolicyConfig, reasoner: PolicyConfig) -> list[str]:
    """Why two agent configs cannot share one base (empty when they can), each naming the dotted field."""
    problems: list[str] = []
    for f in _SAME_FIELDS:
        a, b = getattr(synthesizer, f), getattr(reasoner, f)
        if a != b:
            problems.append(f"synthesizer.{f}={a!r} but reasoner.{f}={b!r} (they must be equal)")
    for role, cfg in zip(ROLES, (synthesizer, reasoner)):
        if cfg.lora is None:
            problems.append(f"{role}.lora is not set (shared_base trains LoRA adapters only)")
    if synthesizer.lora is not None and reasoner.lora is not None:
        for f in _SAME_LORA_FIELDS:
            a, b = getattr(synthesizer.lora, f), getattr(reasoner.lora, f)
            if a != b:
                problems.append(f"synthesizer.lora.{f}={a!r} but reasoner.lora.{f}={b!r} (they must be equal)")
    return problems


class SharedBase:
    """One frozen base model with one LoRA adapter per agent, and the agents' :class:`AdapterPolicy` views.

    ``model`` is a plain ``transformers`` causal LM (not yet a peft model);
    ``configs`` maps adapter name -> that agent's :class:`PolicyConfig`
    (``lora`` required; ``lora.adapter_path`` loads a saved adapter instead of a
    fresh one). Adapters are created in ``configs`` order, after seeding torch
    with the first config's ``seed`` when set.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        configs: dict[str, PolicyConfig],
        generators: dict[str, Sampler] | None = None,
    ) -> None:
        if len(configs) < 1:
            raise ValueError("SharedBase needs at least one adapter config")
        names = list(configs)
        first = configs[names[0]]
        for name in names[1:]:
            problems = shared_base_problems(first, configs[name])
            if problems:
                raise ValueError(f"adapters {names[0]!r} and {name!r} cannot share a base: " + "; ".join(problems))
        if first.lora is None:
            raise ValueError(f"{names[0]}.lora is not set (shared_base trains LoRA adapters only)")
        from peft import PeftModel, get_peft_model

        seed = next((c.seed for c in configs.values() if c.seed is not None), None)
        if seed is not None:
            torch.manual_seed(seed)
        self.device = resolve_device(first.device)
        self.tokenizer = tokenizer
        model = model.to(self.device)
        for p in model.parameters():
            p.requires_grad_(False)
        peft_model: Any = None
        for name, cfg in configs.items():
            assert cfg.lora is not None
            if cfg.lora.adapter_path:
                if peft_model is None:
                    peft_model = PeftModel.from_pretrained(model, cfg.lora.adapter_path, adapter_name=name,
                                                           is_trainable=cfg.trainable)
                else:
                    peft_model.load_adapter(cfg.lora.adapter_path, adapter_name=name, is_trainable=cfg.trainable)
            else:
                lcfg = lora_config(cfg.lora, cfg.trainable)
                if peft_model is None:
                    peft_model = get_peft_model(model, lcfg, adapter_name=name)
                else:
                    peft_model.add_adapter(name, lcfg)
        self.model: Any = peft_model
        for n, p in self.model.named_parameters():  # the base stays frozen whatever peft did
            if not any(a in n.split(".") for a in names):
                p.requires_grad_(False)
        if first.gradient_checkpointing:
            enable_checkpointing(self.model)
        generators = generators or {}
        self.sampling_copy: torch.nn.Module | None = None  # asynchronous co-training: see sampling_model
        self.views: dict[str, AdapterPolicy] = {
            name: AdapterPolicy(self, name, cfg, generators.get(name)) for name, cfg in configs.items()
        }
        self.activate(names[0])

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_configs(
        cls,
        synthesizer: PolicyConfig,
        reasoner: PolicyConfig,
        model_path: str | None = None,
        adapter_dirs: Sequence[str | Path | None] = (None, None),
    ) -> "SharedBase":
        """Load the base once from ``model_path`` (default: the configs' common ``model_path``).

        ``adapter_dirs`` (synthesizer, reasoner) override each config's
        ``lora.adapter_path`` when given (resume from a checkpoint).
        """
        from transformers import AutoModelForCausalLM, AutoTokenizer

        problems = shared_base_problems(synthesizer, reasoner)
        if problems:
            raise ValueError("shared_base: " + "; ".join(problems))
        configs: dict[str, PolicyConfig] = {}
        for role, cfg, ad in zip(ROLES, (synthesizer, reasoner), adapter_dirs, strict=True):
            assert cfg.lora is not None
            if ad is not None:
                cfg = cfg.model_copy(update={"lora": cfg.lora.model_copy(update={"adapter_path": str(ad)})})
            configs[role] = cfg
        path = model_path or synthesizer.model_path
        tokenizer = AutoTokenizer.from_pretrained(path)
        kwargs: dict[str, Any] = {"dtype": DTYPES[synthesizer.dtype]}
        if synthesizer.attn_implementation:
            kwargs["attn_implementation"] = synthesizer.attn_implementation
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
        return cls(model, tokenizer, configs)

    @property
    def synthesizer(self) -> "AdapterPolicy":
        return self.views["synthesizer"]

    @property
    def reasoner(self) -> "AdapterPolicy":
        return self.views["reasoner"]

    # ------------------------------------------------------------------ adapters

    def activate(self, name: str) -> None:
        """Make ``name`` the adapter used by every forward pass (trainable unless its agent is frozen).

        Always calls ``set_adapter`` (cheap), so the state is right even if
        someone switched the adapter behind this object's back.
        """
        view = self.views.get(name)
        trainable = view.config.trainable if view is not None else False
        self.model.set_adapter(name, inference_mode=not trainable)

    @property
    def active_adapter(self) -> str:
        return str(self.model.active_adapter)

    def adapter_parameters(self, name: str) -> list[tuple[str, torch.nn.Parameter]]:
        """``(name, parameter)`` of adapter ``name`` (its name is one component of the parameter's dotted name)."""
        return [(n, p) for n, p in self.model.named_parameters() if name in n.split(".")]

    def base_parameters(self) -> list[tuple[str, torch.nn.Parameter]]:
        """The shared (frozen) base model's parameters."""
        names = set(self.views)
        return [(n, p) for n, p in self.model.named_parameters() if not names.intersection(n.split("."))]

    def sampling_model(self) -> torch.nn.Module:
        """The one copy of the shared model (base and adapters) that the agents sample apart from their updates
        (asynchronous co-training; made on first use): one more base in memory for both agents, and sampling
        never switches the adapter of the model an update is training. Each agent's publish copies its own
        adapter into it; the frozen base view samples it with the adapters disabled."""
        if self.sampling_copy is None:
            self.sampling_copy = frozen_copy(self.model)
        return self.sampling_copy

    def save_adapter(self, name: str, path: str | Path) -> None:
        """``path/adapter_config.json`` + ``adapter_model.safetensors`` of adapter ``name``, and the tokenizer.

        peft writes a non-default adapter into a sub-folder named after it; it is
        written into a temporary folder next to ``path`` and its files moved up.
        """
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
        try:
            self.model.save_pretrained(tmp, selected_adapters=[name])
            for f in (tmp / name).iterdir():
                os.replace(f, path / f.name)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self.tokenizer.save_pretrained(path)

    def merged_copy(self, name: str) -> torch.nn.Module:
        """A plain HF model: the base with adapter ``name`` merged in (a copy; the shared model is untouched)."""
        model = copy.deepcopy(self.model)
        return model.merge_and_unload(adapter_names=[name])


class AdapterPolicy(HFPolicy):
    """One agent of a :class:`SharedBase`: an :class:`HFPolicy` over the shared model, restricted to one adapter.

    Built by :class:`SharedBase`; ``model`` is the shared ``PeftModel``. Call
    :meth:`activate` before using ``model`` directly; ``generate``, ``update``,
    ``compute_gradients``, ``save`` and ``merge_and_save`` do it themselves.
    """

    def __init__(self, shared: SharedBase, adapter_name: str, config: PolicyConfig,
                 generator: Sampler | None = None) -> None:
        self.shared = shared
        self.adapter_name = adapter_name
        self.config = config
        self.device = shared.device
        self.is_peft = True
        self._bind(shared.model, shared.tokenizer, None, generator)  # KL reference: the base with adapters disabled

    def activate(self) -> None:
        """Route every forward pass of the shared model through this agent's adapter."""
        self.shared.activate(self.adapter_name)

    def _sampler_view(self) -> Callable[[torch.nn.Module], AbstractContextManager[None]] | None:
        """Sampling goes through this agent's adapter, on whichever copy of the shared model the sampler holds."""
        name, trainable = self.adapter_name, self.config.trainable
        return lambda model: _adapter(model, name, trainable)

    def _snapshot(self) -> Sampler:
        """The sampler on the shared base's one sampling copy (:meth:`SharedBase.sampling_model`)."""
        assert isinstance(self.generator, HFGenerator)
        return SnapshotSampler(self.generator, self.step, [name for name, _ in self.trainable_parameters()],
                               model=self.shared.sampling_model())

    def trainable_parameters(self) -> list[tuple[str, torch.nn.Parameter]]:
        """This adapter's parameters (none for a frozen agent); the other adapter and the base never appear."""
        if not self.config.trainable:
            return []
        return self.shared.adapter_parameters(self.adapter_name)

    def compute_gradients(
        self, batch: Sequence[Experience], old_cache: dict[int, torch.Tensor] | None = None
    ) -> GradientStats:
        self.activate()
        return super().compute_gradients(batch, old_cache)

    def update(self, batch: Sequence[Experience]) -> UpdateStats:
        self.activate()
        return super().update(batch)

    def sft_update(self, batch: Sequence[SFTExample], lr: float | None = None) -> UpdateStats:
        self.activate()
        return super().sft_update(batch, lr)

    def save(self, path: str | Path) -> None:
        """This agent's adapter alone (``adapter_config.json`` + weights) and the tokenizer."""
        self.shared.save_adapter(self.adapter_name, path)

    def merge_and_save(self, path: str | Path) -> None:
        """A full HF model: this adapter merged into a copy of the base, and the tokenizer."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        merged = self.shared.merged_copy(self.adapter_name)
        merged.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        del merged


class BaseView(AdapterPolicy):
    """The shared base with every adapter disabled, as a frozen policy.

    With freshly initialised LoRA adapters (peft's ``lora_B = 0``) this *is* the
    agents' initial model, so a frozen consensus checker under ``shared_base``
    costs no second copy of the base. It never trains and saves nothing.
    """

    def __init__(self, shared: SharedBase, config: PolicyConfig) -> None:
        super().__init__(shared, "", config.model_copy(update={"trainable": False, "lora": None}))
        if shared.sampling_copy is not None:  # the agents sample apart from their updates: so does this view
            self.generator = HFGenerator(shared.sampling_copy, self.tokenizer, self.eos_ids, self.pad_id,
                                         batch_size=config.generation_batch_size, view=_no_adapter)

    def activate(self) -> None:
        """Nothing to route: generation runs with the adapters disabled."""

    def trainable_parameters(self) -> list[tuple[str, torch.nn.Parameter]]:
        return []

    def _sampler_view(self) -> Callable[[torch.nn.Module], AbstractContextManager[None]] | None:
        return _no_adapter

    def save(self, path: str | Path) -> None:
        raise RuntimeError("the base view of a shared base is frozen and has no weights of its own to save")


@contextmanager
def _adapter(model: Any, name: str, trainable: bool) -> Iterator[None]:
    """Sample through adapter ``name`` of a shared model (as :meth:`SharedBase.activate` sets it)."""
    model.set_adapter(name, inference_mode=not trainable)
    yield


@contextmanager
def _no_adapter(model: Any) -> Iterator[None]:
    """Sample the shared base with every adapter disabled."""
    with model.disable_adapter():
        yield
