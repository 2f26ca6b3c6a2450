"""A stand-in for the coding-agent CLIs ``claude`` and ``codex``, speaking their documented headless formats.

``python agent_cli.py claude ARGS`` / ``python agent_cli.py codex ARGS`` (tests put a ``claude`` or ``codex``
wrapper on PATH that runs this). It does what a real session would do to the proposal workspace, without a model:

- agent sessions (``claude -p ... --allowedTools ...``; ``codex exec --json --sandbox workspace-write ... -``) read
  the prompt on stdin, copy the best candidate (``candidates/*/info.json``) to ``new/<name>/harness.py`` for each
  candidate the prompt asks for (the names of a planner's brief, else ``cand1``...), append a comment line,
  write ``submission.json``, try one write outside the workspace (the sandbox must refuse it), and print the
  session's events: Claude Code's stream-json (``system`` init, ``assistant`` with ``tool_use``, ``user`` with
  ``tool_result``, ``result`` with ``total_cost_usd`` and ``usage``) or Codex's JSONL (``thread.started``,
  ``turn.started``, ``item.*`` with ``command_execution``, ``file_change``, ``agent_message``, ``turn.completed``
  with ``usage``);
- answer sessions (``claude --tools ""``, ``codex --sandbox read-only``) answer with JSON that fits the schema
  (``--json-schema`` as ``structured_output``; the schema in a Codex prompt as the agent message);
- ``claude auth status`` / ``codex login status`` say logged in when the key variable is set; ``--version``.

The key variable's value steers a session (real keys never reach this file): ``standin:fail`` ends it with an
API error and writes nothing, ``standin:broken`` writes a harness that fails the import check the first time
(a second session, told the error, fixes it), ``standin:slow`` sleeps for a minute. Every session appends its argv
and the names of its environment variables to ``standin-sessions.jsonl`` in its ``TMPDIR`` (the session's scratch
folder).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

USAGE = {"input_tokens": 1200, "output_tokens": 300}
COST = 0.0125


def emit(event: dict) -> None:
    print(json.dumps(event), flush=True)


def example_of(schema: dict):
    """A value that validates against ``schema`` (the subset the planner's schemas use)."""
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties", {})
        # the planner's simulation asks whether a revision breaks the harness: say no
        return {
            key: False if key.startswith("breaks") else example_of(props[key])
            for key in schema.get("required", list(props))
        }
    if kind == "array":
        return [example_of(schema.get("items", {})) for _ in range(max(1, schema.get("minItems", 1)))]
    if kind == "integer":
        return max(0, schema.get("minimum", 0)) + 100
    if kind == "number":
        return 0.5
    if kind == "boolean":
        return True
    return "add two worked examples from the training split to the prompt"


def key_value(program: str) -> str:
    names = ("ANTHROPIC_API_KEY",) if program == "claude" else ("CODEX_API_KEY", "OPENAI_API_KEY")
    return next((os.environ[n] for n in names if os.environ.get(n)), "")


def write_candidates(prompt: str, workspace: Path, broken: bool) -> list[tuple[str, str, str]]:
    """(tool, path, result) for each file written: the candidates the prompt asks for, and one refused write."""
    infos = [json.loads(p.read_text()) for p in sorted(workspace.glob("candidates/*/info.json"))]
    evaluated = [i for i in infos if not i.get("failed")] or infos
    best = max(evaluated, key=lambda i: (i.get("scores") or {}).get("primary", 0.0))
    names = re.findall(r"- new/([A-Za-z0-9_-]+):", prompt)
    fixing = re.findall(r"- new/([A-Za-z0-9_-]+): ", prompt) if "failed their import check" in prompt else []
    if not names:
        wanted = re.search(r"[Ww]rite (\d+) new candidate", prompt)
        names = [f"cand{i + 1}" for i in range(int(wanted.group(1)) if wanted else 1)]
    steps = []
    for name in fixing or names:
        folder = workspace / "new" / name
        folder.mkdir(parents=True, exist_ok=True)
        source = (workspace / "candidates" / best["id"] / "harness.py").read_text()
        source += f"\n# {name}: revised by the stand-in agent\n"
        if broken and not fixing:
            source += "import no_such_module_anywhere\n"
        (folder / "harness.py").write_text(source)
        if not (folder / "submission.json").exists():
            meta = {"parent": best["id"], "summary": f"stand-in revision {name}", "hypothesis": "a comment helps"}
            (folder / "submission.json").write_text(json.dumps(meta))
        steps.append(("Write", f"new/{name}/harness.py", "written"))
    try:
        (workspace.parent / "outside.txt").write_text("escaped")
        steps.append(("Write", "../outside.txt", "written outside the workspace"))
    except OSError as exc:
        steps.append(("Write", "../outside.txt", f"refused: {exc.strerror}"))
    return steps


def record(program: str, argv: list[str]) -> None:
    log = Path(os.environ["TMPDIR"]) / "standin-sessions.jsonl"
    with log.open("a") as handle:
        handle.write(json.dumps({"program": program, "argv": argv, "env": sorted(os.environ)}) + "\n")


def claude(argv: list[str]) -> int:
    if argv[:1] in (["--version"], ["-v"]):
        print("2.1.197 (Claude Code stand-in)")
        return 0
    if argv[:2] == ["auth", "status"]:
        logged = bool(os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("CLAUDE_CODE_OAUTH_TOKEN"))
        print(json.dumps({"loggedIn": logged, "authMethod": "api_key" if logged else "none"}))
        return 0 if logged else 1
    assert "-p" in argv and argv[argv.index("--output-format") + 1] == "stream-json" and "--verbose" in argv
    prompt = sys.stdin.read()
    record("claude", argv)
    mode = key_value("claude")
    emit({"type": "system", "subtype": "init", "cwd": os.getcwd(), "session_id": "s1", "tools": ["Read", "Write"]})
    if mode == "standin:slow":
        time.sleep(60)
    if mode == "standin:fail":
        emit({"type": "assistant", "message": {"content": [{"type": "text", "text": "API Error: 529 overloaded"}]}})
        emit({"type": "result", "subtype": "success", "is_error": True, "result": "API Error: 529 overloaded",
              "total_cost_usd": 0, "usage": {"input_tokens": 0, "output_tokens": 0}})  # fmt: skip
        return 1
    usage = {**USAGE, "cache_read_input_tokens": 200, "cache_creation_input_tokens": 100}
    if "--tools" in argv and argv[argv.index("--tools") + 1] == "":
        schema = json.loads(argv[argv.index("--json-schema") + 1]) if "--json-schema" in argv else None
        value = example_of(schema) if schema else None
        emit({"type": "assistant", "message": {"content": [{"type": "text", "text": json.dumps(value) or "ok"}]}})
        emit({"type": "result", "subtype": "success", "is_error": False, "result": json.dumps(value) if value else "ok",
              "structured_output": value, "total_cost_usd": 0.001, "usage": usage})  # fmt: skip
        return 0
    system = argv[argv.index("--append-system-prompt") + 1] if "--append-system-prompt" in argv else ""
    steps = write_candidates(system + "\n" + prompt, Path.cwd(), mode == "standin:broken")
    for number, (tool, path, result) in enumerate(steps):
        call = {"type": "tool_use", "id": f"toolu_{number}", "name": tool, "input": {"file_path": path}}
        emit({"type": "assistant", "message": {"content": [{"type": "text", "text": f"Writing {path}"}, call]}})
        block = {"type": "tool_result", "tool_use_id": f"toolu_{number}", "content": [{"type": "text", "text": result}]}
        emit({"type": "user", "message": {"content": [block]}})
    emit({"type": "result", "subtype": "success", "is_error": False, "num_turns": len(steps), "result": "Done.",
          "total_cost_usd": COST, "usage": usage})  # fmt: skip
    return 0


def codex(argv: list[str]) -> int:
    if argv[:1] in (["--version"], ["-V"]):
        print("codex-cli 0.171.0 (stand-in)")
        return 0
    if argv[:2] == ["login", "status"]:
        print("Logged in using an API key" if key_value("codex") else "Not logged in", file=sys.stderr)
        return 0 if key_value("codex") else 1
    assert argv[0] == "exec" and "--json" in argv and argv[-1] == "-"
    os.chdir(argv[argv.index("-C") + 1])
    prompt = sys.stdin.read()
    record("codex", argv)
    mode = key_value("codex")
    emit({"type": "thread.started", "thread_id": "t1"})
    emit({"type": "turn.started"})
    if mode == "standin:fail":
        emit({"type": "error", "message": "unexpected status 401 Unauthorized"})
        emit({"type": "turn.failed", "error": {"message": "unexpected status 401 Unauthorized"}})
        return 1
    usage = {"input_tokens": USAGE["input_tokens"], "cached_input_tokens": 200, "output_tokens": USAGE["output_tokens"]}
    if argv[argv.index("--sandbox") + 1] == "read-only":
        found = re.search(r"matching this JSON schema:\n(\{.*\})\n", prompt)
        text = json.dumps(example_of(json.loads(found.group(1)))) if found else "ok"
        emit({"type": "item.completed", "item": {"id": "item_0", "type": "agent_message", "text": text}})
        emit({"type": "turn.completed", "usage": usage})
        return 0
    emit({"type": "item.completed", "item": {"id": "item_0", "type": "reasoning", "text": "**Reading the traces**"}})
    listing = "\n".join(sorted(p.name for p in Path.cwd().iterdir()))
    command = {"id": "item_1", "type": "command_execution", "command": "bash -lc ls", "aggregated_output": listing,
               "exit_code": 0, "status": "completed"}  # fmt: skip
    emit({"type": "item.started", "item": {**command, "aggregated_output": "", "status": "in_progress"}})
    emit({"type": "item.completed", "item": command})
    steps = write_candidates(prompt, Path.cwd(), mode == "standin:broken")
    changes = [{"path": path, "kind": "add"} for _, path, result in steps if result == "written"]
    emit(
        {
            "type": "item.completed",
            "item": {"id": "item_2", "type": "file_change", "changes": changes, "status": "completed"},
        }
    )
    emit(
        {
            "type": "item.completed",
            "item": {"id": "item_3", "type": "agent_message", "text": "; ".join(r for _, _, r in steps)},
        }
    )
    emit({"type": "turn.completed", "usage": usage})
    return 0


def install(folder: Path, program: str) -> Path:
    """Put an executable ``program`` (claude or codex) into ``folder`` that runs this stand-in."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / program
    path.write_text(f'#!/bin/sh\nexec {sys.executable} {Path(__file__).resolve()} {program} "$@"\n')
    path.chmod(0o755)
    return path


if __name__ == "__main__":
    name = sys.argv[1]
    sys.exit(claude(sys.argv[2:]) if name == "claude" else codex(sys.argv[2:]))
