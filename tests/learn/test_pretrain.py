"""The warm-start trainer: encodings, schedule, one agent trained on a stream it is handed (no world), spawn workers."""

from __future__ import annotations

import random
from collections.abc import Generator
from functools import partial
from pathlib import Path

import pytest
import torch

from synco.learn.charlm import char_tokenizer
from synco.learn.pretrain import TinyRole, encode_pairs, encode_segments, lr_at, train_roles, train_saved

CLOSED: list[str] = []


def test_encode_pairs_puts_labels_on_completion_and_eos_only() -> None:
    tok = char_tokenizer()
    ids, mask, labels = encode_pairs(tok, [("ab", "c"), ("a", "bcd")])
    a, b, c, d = (tok.convert_tokens_to_ids(ch) for ch in "abcd")
    eos, pad = tok.eos_token_id, tok.pad_token_id
    assert ids.tolist() == [[a, b, c, eos, pad], [a, b, c, d, eos]]
    assert mask.tolist() == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    assert labels.tolist() == [[-100, -100, c, eos, -100], [-100, b, c, d, eos]]


def test_labels_cover_agent_turns_and_their_eos_only() -> None:
    tok = char_tokenizer()
    rows = [[("T:go\n", False), ("find_user(bob)", True), ("\n=u2,24\n", False), ("done()", True)]]
    ids, mask, labels = encode_segments(tok, rows)
    text_ids = tok("T:go\nfind_user(bob)", add_special_tokens=False)["input_ids"]
    eos = tok.eos_token_id
    n_prompt = len("T:go\n")
    assert labels[0, :n_prompt].tolist() == [-100] * n_prompt
    call = len("find_user(bob)")
    assert labels[0, n_prompt:n_prompt + call].tolist() == text_ids[n_prompt:]
    assert labels[0, n_prompt + call].item() == eos
    obs_at = n_prompt + call + 1
    assert labels[0, obs_at:obs_at + len("\n=u2,24\n")].tolist() == [-100] * len("\n=u2,24\n")
    assert int(mask.sum()) == len(ids[0])
    assert labels[0, -1].item() == eos and (labels[0] != -100).sum().item() == call + 1 + len("done()") + 1


def test_lr_schedule() -> None:
    assert lr_at(0, 100, 1e-3, 10) == pytest.approx(1e-4)
    assert lr_at(9, 100, 1e-3, 10) == pytest.approx(1e-3)
    assert lr_at(10, 100, 1e-3, 10) == pytest.approx(1e-3)
    assert lr_at(55, 100, 1e-3, 10) == pytest.approx(1e-3 * (0.1 + 0.45))  # cosine midpoint
    assert lr_at(100, 100, 1e-3, 10) == pytest.approx(1e-4)


def sums(rng: random.Random, tag: str) -> Generator[tuple[str, str], None, None]:
    """A stream no world wrote: ``a+b=`` -> the sum; records its closing in ``CLOSED``."""
    try:
        while True:
            a, b = rng.randrange(10), rng.randrange(10)
            yield f"{a}+{b}=", str(a + b)
    finally:
        CLOSED.append(tag)


def _role(out: Path, seed: int, tag: str) -> TinyRole:
    return TinyRole(world="sums", role="reasoner", out_dir=out, seed=seed, steps=3, batch=4, lr=1e-3,
                    examples=partial(sums, tag=tag), hidden=32, layers=1, max_positions=32, progress=False)


def test_an_agent_trains_on_the_stream_it_is_handed(tmp_path: Path) -> None:
    """Same seed, same weights (also from a spawned worker); another seed, others; the stream is closed after."""
    from safetensors.torch import load_file

    CLOSED.clear()
    loss, n_params = train_saved(_role(tmp_path / "a", 3, "a"))
    assert CLOSED == ["a"] and loss > 0 and 0 < n_params < 100_000
    train_saved(_role(tmp_path / "b", 3, "b"))
    (worker_loss, _), _ = train_roles(train_saved, [_role(tmp_path / "c", 3, "c"), _role(tmp_path / "d", 4, "d")],
                                      parallel=True)
    a, b, c, d = (load_file(str(tmp_path / r / "reasoner" / "model.safetensors")) for r in "abcd")
    assert all(torch.equal(a[k], b[k]) and torch.equal(a[k], c[k]) for k in a) and worker_loss == loss
    assert not all(torch.equal(a[k], d[k]) for k in a)
    assert (tmp_path / "a" / "reasoner" / "tokenizer.json").is_file()


_ORPHAN_PARENT = """
import multiprocessing, os, sys, time
from concurrent.futures import ProcessPoolExecutor
from synco.learn.pretrain import exit_with_parent

if __name__ == "__main__":
    pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                               initializer=exit_with_parent, initargs=(os.getpid(), 0.1))
    print(pool.submit(os.getpid).result(), flush=True)  # the worker is up and watching
    pool.submit(time.sleep, 120)
    time.sleep(120)
"""


def _running(pid: int) -> bool:
    """Alive and not a zombie (an exited orphan stays a zombie until init reaps it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_spawn_workers_exit_when_their_parent_is_killed(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "parent.py"
    script.write_text(_ORPHAN_PARENT)
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        worker = int(parent.stdout.readline())
        os.kill(parent.pid, signal.SIGKILL)  # no cleanup runs in the parent
        parent.wait(timeout=10)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if not _running(worker):
                return
            time.sleep(0.1)
        os.kill(worker, signal.SIGKILL)
        pytest.fail(f"worker {worker} still running 15 s after its parent was killed")
    finally:
        parent.kill()
