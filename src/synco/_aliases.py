"""Old module paths (before the layered packages of 0.2) as aliases of their new homes, for one release.

``import synco.grading.answers`` still works and gives the very module object of ``synco.grading.answers``
(so ``mock.patch("synco.run.trainer.x")`` patches the real module). A meta-path finder resolves them on
demand, so nothing is imported until an old path is asked for; ``docs/CHANGELOG.md`` lists them.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from types import ModuleType

MOVED: dict[str, str] = {
    "synco.core.records": "synco.core.records",
    "synco.core.sampling": "synco.core.sampling",
    "synco.core.policy": "synco.core.policy",
    "synco.core.prompts": "synco.core.prompts",
    "synco.core.threads": "synco.core.threads",
    "synco.core.pool": "synco.core.pool",
    "synco.core.report": "synco.core.report",
    "synco.core.rewards": "synco.core.rewards",
    "synco.core.seeds": "synco.core.seeds",
    "synco.core.rollout_config": "synco.core.rollout_config",
    "synco.grading.answers": "synco.grading.answers",
    "synco.grading.cards": "synco.grading.cards",
    "synco.grading.verifier": "synco.grading.verifier",
    "synco.grading.novelty": "synco.grading.novelty",
    "synco.grading.contamination": "synco.grading.contamination",
    "synco.grading.benchmarks": "synco.grading.benchmarks",
    "synco.domains.base": "synco.domains.base",
    "synco.domains.arith": "synco.domains.arith",
    "synco.domains.math": "synco.domains.math",
    "synco.learn.charlm": "synco.learn.charlm",
    "synco.rollout.card_decoding": "synco.rollout.card_decoding",
    "synco.learn.grpo": "synco.learn.grpo",
    "synco.learn.hf_policy": "synco.learn.hf_policy",
    "synco.learn.precision": "synco.learn.precision",
    "synco.learn.shared_base": "synco.learn.shared_base",
    "synco.learn.fsdp": "synco.learn.fsdp",
    "synco.learn.sft": "synco.learn.sft",
    "synco.learn.models": "synco.learn.models",
    "synco.learn.merge": "synco.learn.merge",
    "synco.learn.pretrain": "synco.learn.pretrain",
    "synco.cotrain.engine": "synco.cotrain.engine",
    "synco.cotrain.health": "synco.cotrain.health",
    "synco.cotrain.protocols": "synco.cotrain.protocols",
    "synco.cotrain.protocols.config": "synco.cotrain.protocols.config",
    "synco.cotrain.protocols.rounds": "synco.cotrain.protocols.rounds",
    "synco.cotrain.protocols.alternating": "synco.cotrain.protocols.alternating",
    "synco.run.steps": "synco.run.steps",
    "synco.eval.labels": "synco.eval.labels",
    "synco.eval.evaluation": "synco.eval.evaluation",
    "synco.eval.metrics": "synco.eval.metrics",
    "synco.eval.data": "synco.eval.data",
    "synco.run.trainer": "synco.run.trainer",
    "synco.config.ray": "synco.config.ray",
}
"""Old module path -> new module path."""

_OLD_PACKAGES = frozenset({"synco.worlds"})
"""Old packages whose every module moved: importable (empty) so ``synco.domains.arith`` resolves."""


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str | None) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        if self.target is None:
            module = ModuleType(spec.name)
            module.__path__ = []  # a package, so its old submodules can be looked up
            return module
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the target module was executed by its own import."""


class _AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname in MOVED:
            return importlib.util.spec_from_loader(fullname, _AliasLoader(MOVED[fullname]))
        if fullname in _OLD_PACKAGES:
            return importlib.util.spec_from_loader(fullname, _AliasLoader(None), is_package=True)
        return None


def install() -> None:
    """Put the alias finder on ``sys.meta_path`` (once); real modules are always found first."""
    if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.append(_AliasFinder())
