"""A local HTTP server for the framework drop-ins' tests and benchmarks: it answers every POST
on 127.0.0.1 with the next canned ``(status, body)`` of its queue (or the default body), and
records each request's path and JSON body. It stops answering after ``limit`` requests.
:func:`json_handler` is the request handler under it, for servers that answer otherwise;
:func:`bounded_server` serves one for a block (the framework live tests, which the suite scripts
run with a copy of this file beside them)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections import deque
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_REQUESTS = 500  # bounded_server's loop is bounded


def json_handler(answer: Callable[[str, bytes], tuple[int, bytes]],
                 protocol: str = "HTTP/1.1") -> type[BaseHTTPRequestHandler]:
    """A handler class answering each POST with ``answer(path, request body)``: a status and a
    JSON body. It logs nothing; a 5xx asks for a retry after 10 ms (the SDKs' retries honour
    it: 10 ms, not 0.5-8 s)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = protocol

        def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
            length = int(self.headers.get("Content-Length") or 0)
            status, body = answer(self.path, self.rfile.read(length) if length else b"")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            if status >= 500:
                self.send_header("retry-after-ms", "10")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@contextlib.contextmanager
def bounded_server(answer: Callable[[str, bytes], tuple[int, bytes]],
                   protocol: str = "HTTP/1.0") -> Iterator[str]:
    """Serve ``answer`` (see :func:`json_handler`) on 127.0.0.1 for the block, at most
    :data:`MAX_REQUESTS` requests; yields ``127.0.0.1:port``."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), json_handler(answer, protocol))

    def serve() -> None:
        for _ in range(MAX_REQUESTS):
            if getattr(httpd, "stopping", False):
                break
            httpd.handle_request()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.stopping = True  # type: ignore[attr-defined]
        httpd.server_close()


class CannedServer:
    """``with CannedServer() as server: server.push(body); ... server.url``."""

    def __init__(self, default: bytes | None = None, limit: int = 100_000) -> None:
        self.queue: deque[tuple[int, bytes]] = deque()
        self.default = default
        self.limit = limit
        self.requests: list[tuple[str, Any]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), json_handler(self._next))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    def _next(self, path: str, sent: bytes) -> tuple[int, bytes]:
        with self._lock:
            if len(self.requests) >= self.limit:
                return 503, b'{"error": "request limit of the test server reached"}'
            try:
                request = json.loads(sent) if sent else None
            except ValueError:
                request = sent
            self.requests.append((path, request))
            if self.queue:
                return self.queue.popleft()
            if self.default is None:
                return 500, b'{"error": "no canned response"}'
            return 200, self.default

    def push(self, body: bytes, status: int = 200) -> None:
        with self._lock:
            self.queue.append((status, body))

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> CannedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


# --- Fireworks-shaped /v1/completions bodies ------------------------------------------------------

# The defects planted in a Fireworks body (see fireworks_completion).
DEFECTS = ("n_plus_1", "ids_short", "missing_sampling_logprob", "null_logprob", "sentinel", "nan",
           "positive", "no_token_id", "no_content")


def fireworks_completion(n: int, seed: int = 0, *, defect: str | None = None, prompt_tokens: int = 37,
                         prompt_ids: bool = False, token_ids: bool = False, usage: bool = True,
                         raw_output: bool = False) -> bytes:
    """A ``/v1/completions`` body as Fireworks sends it for ``logprobs: true``: one choice whose
    ``logprobs.content[]`` entries carry ``token``, ``logprob``, ``sampling_logprob``,
    ``token_id``, ``bytes``, ``text_offset`` and ``top_logprobs``; ``usage`` counts ``n``
    tokens. Distinct per ``seed``. ``defect`` plants one fault (:data:`DEFECTS`)."""
    import random

    rng = random.Random(seed * 1_000_003 + n)
    entries = []
    offset = 0
    count = n + 1 if defect == "n_plus_1" else n
    for t in range(count):
        token_id = rng.randrange(0, 151_000)
        token = "".join(rng.choice("abcdefghij klmnop") for _ in range(rng.randrange(1, 6)))
        logprob = -rng.expovariate(2.0)
        sampling = logprob - rng.random() * 0.01
        entry: dict[str, Any] = {"token": token, "logprob": round(logprob, 6), "sampling_logprob": round(sampling, 8),
                                 "token_id": token_id, "bytes": list(token.encode()), "text_offset": offset,
                                 "top_logprobs": []}
        offset += len(token)
        entries.append(entry)
    middle = entries[len(entries) // 2] if entries else {}
    if defect == "missing_sampling_logprob":
        del middle["sampling_logprob"]
    elif defect == "null_logprob":
        middle["sampling_logprob"] = None
    elif defect == "sentinel":
        middle["sampling_logprob"] = -9999.0
    elif defect == "nan":
        middle["sampling_logprob"] = float("nan")
    elif defect == "positive":
        middle["sampling_logprob"] = 0.25
    elif defect == "no_token_id":
        del middle["token_id"]
    ids = [e.get("token_id", 0) for e in entries[:n]]
    if defect == "ids_short":
        ids = ids[:-1]
    choice: dict[str, Any] = {"index": 0, "text": "".join(e["token"] for e in entries),
                              "logprobs": {"content": entries}, "finish_reason": "stop" if n % 3 else "length"}
    if defect == "no_content":
        choice["logprobs"] = {"tokens": [e["token"] for e in entries],
                              "token_logprobs": [e["sampling_logprob"] for e in entries], "token_ids": ids}
    prompt = [rng.randrange(0, 151_000) for _ in range(prompt_tokens)]
    if prompt_ids:
        choice["prompt_token_ids"] = prompt
    if token_ids or defect == "ids_short":
        choice["token_ids"] = ids
    if raw_output:
        choice["raw_output"] = {"prompt_fragments": ["<|im_start|>user\n", "hi"], "prompt_token_ids": prompt,
                                "completion": choice["text"], "completion_token_ids": ids}
    body: dict[str, Any] = {"id": f"cmpl-{seed}-{n}", "object": "text_completion", "created": 1_765_000_000 + seed,
                            "model": "accounts/fireworks/models/qwen3-8b", "choices": [choice]}
    if usage:
        body["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n}
    return json.dumps(body, separators=(",", ":")).encode()


# --- vLLM-shaped OpenAI-compatible bodies (return_token_ids, logprobs) ------------------------------


def vllm_completion(n: int, seed: int = 0, *, chat: bool = False, defect: str | None = None,
                    prompt_tokens: int = 21) -> bytes:
    """A vLLM ``/v1/completions`` (or, with ``chat``, ``/v1/chat/completions``) body for
    ``return_token_ids: true`` and ``logprobs``: ``token_ids`` beside the logprobs, the prompt's
    ids, ``usage``. ``defect``: ``"n_plus_1"`` (one logprob more than ids), ``"sentinel"``
    (-9999), ``"null_logprob"``."""
    import random

    rng = random.Random(seed * 7_919 + n + (1 if chat else 0))
    ids = [rng.randrange(0, 151_000) for _ in range(n)]
    tokens = ["".join(rng.choice("qrstuvwxyz ") for _ in range(rng.randrange(1, 5))) for _ in range(n)]
    logprobs: list[Any] = [round(-rng.expovariate(1.5), 7) for _ in range(n)]
    if defect == "n_plus_1":
        logprobs.append(-0.5)
        tokens.append("x")
    elif defect == "sentinel":
        logprobs[n // 2] = -9999.0
    elif defect == "null_logprob":
        logprobs[n // 2] = None
    prompt = [rng.randrange(0, 151_000) for _ in range(prompt_tokens)]
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n}
    text = "".join(tokens[:n])
    if chat:
        content = [{"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
                   for t, lp in zip(tokens, logprobs)]
        body: dict[str, Any] = {
            "id": f"chatcmpl-{seed}", "object": "chat.completion", "created": 1_765_000_000, "model": "qwen3-8b",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "tool_calls": []},
                         "logprobs": {"content": content}, "finish_reason": "stop", "stop_reason": None,
                         "token_ids": ids}],
            "prompt_token_ids": prompt, "usage": usage}
    else:
        offsets = [sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]
        body = {
            "id": f"cmpl-{seed}", "object": "text_completion", "created": 1_765_000_000, "model": "qwen3-8b",
            "choices": [{"index": 0, "text": text, "finish_reason": "length", "stop_reason": None,
                         "logprobs": {"text_offset": offsets, "token_logprobs": logprobs, "tokens": tokens,
                                      "top_logprobs": [{t: lp} for t, lp in zip(tokens, logprobs)]},
                         "prompt_token_ids": prompt, "token_ids": ids}],
            "usage": usage}
    return json.dumps(body, separators=(",", ":")).encode()
