#!/usr/bin/env bash
# The core install, without the `local` extra, in a fresh virtual environment (issue 15):
#   1. `pip install .` brings no llama_cpp (nothing is compiled);
#   2. `metaharness plan solve` solves a plan graph file, and every model-free docs example runs;
#   3. a `local:` spec is refused with one line and exit code 2; `plan serve` without --model answers `solve` and
#      says that `plan` needs a model;
#   4. `metaharness plan serve --model openai:...@URL` answers a real `mcp` client session (tools listed, `solve` and
#      `plan` called) with the model on the tests' local OpenAI-compatible server (llama-cpp-python's, started from
#      DEV_PYTHON, an interpreter with the dev install, i.e. metaharness[local]).
# Usage: bash .ci/core_install.sh   (DEV_PYTHON defaults to `python`; pip's cache makes repeated runs fast)
set -euo pipefail
cd "$(dirname "$0")/.."
DEV_PYTHON=${DEV_PYTHON:-python}
started=$(date +%s)
work=$(mktemp -d)
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    for _ in $(seq 1 20); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
step() { echo "core-install: $*"; }

# A copy of the tree (tracked and not-ignored files), so the build leaves nothing in the checkout.
mkdir "$work/src"
git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -xf - -C "$work/src"
python3 -m venv "$work/venv"
venv="$work/venv/bin"
if ! "$venv/python" -m pip install --quiet "$work/src" > "$work/pip.log" 2>&1; then
  grep -v "^WARNING: Location" "$work/pip.log" >&2; echo "core-install: FAIL: pip install ." >&2; exit 1
fi
step "pip install . took $(( $(date +%s) - started )) s"
export METAHARNESS_CACHE_DIR="$work/cache"
unset OPENAI_API_KEY ANTHROPIC_API_KEY OPENAI_BASE_URL

# 1. no llama_cpp
if "$venv/python" -c "import llama_cpp" 2>/dev/null; then
  echo "core-install: FAIL: llama_cpp is importable after pip install . without the local extra" >&2; exit 1
fi
step "ok: import llama_cpp fails"

# 2. plan solve
cat > "$work/graph.json" <<'EOF'
{"start": "s0", "budget": [6, 2.5], "horizon": 20,
 "nodes": [{"id": "s0"}, {"id": "a"}, {"id": "g", "reward": 1, "goal": true}],
 "edges": [{"id": "e1", "source": "s0", "target": "g", "action": "direct", "cost": [1, 3]},
           {"id": "e2", "source": "s0", "target": "a", "action": "walk", "cost": [1, 1]},
           {"id": "e3", "source": "a", "target": "g", "action": "walk", "cost": [1, 1]}]}
EOF
(cd "$work" && "$venv/metaharness" plan solve graph.json) > "$work/solved.json"
"$venv/python" -c "import json, sys; r = json.load(open(sys.argv[1])); assert r['path'] == ['e2', 'e3'], r" \
  "$work/solved.json"
step "ok: metaharness plan solve -> $(tr -d ' \n' < "$work/solved.json" | cut -c1-80)..."

# 2b. every model-free example of docs/ runs in this environment (the
#     blocks run with the fresh interpreter; pytest and the extraction come from the dev environment)
if ! METAHARNESS_EXAMPLES_PYTHON="$venv/python" "$DEV_PYTHON" -m pytest -q -p no:cacheprovider \
    tests/test_docs_examples.py -k "without_a_model or every_kind" > "$work/examples.log" 2>&1; then
  tail -40 "$work/examples.log" >&2; echo "core-install: FAIL: an example does not run after pip install ." >&2; exit 1
fi
step "ok: the model-free examples run: $(tail -1 "$work/examples.log")"

# 3. local specs refused
for args in "plan serve --model local:smollm2-135m"; do
  set +e
  # shellcheck disable=SC2086
  "$venv/metaharness" $args < /dev/null > /dev/null 2> "$work/err.txt"
  status=$?
  set -e
  if [ "$status" -ne 2 ] || [ "$(wc -l < "$work/err.txt")" -ne 1 ] \
      || ! grep -qF "pip install 'metaharness[local]'" "$work/err.txt"; then
    echo "core-install: FAIL: 'metaharness $args' exited $status with:" >&2; cat "$work/err.txt" >&2; exit 1
  fi
  step "ok: 'metaharness $args' exit 2: $(cat "$work/err.txt")"
done

# 4. the MCP server over a real OpenAI-compatible server (llama-cpp-python's, from the dev environment)
gguf=$("$DEV_PYTHON" -c "from metaharness.models.local import gguf_path; print(gguf_path('smollm2-135m'))")
port=$("$DEV_PYTHON" -c "from metaharness.models.llama_server import free_port; print(free_port())")
"$DEV_PYTHON" -m llama_cpp.server --model "$gguf" --model_alias smollm2-135m --host 127.0.0.1 --port "$port" \
  --n_ctx 4096 > "$work/server.log" 2>&1 &
server_pid=$!
base="http://127.0.0.1:$port/v1"
for _ in $(seq 1 180); do
  if "$venv/python" -c "import urllib.request, sys; urllib.request.urlopen(sys.argv[1] + '/models', timeout=2)" \
      "$base" 2>/dev/null; then break; fi
  if ! kill -0 "$server_pid" 2>/dev/null; then echo "core-install: FAIL: model server exited" >&2; tail "$work/server.log" >&2; exit 1; fi
  sleep 1
done
step "model server ready on $base"
"$venv/python" - "$venv/metaharness" "openai:smollm2-135m@$base" "$work/graph.json" <<'EOF'
import json, sys

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

command, model, graph_file = sys.argv[1:]
params = StdioServerParameters(command=command, args=["plan", "serve", "--model", model, "--plans", "2"])


async def session_run():
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = sorted(t.name for t in (await session.list_tools()).tools)
        solved = await session.call_tool("solve", {"graph": json.load(open(graph_file))})
        planned = await session.call_tool(
            "plan",
            {"history": ["At the door; the key is on the table."], "goal": "the door is open",
             "budget": {"steps": 4}, "plans": 1, "horizon": 4},
        )
        return tools, solved.model_dump(by_alias=True), planned.model_dump(by_alias=True)


async def no_model_run():
    bare = StdioServerParameters(command=command, args=["plan", "serve"])
    async with stdio_client(bare) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        solved = await session.call_tool("solve", {"graph": json.load(open(graph_file))})
        planned = await session.call_tool("plan", {"history": ["here"], "goal": "there", "budget": {"steps": 1}})
        return solved.model_dump(by_alias=True), planned.model_dump(by_alias=True)


solved, planned = anyio.run(no_model_run)
assert not solved["isError"] and json.loads(solved["content"][0]["text"])["path"] == ["e2", "e3"], solved
assert planned["isError"] and "needs a model" in planned["content"][0]["text"], planned
print("core-install: ok: plan serve without --model solves and says plan needs a model")

tools, solved, planned = anyio.run(session_run)
assert tools == ["plan", "solve"], tools
assert not solved["isError"] and json.loads(solved["content"][0]["text"])["path"] == ["e2", "e3"], solved
assert not planned["isError"], planned
answer = json.loads(planned["content"][0]["text"])
assert answer["status"] in ("route", "no_route") and answer["guidance"], answer
print(f"core-install: ok: MCP tools {tools}; solve -> {json.loads(solved['content'][0]['text'])['path']}; "
      f"plan -> {answer['status']}: {answer['guidance'][:120]!r}")
EOF
step "all checks passed in $(( $(date +%s) - started )) s (then the server stops and the venv is removed)"
