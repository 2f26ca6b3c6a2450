"""The coding agent's transcript stays within the proposer model's context window over a long session.

A scripted tool-calling server speaks OpenAI's chat-completions shape (``tool_calls`` with JSON-string arguments)
on a real local socket and refuses, as real servers do, a request longer than its context window (HTTP 400,
``context_length_exceeded``). The real ``openai`` client reaches it through ``metaharness.models.connect``.
The agent reads big files for 60 turns and more, then copies, edits, submits and finishes; each request the
server received is measured there.
"""

from __future__ import annotations

import json
import math
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from fakes import send_json
from test_proposers_offline import _state

from metaharness.errors import MetaharnessError
from metaharness.models import RetryPolicy, connect
from metaharness.proposers import get_proposer
from metaharness.proposers.coding import CHARS_PER_TOKEN
from metaharness.tasks import get_task

CONTEXT = 16384  # the server's window, in tokens as the server counts them (characters / CHARS_PER_TOKEN)
MAX_TOKENS = 1024
READS = ["candidates/c1/harness.py", "README.md", "candidates/c0/harness.py", "summary.md", "candidates/c1/info.json"]
READING_TURNS = 62


def script(turn: int) -> tuple[str, dict]:
    """The tool call of the model's ``turn``-th reply: 62 reads and greps, then copy, edit, submit, finish."""
    if turn < READING_TURNS:
        if turn % 7 == 6:
            return "grep", {"pattern": "def |K = ", "path": "candidates"}
        return "read_file", {"path": READS[turn % len(READS)]}
    return [
        ("copy_candidate", {"candidate_id": "c1", "name": "k4"}),
        ("edit_file", {"path": "new/k4/harness.py", "old": "K = 8", "new": "K = 4"}),
        ("submit", {"name": "k4", "parent": "c1", "summary": "retrieve 4 examples", "hypothesis": "less noise"}),
        ("finish", {}),
    ][min(turn - READING_TURNS, 3)]


def request_tokens(body: dict) -> int:
    """The server's count of a request's prompt: its messages and tools as sent, over CHARS_PER_TOKEN."""
    return math.ceil(len(json.dumps(body["messages"]) + json.dumps(body.get("tools", []))) / CHARS_PER_TOKEN)


class ToolCallingServer:
    """OpenAI-compatible: ``POST /v1/chat/completions`` answers the scripted tool call for the request's turn (the
    number of assistant messages it holds), or 400 when prompt plus ``max_tokens`` exceed ``CONTEXT``."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.refused = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                status, payload = server.answer(body)
                send_json(self, status, payload)

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.http.server_address[1]}/v1"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def answer(self, body: dict) -> tuple[int, dict]:
        prompt = request_tokens(body)
        with self.lock:
            self.bodies.append(body)
            if prompt + body["max_tokens"] > CONTEXT:
                self.refused += 1
                message = (
                    f"This model's maximum context length is {CONTEXT} tokens. However, you requested "
                    f"{prompt + body['max_tokens']} tokens. Please reduce the length of the messages."
                )
                error = {"message": message, "type": "invalid_request_error", "code": "context_length_exceeded"}
                return 400, {"error": error}
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
        name, arguments = script(turn)
        function = {"name": name, "arguments": json.dumps(arguments)}
        call = {"id": f"call_{turn}", "type": "function", "function": function}
        reply = {"role": "assistant", "content": None, "tool_calls": [call]}
        usage = {"prompt_tokens": prompt, "completion_tokens": 20, "total_tokens": prompt + 20}
        choice = {"index": 0, "finish_reason": "tool_calls", "message": reply}
        return 200, {"id": "x", "object": "chat.completion", "model": "agent", "choices": [choice], "usage": usage}

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def server():
    served = ToolCallingServer()
    yield served
    served.close()


def proposer(server: ToolCallingServer, task, run_dir, **settings):
    client = connect(f"openai:agent@{server.base_url}", cache=False, server="vllm", retry=RetryPolicy(max_attempts=1))
    return get_proposer("coding", model=client, task=task, run_dir=run_dir, max_tokens=MAX_TOKENS, **settings)


def test_a_long_session_stays_within_the_context_window_and_finishes(server, shared_data_dir, tmp_path):
    task = get_task("symptom2disease", data_dir=shared_data_dir)
    base = proposer(server, task, tmp_path, max_steps=80, context_tokens=CONTEXT)
    (proposal,) = base.propose(_state(evals=1))
    assert proposal.parent == "c1" and "K = 4" in proposal.source and proposal.summary == "retrieve 4 examples"

    sizes = [request_tokens(body) for body in server.bodies]
    assert len(server.bodies) == READING_TURNS + 3 >= 60 and server.refused == 0
    assert max(sizes) + MAX_TOKENS <= CONTEXT  # every request fitted the window, as the server counted it
    assert any("[compacted: " in json.dumps(body["messages"]) for body in server.bodies)
    last = server.bodies[-1]["messages"]
    assert last[0]["role"] == "system" and "harness-optimisation loop" in last[0]["content"]  # kept whole
    assert "Start with read_file summary.md" in last[1]["content"]  # the task, kept whole
    stub = next(m["content"] for m in last if m["role"] == "tool" and m["content"].startswith("[compacted"))
    assert re.fullmatch(r"\[compacted: \d+ chars of (read_file|grep) \S+\]", stub), stub
    assert all(not m["content"].startswith("[compacted") for m in last[-6:] if m["role"] == "tool")  # recent: whole

    # Uncompacted, the tool results alone are longer than the window; the transcript file keeps them all whole.
    transcript = json.loads((tmp_path / "proposer" / "iter-1" / "transcript.json").read_text())
    results = [m["content"] for m in transcript if m["role"] == "tool"]
    assert len(results) == READING_TURNS + 3 and not any(r.startswith("[compacted") for r in results)
    assert sum(len(r) for r in results) / CHARS_PER_TOKEN > CONTEXT


def test_without_room_to_compact_the_same_session_overflows(server, shared_data_dir, tmp_path):
    """The control: told the window is a million tokens, the agent never compacts and the server refuses it."""
    task = get_task("symptom2disease", data_dir=shared_data_dir)
    base = proposer(server, task, tmp_path, max_steps=80, context_tokens=1_000_000)
    with pytest.raises(MetaharnessError, match="maximum context length"):
        base.propose(_state(evals=1))
    assert server.refused == 1 and READING_TURNS > len(server.bodies) > 10
