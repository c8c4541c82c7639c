"""Old module paths (before the layered packages of 0.2) as aliases of their new homes, for one release.

``import synco.trainer`` still works and gives the very module object of ``synco.run.trainer``
(so ``mock.patch("synco.trainer.x")`` patches the real module). ``synco.answers`` and ``synco.grading.answers``
(split into the modules of ``synco.grading``) give the ``synco.grading`` package, which exports the public
answer API. A meta-path finder resolves them on
demand, so nothing is imported until an old path is asked for; ``docs/CHANGELOG.md`` lists them.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from types import ModuleType

MOVED: dict[str, str] = {
    "synco.records": "synco.core.records",
    "synco.sampling": "synco.core.sampling",
    "synco.policy": "synco.core.policy",
    "synco.prompts": "synco.core.prompts",
    "synco.threads": "synco.core.threads",
    "synco.pool": "synco.core.pool",
    "synco.report": "synco.core.report",
    "synco.rewards": "synco.core.rewards",
    "synco.distributed.seeds": "synco.core.seeds",
    "synco.rollout.config": "synco.core.rollout_config",
    "synco.answers": "synco.grading",
    "synco.grading.answers": "synco.grading",
    "synco.cards": "synco.grading.cards",
    "synco.verifier": "synco.grading.verifier",
    "synco.novelty": "synco.grading.novelty",
    "synco.contamination": "synco.grading.contamination",
    "synco.benchmarks": "synco.grading.benchmarks",
    "synco.domain": "synco.domains.base",
    "synco.worlds.arith": "synco.domains.arith",
    "synco.worlds.math": "synco.domains.math",
    "synco.worlds.charlm": "synco.learn.charlm",
    "synco.card_decoding": "synco.rollout.card_decoding",
    "synco.grpo": "synco.learn.grpo",
    "synco.hf_policy": "synco.learn.hf_policy",
    "synco.precision": "synco.learn.precision",
    "synco.shared_base": "synco.learn.shared_base",
    "synco.distributed.fsdp": "synco.learn.fsdp",
    "synco.protocols.sft": "synco.learn.sft",
    "synco.models": "synco.learn.models",
    "synco.merge": "synco.learn.merge",
    "synco.pretrain": "synco.learn.pretrain",
    "synco.engine": "synco.cotrain.engine",
    "synco.health": "synco.cotrain.health",
    "synco.protocols": "synco.cotrain.protocols",
    "synco.protocols.config": "synco.cotrain.protocols.config",
    "synco.protocols.rounds": "synco.cotrain.protocols.rounds",
    "synco.protocols.alternating": "synco.cotrain.protocols.alternating",
    "synco.protocols.steps": "synco.run.steps",
    "synco.labels": "synco.eval.labels",
    "synco.evaluation": "synco.eval.evaluation",
    "synco.eval_metrics": "synco.eval.metrics",
    "synco.data": "synco.eval.data",
    "synco.trainer": "synco.run.trainer",
    "synco.distributed.ray_config": "synco.config.ray",
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
    """Put the alias finder first on ``sys.meta_path`` (once). It answers only for the old paths, none of which
    exists as a module any more; first, because ``synco/prompts/`` (the template folder) would otherwise be
    found as an empty namespace package for ``synco.prompts``."""
    if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _AliasFinder())
