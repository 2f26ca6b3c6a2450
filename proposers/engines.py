"""Coding-agent CLIs as the engine of the ``coding`` and ``tps`` proposers: Claude Code and Codex, run headless.

``--proposer-model claude-code[:MODEL]`` or ``codex[:MODEL]`` (``MODEL`` as the CLI's ``--model`` / ``-m`` takes
it; without it, the CLI's default) makes the coding agent write the iteration's candidates instead of the built-in
tool-calling agent. The rest of the proposer does not change: the same workspace (``.workspace``: every
candidate's code, scores and whole traces), the same import check of each submission, the same candidates.

**One agent session** (``EngineClient.run_agent``) runs the CLI with the workspace as its working folder,
through ``.agent_sandbox`` (writes only beneath the workspace, the session's scratch folder and the CLI's own
state folder; no core dumps), with an environment of ``PATH``, ``HOME``, locale, ``TMPDIR`` (the scratch folder)
and the engine's own variables (``Engine.keys``): no other secret of the run reaches it. The prompt goes on
stdin.

- Claude Code: ``claude -p --output-format stream-json --verbose --permission-mode acceptEdits --allowedTools
  "Read Write Edit Glob Grep LS Bash" --disallowedTools "WebFetch WebSearch" --append-system-prompt SYSTEM
  --max-turns N [--max-budget-usd USD] [--model MODEL]``. Its budget flag ``--max-budget-usd`` gets what the run
  may still spend this iteration (``RunState.budget.usd``) when a dollar cap is set. Its cost is the result
  event's ``total_cost_usd``.
- Codex: ``codex exec --json --skip-git-repo-check --sandbox workspace-write --ephemeral -C WORKSPACE [-m MODEL]
  -`` (its own sandbox for the commands it runs, inside ours), the instructions before the task on stdin. It has
  no turn or dollar cap; its tokens (``turn.completed`` usage) are priced as ``openai:MODEL`` from the price table.

Every session also has a wall-time limit (``agent_seconds``, default ``AGENT_SECONDS``), after which its
process group is killed. The session's events are appended to ``transcript.jsonl`` as the CLI prints them (kept
whole, a killed session included) and turned into ``transcript.json`` in the built-in agent's shape (system, user,
assistant turns with ``tool_calls``, ``tool`` results), in the iteration's folder ``<run_dir>/proposer/iter-N/``.
Every session's tokens and dollars go to the run's ledger (role ``proposer``), so ``--max-cost`` counts them.

**Plain answers** for the ``tps`` planning stages (``EngineClient.complete``, the
``ModelClient`` contract for requests without tools, ``n = 1``): one session with no
tools (Claude Code: ``--tools ""``, ``--system-prompt``, ``--json-schema`` for a schema; Codex: a read-only
sandbox and the schema in the prompt), its answer checked against the schema (one
``StructuredOutputError`` otherwise, which the planner re-asks on).

**Failures.** A CLI that is not installed, or not logged in and without its key variable, is a
``ConfigurationError`` before the run starts (``EngineClient.check``: ``claude auth
status``, ``codex login status``). A session that fails (its API refuses, it crashes, it runs out of time) returns
its error in ``AgentRun.error`` with the CLI's own words; the proposer keeps whatever candidates were submitted
and fails the iteration only when there are none.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metaharness.errors import ConfigurationError, InputError
from metaharness.json_types import JSONObject, JSONValue
from metaharness.models.ledger import Ledger
from metaharness.models.prices import Price
from metaharness.models.protocol import ChatRequest, ChatResult, Choice, Role, StructuredOutputError, Usage
from metaharness.models.structured import check_choice
from metaharness.store.files import json_object

AGENT_SECONDS = 1800.0
COMPLETION_SECONDS = 600.0
_BASE_ENV = ("PATH", "LANG", "LC_ALL", "TZ")


@dataclass
class AgentRun:
    """One CLI session: its raw ``events``, the transcript as ``messages``, the final ``text`` (and ``structured``
    output when asked), what it used and cost (``dollars`` None when the CLI does not say), its ``error`` (None
    when it finished normally) and wall ``seconds``."""

    events: list[JSONObject] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    text: str = ""
    structured: JSONValue = None
    usage: Usage = field(default_factory=Usage)
    dollars: float | None = None
    error: str | None = None
    seconds: float = 0.0


class Engine:
    """What differs between coding-agent CLIs: their command lines, their event formats, where they keep state."""

    name = ""
    binary = ""
    package = ""  # the npm package that installs the binary
    keys: tuple[str, ...] = ()  # environment variables passed through (keys, base URLs, state folders)
    billed = False  # the CLI reports each session's dollars itself

    def agent_command(self, model: str | None, system: str, workspace: Path, budget_usd: float | None, turns: int):
        """(argv after the binary, text to send before the prompt on stdin)."""
        raise NotImplementedError

    def completion_command(self, model: str | None, system: str, schema: Mapping[str, object] | None, cwd: Path):
        """(argv after the binary, text to send before the prompt on stdin) for a session with no tools."""
        raise NotImplementedError

    def login_command(self) -> list[str]:
        raise NotImplementedError

    def state_folders(self, env: dict[str, str]) -> list[str]:
        """The folders the CLI writes its own state to (sessions, settings)."""
        raise NotImplementedError

    def parse(self, events: list[JSONObject]) -> AgentRun:
        raise NotImplementedError


def _object(value: JSONValue) -> JSONObject:
    """An event's object under some key (``{}`` where the CLI gave none)."""
    return value if isinstance(value, dict) else {}


def _count(value: JSONValue) -> int:
    """A token count of an event (0 where the CLI gave none)."""
    return int(value) if isinstance(value, (int, float, str)) and value else 0


def _text_of(content: JSONValue) -> str:
    """Text of a tool result's content: a string, or a list of ``{"type": "text", "text": ...}`` blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return "" if content is None else json.dumps(content)


class ClaudeCode(Engine):
    name = "claude-code"
    binary = "claude"
    package = "@anthropic-ai/claude-code"
    keys = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "CLAUDE_CODE_OAUTH_TOKEN")
    billed = True
    TOOLS = "Read Write Edit Glob Grep LS Bash"

    def _common(self, model: str | None) -> list[str]:
        return ["-p", "--output-format", "stream-json", "--verbose", *(["--model", model] if model else [])]

    def agent_command(self, model, system, workspace, budget_usd, turns):
        argv = [*self._common(model), "--permission-mode", "acceptEdits", "--allowedTools", self.TOOLS]
        argv += ["--disallowedTools", "WebFetch WebSearch", "--append-system-prompt", system, "--max-turns", str(turns)]
        if budget_usd is not None:
            argv += ["--max-budget-usd", f"{max(budget_usd, 0.0):.4f}"]
        return argv, ""

    def completion_command(self, model, system, schema, cwd):
        argv = [*self._common(model), "--tools", "", "--system-prompt", system or "Answer the user."]
        if schema is not None:
            argv += ["--json-schema", json.dumps(schema)]
        return argv, ""

    def login_command(self) -> list[str]:
        return ["auth", "status"]

    def state_folders(self, env: dict[str, str]) -> list[str]:
        return [env.get("CLAUDE_CONFIG_DIR") or os.path.join(env["HOME"], ".claude")]

    def parse(self, events: list[JSONObject]) -> AgentRun:
        run = AgentRun(events=events)
        result = None
        for event in events:
            kind = event.get("type")
            content = _object(event.get("message")).get("content")
            blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
            if kind == "assistant":
                text = "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
                calls = [
                    {"id": b.get("id", ""), "name": b.get("name", ""), "arguments": b.get("input") or {}}
                    for b in blocks
                    if b.get("type") == "tool_use"
                ]
                run.messages.append({"role": "assistant", "content": text, **({"tool_calls": calls} if calls else {})})
            elif kind == "user":
                for block in blocks:
                    if block.get("type") == "tool_result":
                        content = _text_of(block.get("content"))
                        run.messages.append(
                            {"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": content}
                        )
            elif kind == "result":
                result = event
        if result is None:
            run.error = "the session ended without a result event"
            return run
        usage = _object(result.get("usage"))
        cache_read = _count(usage.get("cache_read_input_tokens"))
        cache_write = _count(usage.get("cache_creation_input_tokens"))
        run.usage = Usage(
            _count(usage.get("input_tokens")) + cache_read + cache_write,
            _count(usage.get("output_tokens")),
            cache_read,
            cache_write,
        )
        cost = result.get("total_cost_usd")
        run.dollars = float(cost) if isinstance(cost, (int, float)) and math.isfinite(cost) else None
        run.text = str(result.get("result") or "")
        run.structured = result.get("structured_output")
        if result.get("is_error") or result.get("subtype") not in ("success", None):
            run.error = f"{result.get('subtype')}: {run.text}".strip(": ") if run.text else str(result.get("subtype"))
        return run


class Codex(Engine):
    name = "codex"
    binary = "codex"
    package = "@openai/codex"
    keys = ("CODEX_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "CODEX_HOME")

    def _common(self, model: str | None, sandbox: str, cwd: Path) -> list[str]:
        argv = ["exec", "--json", "--skip-git-repo-check", "--sandbox", sandbox, "--ephemeral", "-C", str(cwd)]
        return argv + (["-m", model] if model else []) + ["-"]

    def agent_command(self, model, system, workspace, budget_usd, turns):
        return self._common(model, "workspace-write", workspace), system + "\n\n"

    def completion_command(self, model, system, schema, cwd):
        before = f"{system}\n\n" if system else ""
        if schema is not None:
            before += f"Reply with JSON only, matching this JSON schema:\n{json.dumps(schema)}\n\n"
        return self._common(model, "read-only", cwd), before

    def login_command(self) -> list[str]:
        return ["login", "status"]

    def state_folders(self, env: dict[str, str]) -> list[str]:
        return [env.get("CODEX_HOME") or os.path.join(env["HOME"], ".codex")]

    def parse(self, events: list[JSONObject]) -> AgentRun:
        run = AgentRun(events=events)
        usage, finished, last_error = Usage(), False, None
        for event in events:
            kind = event.get("type")
            if kind == "item.completed":
                self._item(run, _object(event.get("item")))
            elif kind == "turn.completed":
                finished = True
                used = _object(event.get("usage"))
                cached = _count(used.get("cached_input_tokens"))
                usage = usage + Usage(_count(used.get("input_tokens")), _count(used.get("output_tokens")), cached)
            elif kind == "turn.failed":
                last_error = str(_object(event.get("error")).get("message") or "the turn failed")
                finished = False
            elif kind == "error":
                last_error = str(event.get("message") or "error")
        run.usage = usage
        if not finished:
            run.error = last_error or "the session ended without completing its turn"
        return run

    @staticmethod
    def _item(run: AgentRun, item: JSONObject) -> None:
        kind, key = item.get("type"), str(item.get("id", ""))
        if kind == "agent_message":
            run.text = str(item.get("text") or "")
            run.messages.append({"role": "assistant", "content": run.text})
        elif kind == "reasoning":
            run.messages.append({"role": "assistant", "content": "", "reasoning": item.get("text", "")})
        elif kind == "command_execution":
            call = {"id": key, "name": "shell", "arguments": {"command": item.get("command", "")}}
            run.messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
            output = str(item.get("aggregated_output") or "") + f"\n[exit code {item.get('exit_code')}]"
            run.messages.append({"role": "tool", "tool_call_id": key, "content": output})
        elif kind in ("file_change", "mcp_tool_call", "web_search", "todo_list"):
            details = {k: v for k, v in item.items() if k not in ("id", "type")}
            run.messages.append(
                {"role": "assistant", "content": "", "tool_calls": [{"id": key, "name": kind, "arguments": details}]}
            )
            run.messages.append({"role": "tool", "tool_call_id": key, "content": str(item.get("status", ""))})
        elif kind == "error":
            run.messages.append({"role": "assistant", "content": "", "error": item.get("message", "")})


ENGINES: dict[str, Engine] = {engine.name: engine for engine in (ClaudeCode(), Codex())}


def engine_of(spec: str | None) -> tuple[Engine, str | None] | None:
    """``(engine, model)`` for ``claude-code[:MODEL]`` / ``codex[:MODEL]``; None for any other spec."""
    if not spec:
        return None
    name, _, model = spec.strip().partition(":")
    engine = ENGINES.get(name.lower())
    return (engine, model.strip() or None) if engine is not None else None


def is_engine(spec: str | None) -> bool:
    """True when a ``--proposer-model`` names a coding-agent CLI instead of a model."""
    return engine_of(spec) is not None


def _render(messages: Sequence[Mapping[str, object]]) -> tuple[str, str]:
    """(system text, prompt) of chat messages for a CLI that takes one prompt: one message alone, several as a
    transcript with role headings."""
    system = "\n\n".join(str(m.get("content") or "") for m in messages if m.get("role") == "system")
    turns = [m for m in messages if m.get("role") != "system"]
    if len(turns) == 1:
        return system, str(turns[0].get("content") or "")
    return system, "\n\n".join(f"[{m.get('role')}]\n{m.get('content') or ''}" for m in turns)


class EngineClient:
    """A coding-agent CLI as the proposer's engine and as a ``ModelClient`` (the
    module docstring is the contract). ``spec``: ``claude-code[:MODEL]`` or ``codex[:MODEL]``; ``ledger``: the
    run's; ``executable``: the CLI's path (default: the binary on PATH); ``seconds``: an agent session's wall-time
    limit."""

    def __init__(
        self,
        spec: str,
        *,
        ledger: Ledger | None = None,
        executable: str | None = None,
        seconds: float = AGENT_SECONDS,
    ) -> None:
        found = engine_of(spec)
        if found is None:
            raise InputError(f"'{spec}' is not a coding-agent engine: use {' or '.join(ENGINES)} (optionally :MODEL).")
        self.engine, self.model = found
        self.spec = self.engine.name + (f":{self.model}" if self.model else "")
        self.ledger = ledger if ledger is not None else Ledger()
        self.executable = executable or shutil.which(self.engine.binary)
        self.seconds = seconds

    # ------------------------------------------------------------------ set-up

    def _require(self) -> str:
        if self.executable is None:
            raise ConfigurationError(
                f"The {self.engine.name} engine needs the `{self.engine.binary}` command on PATH: install it with "
                f"npm install -g {self.engine.package}, or choose another --proposer-model."
            )
        return self.executable

    def environment(self, scratch: Path) -> dict[str, str]:
        """The CLI's whole environment: locale, PATH, HOME, the scratch TMPDIR and the engine's own variables."""
        env = {name: os.environ[name] for name in _BASE_ENV if name in os.environ}
        env["HOME"] = os.environ.get("HOME") or str(Path.home())
        env["TMPDIR"] = str(scratch)
        env.update({name: os.environ[name] for name in self.engine.keys if os.environ.get(name)})
        return env

    def check(self) -> None:
        """The CLI is installed and can authenticate (a key variable, or its own login); ConfigurationError with
        what to do otherwise. Runs the CLI's login status command, which makes no model call."""
        binary = self._require()
        with tempfile.TemporaryDirectory(prefix="metaharness-engine-") as scratch:
            env = self.environment(Path(scratch))
            if any(env.get(key) for key in self.engine.keys if "KEY" in key or "TOKEN" in key):
                return
            try:
                status = subprocess.run(
                    [binary, *self.engine.login_command()], capture_output=True, text=True, env=env, timeout=60
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise ConfigurationError(f"`{binary} {' '.join(self.engine.login_command())}` failed: {exc}") from exc
        if status.returncode != 0:
            keys = " or ".join(k for k in self.engine.keys if "KEY" in k or "TOKEN" in k)
            raise ConfigurationError(
                f"{self.engine.name} is not logged in ({binary} {' '.join(self.engine.login_command())} says so): set "
                f"{keys}, or log in with `{self.engine.binary}` once."
            )

    # ------------------------------------------------------------------ sessions

    def session(
        self, argv: list[str], stdin: str, *, cwd: Path, scratch: Path, record: Path | None, seconds: float
    ) -> AgentRun:
        """Run the CLI with ``argv`` in the agent sandbox, ``stdin`` as its input; every event is appended to
        ``record`` (JSONL) as it arrives. Never raises for the session's own failure: see ``AgentRun.error``."""
        binary = self._require()
        env = self.environment(scratch)
        writable = [str(cwd), str(scratch), *self.engine.state_folders(env)]
        command = [sys.executable, "-m", "metaharness.proposers.agent_sandbox"]
        command += [item for folder in writable for item in ("--write", folder)] + ["--", binary, *argv]
        events: list[JSONObject] = []
        stderr: list[str] = []
        started = time.monotonic()
        if record is not None:
            record.parent.mkdir(parents=True, exist_ok=True)
        log = record.open("a", encoding="utf-8") if record is not None else None
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",
            start_new_session=True,
        )
        drain = threading.Thread(target=lambda: stderr.extend(process.stderr or []), daemon=True)
        drain.start()
        timed_out = threading.Event()

        def stop() -> None:
            timed_out.set()
            _kill(process)

        timer = threading.Timer(seconds, stop)
        timer.start()
        try:
            assert process.stdin is not None and process.stdout is not None
            with contextlib.suppress(BrokenPipeError):
                process.stdin.write(stdin)
                process.stdin.close()
            for line in process.stdout:
                if log is not None:
                    log.write(line if line.endswith("\n") else line + "\n")
                    log.flush()
                if (event := json_object(line)) is not None:
                    events.append(event)
            process.wait()
        finally:
            timer.cancel()
            _kill(process)
            if log is not None:
                log.close()
            drain.join(timeout=5)
        run = self.engine.parse(events)
        run.seconds = time.monotonic() - started
        if timed_out.is_set():
            run.error = f"stopped at the wall-time limit of {seconds:.0f} s" + (f" ({run.error})" if run.error else "")
        elif run.error and not events:
            tail = "".join(stderr)[-600:].strip()
            run.error = f"{self.engine.binary} exited with code {process.returncode}: {tail or run.error}"
        return run

    def _price(self) -> Price | None:
        """What a session's tokens cost when the CLI does not bill them itself: ``openai:MODEL`` from the table."""
        return self.ledger.prices.lookup(f"openai:{self.model}") if self.model and not self.engine.billed else None

    def _charge(self, run: AgentRun, role: Role) -> None:
        if self.engine.billed:
            dollars = run.dollars or 0.0
        else:
            price = self._price()
            dollars = price.dollars(run.usage) if price is not None else 0.0
        self.ledger.record(self.spec, role, run.usage, dollars=dollars)

    def _check_caps(self) -> None:
        """Before a session: the run's caps allow it, and a dollar cap can count it."""
        if self.ledger.max_dollars is not None and not self.engine.billed and self._price() is None:
            raise ConfigurationError(
                f"A dollar cap is set, but {self.spec} does not report its cost and its model has no price: name a "
                f"priced model ({self.engine.name}:MODEL, priced as openai:MODEL), or drop --max-cost."
            )
        self.ledger.check(self.spec, billed=True)

    def run_agent(
        self,
        workspace: Path,
        system: str,
        prompt: str,
        *,
        folder: Path,
        budget_usd: float | None = None,
        turns: int = 40,
    ) -> AgentRun:
        """One agent session in ``workspace``; ``folder`` receives ``transcript.jsonl`` and the scratch folder."""
        self._check_caps()
        argv, before = self.engine.agent_command(self.model, system, workspace, budget_usd, turns)
        scratch = folder / "scratch"
        scratch.mkdir(parents=True, exist_ok=True)
        run = self.session(
            argv,
            before + prompt,
            cwd=workspace,
            scratch=scratch,
            record=folder / "transcript.jsonl",
            seconds=self.seconds,
        )
        self._charge(run, "proposer")
        run.messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}, *run.messages]
        return run

    def complete(self, request: ChatRequest, *, role: Role = "task") -> ChatResult:
        """A plain or JSON answer from one session without tools (see the module docstring)."""
        if request.tools:
            raise InputError(f"{self.spec} answers plain and JSON requests only; its agent works through run_agent.")
        if request.n != 1:
            raise InputError(f"{self.spec} gives one answer per request (n=1), not {request.n}.")
        self._check_caps()
        system, prompt = _render(request.messages)
        with tempfile.TemporaryDirectory(prefix="metaharness-engine-") as scratch:
            argv, before = self.engine.completion_command(self.model, system, request.json_schema, Path(scratch))
            run = self.session(
                argv, before + prompt, cwd=Path(scratch), scratch=Path(scratch), record=None, seconds=COMPLETION_SECONDS
            )
        self._charge(run, role)
        if run.error:
            raise ConfigurationError(f"{self.spec} could not answer: {run.error}")
        text = json.dumps(run.structured) if run.structured is not None else run.text
        choice = Choice(text)
        if request.json_schema is not None:
            problem = check_choice(request, choice)
            if problem is not None:
                raise StructuredOutputError(f"{self.spec} gave an answer that does not fit the schema: {problem}.")
        return ChatResult([choice], run.usage, run.seconds, self.spec)


def _kill(process: subprocess.Popen[str]) -> None:
    """End the session's whole process group: the CLI and anything it started that is still running."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
