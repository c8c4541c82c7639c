"""synco.learn.models.model_problem: can a configured model be loaded here, found without reading weights."""

from __future__ import annotations

from pathlib import Path

import huggingface_hub
import pytest
from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

from synco.learn.models import hub_cache_dir, model_problem


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty hub cache under tmp_path; the hub itself fails the test if it is asked."""
    cache = tmp_path / "hf-cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", lambda self, repo_id, **k: pytest.fail("hub asked"))
    return cache


def _cached(cache: Path, repo_id: str) -> None:
    """``repo_id``'s config.json in the hub cache's layout (refs/main -> snapshots/<rev>/)."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "config.json").write_text("{}")


def _raises(monkeypatch: pytest.MonkeyPatch, error: BaseException) -> None:
    def model_info(self, repo_id, **kwargs):
        raise error

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", model_info)


def test_what_needs_no_hub(hub: Path, tmp_path: Path) -> None:
    assert model_problem("builtin:arith/reasoner") is None
    folder = tmp_path / "model"
    folder.mkdir()
    assert "without config.json" in (model_problem(str(folder)) or "")
    (folder / "config.json").write_text("{}")
    assert model_problem(str(folder)) is None
    assert "not a hub id" in (model_problem("no such folder/../x y") or "")


def test_a_cached_hub_model_needs_no_network(hub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert hub_cache_dir() == hub
    _cached(hub, "org/model")
    assert model_problem("org/model") is None
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert model_problem("org/model") is None
    assert "HF_HUB_OFFLINE" in (model_problem("org/other") or "")


def test_the_hub_is_asked_once_and_its_answer_says_what_to_do(hub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked = []
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", lambda self, repo_id, **k: asked.append(repo_id))
    assert model_problem("org/model") is None and asked == ["org/model"]
    _raises(monkeypatch, RepositoryNotFoundError.__new__(RepositoryNotFoundError, "404"))
    assert "no model of that id on the Hugging Face hub" in (model_problem("org/model") or "")
    _raises(monkeypatch, GatedRepoError.__new__(GatedRepoError, "403"))
    assert "gated" in (model_problem("org/model") or "")
    _raises(monkeypatch, ConnectionError("Name or service not known\nmore"))
    why = model_problem("org/model") or ""
    assert "could not be reached to fetch it (ConnectionError: Name or service not known)" in why
    assert why.endswith("or run where the hub is reachable (a hub id is downloaded on first use)")
