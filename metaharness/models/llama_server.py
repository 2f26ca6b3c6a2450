"""A real OpenAI-compatible model server on 127.0.0.1: llama.cpp's (``python -m llama_cpp.server``) with a GGUF.

For tests and benchmarks that need a server to talk to over HTTP, and for anyone who wants the embedded model behind
an ``openai:MODEL@http://127.0.0.1:PORT/v1`` spec. The model loads in about a second::

    server = LlamaServer(gguf_path("smollm2-135m"))
    server.wait_ready()
    client = connect(f"openai:smollm2-135m@{server.base_url}")
    ...
    server.stop()
"""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LlamaServer:
    """``python -m llama_cpp.server`` serving one GGUF file; ``base_url`` is ``http://127.0.0.1:PORT/v1``."""

    def __init__(self, gguf: Path, *, alias: str = "smollm2-135m", n_ctx: int = 4096):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        command = [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(gguf),
            "--model_alias",
            alias,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_ctx",
            str(n_ctx),
        ]
        # The server logs every request; a file (not a pipe nobody reads) keeps it from ever blocking.
        self.log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - lives as long as the server; stop() closes it
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.log.seek(0)
                tail = self.log.read()[-2000:]
                self.stop()
                raise RuntimeError(f"llama_cpp.server exited early: {tail}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"llama_cpp.server did not answer on {self.base_url} within {timeout} s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
