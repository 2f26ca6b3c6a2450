"""Test helpers over HTTP: a counting, fault-injecting proxy in front of a model server, and the sample requests
the model tests share. The server itself is ``metaharness.models.llama_server.LlamaServer``.

``FaultProxy`` forwards every request to a server, counts them per method and path, and can answer the next
requests itself with injected errors (429 with ``retry-after``, 500, ...), so tests can see that a cache hit makes
no request and that the client retries.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

from fakes import send_json

from metaharness.models import Tool

# Requests the model tests send to every backend: a small JSON schema and a tool with integer arguments.
ANSWER_SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "enum": ["yes", "no"]},
        "confidence": {"type": "integer", "minimum": 0, "maximum": 10},
    },
    "required": ["answer", "confidence"],
}
ADD_TOOL = Tool(
    "add",
    "Add two integers.",
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]},
)


class FaultProxy:
    """An HTTP proxy on 127.0.0.1 in front of ``upstream`` (a base URL): counts requests, injects faults.

    ``counts[("POST", "/v1/chat/completions")]`` is the number of requests that reached the proxy (forwarded or
    answered with a fault); ``bodies`` keeps the JSON bodies of POST requests in order.
    """

    def __init__(self, upstream: str):
        parsed = urlparse(upstream)
        assert parsed.hostname is not None, upstream
        self.upstream_host, self.upstream_port = parsed.hostname, parsed.port
        self.counts: Counter[tuple[str, str]] = Counter()
        self.bodies: list[dict] = []
        self._faults: list[tuple[int, dict, dict[str, str]]] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _handle(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                with proxy._lock:
                    proxy.counts[(self.command, self.path)] += 1
                    if self.command == "POST" and body:
                        proxy.bodies.append(json.loads(body))
                    fault = proxy._faults.pop(0) if proxy._faults and self.command == "POST" else None
                if fault is not None:
                    send_json(self, *fault)
                    return
                upstream = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=300)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                upstream.request(self.command, self.path, body=body or None, headers=headers)
                response = upstream.getresponse()
                data = response.read()
                self.send_response(response.status)
                for name, value in response.getheaders():
                    if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(name, value)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                upstream.close()

            do_GET = do_POST = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def inject(self, status: int, *, headers: dict[str, str] | None = None, message: str = "injected fault") -> None:
        """Answer the next not-yet-faulted POST with ``status`` instead of forwarding it."""
        payload = {"error": {"message": message, "type": "injected", "code": status}}
        with self._lock:
            self._faults.append((status, payload, headers or {}))

    def heal(self) -> None:
        """Drop the faults not yet answered: every later request is forwarded."""
        with self._lock:
            self._faults.clear()

    def posts(self, path: str = "/v1/chat/completions") -> int:
        with self._lock:
            return self.counts[("POST", path)]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
