#!/usr/bin/env bash
# Tokenizing long conversations with Gemma 4's chat template: the assistant spans found in one
# traced render against the plain way (each turn's prompt and turn rendered alone), and one
# render by Python's jinja2 (transformers' settings) for scale. Both gemmax shards must be equal.
#   bench/chat_spans.sh [build_dir] [turns...]     (default: build, 100 200 500)
# TOOLS=1: each of the N rounds is a user turn, an assistant tool call, the tool's answer and the
# assistant's reply. PLAIN_MAX=N skips the plain way (minutes) above N turns.
set -euo pipefail
BUILD=${1:-build}
shift || true
TURNS=${*:-100 200 500}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
GEMMAX=$BUILD/bin/gemmax
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cp "$ROOT/fuzz/corpus/chat_template_fuzz/gemma4.jinja" "$WORK/t.jinja"
secs() { local t0 t1; t0=$(date +%s.%N); "$@" > /dev/null; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }
printf "%6s %12s %14s %12s %s\n" turns one_render_s prefix_renders_s jinja2_1x_s same_shard
for n in $TURNS; do
  python3 - "$n" "$WORK/c.jsonl" <<'PY'
import json, os, sys
n, path = int(sys.argv[1]), sys.argv[2]
m = []
tools = os.environ.get("TOOLS") == "1"
for i in range(n):
    m.append({"role": "user", "content": f"Question number {i}: what is {i} plus {i}?"})
    if tools:
        m.append({"role": "assistant", "tool_calls": [{"id": f"c{i}", "type": "function",
                  "function": {"name": "add", "arguments": {"a": i, "b": i}}}]})
        m.append({"role": "tool", "tool_call_id": f"c{i}", "content": str(2 * i)})
    m.append({"role": "assistant", "content": f"The answer is {2 * i}. Anything else?"})
open(path, "w").write(json.dumps({"messages": m}) + "\n")
PY
  one=$(secs "$GEMMAX" tokenize --out "$WORK/one.bin" --chat_template_path "$WORK/t.jinja" "$WORK/c.jsonl")
  if [ "$n" -le "${PLAIN_MAX:-$n}" ]; then
    plain=$(secs "$GEMMAX" tokenize --out "$WORK/plain.bin" --chat_template_path "$WORK/t.jinja" \
            --chat_spans_by_prefix_renders "$WORK/c.jsonl")
  else
    plain=nan
  fi
  j2=$(python3 - "$WORK/t.jinja" "$WORK/c.jsonl" <<'PY' 2>/dev/null || echo n/a
import json, sys, time
import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                    extensions=["jinja2.ext.loopcontrols"])
t = env.from_string(open(sys.argv[1]).read())
msgs = json.loads(open(sys.argv[2]).readline())["messages"]
t0 = time.time()
t.render(messages=msgs, bos_token="<bos>", eos_token="<eos>", add_generation_prompt=False)
print(f"{time.time() - t0:.3f}")
PY
)
  same=$([ "$plain" = nan ] && echo n/a || { cmp -s "$WORK/one.bin" "$WORK/plain.bin" && echo yes || echo NO; })
  printf "%6s %12.3f %14.3f %12s %s\n" "$n" "$one" "$plain" "$j2" "$same"
done
