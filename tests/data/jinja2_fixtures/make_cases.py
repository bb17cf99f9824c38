#!/usr/bin/env python3
"""Makes cases.json: chat templates rendered by transformers, for gemmax's differential test.

Each case is one JSONL-style example (messages, tools, documents, chat_template_kwargs) rendered
with one template by transformers' own apply_chat_template path (its message normalisation and
its jinja2 environment), with the text it gives or the fact that it fails, and, for templates
with {% generation %} blocks, transformers' assistant spans (as UTF-8 byte offsets).

Run outside CI, in a virtual environment with transformers and jinja2:
    python3 tests/data/jinja2_fixtures/make_cases.py            # the committed fixture
    python3 tests/data/jinja2_fixtures/make_cases.py --count 20000 --out /tmp/wide.json
and point the test at a wider file with GEMMAX_JINJA2_CASES=/tmp/wide.json.
"""
import argparse
import json
import pathlib
import random

import jinja2
import transformers
from transformers.utils.chat_template_utils import render_jinja_template
from transformers.tokenization_utils_base import _normalize_chat_messages

ROOT = pathlib.Path(__file__).resolve().parents[3]
TEMPLATE_FILES = {
    name: f"fuzz/corpus/chat_template_fuzz/{name}.jinja"
    for name in ("gemma4", "gemma3", "chatml", "features")
}
# A ChatML template with transformers' assistant-mask blocks.
GENERATION = (
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'assistant' -%}<|im_start|>assistant\n"
    "{% generation %}{{ m['content'] | trim }}<|im_end|>\n{% endgeneration %}"
    "{%- else -%}<|im_start|>{{ m['role'] }}\n{{ m['content'] | trim }}<|im_end|>\n"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif -%}"
)
# Python's string methods and filters on Unicode text, read from a template variable.
STRINGS = (
    "[{{ x | trim }}][{{ x.strip() }}][{{ x.lstrip() }}][{{ x.rstrip() }}]"
    "{{ x.split() | tojson }}{{ x.split(none, 1) | tojson }}[{{ x | wordcount }}]"
    "[{{ x.strip('\u3000a') }}]{%- if x -%}\n  [{{- x -}}]  \n{%- endif %}"
)
WHITESPACE = ["\u3000", "\u00a0", "\u2028", "\u2029", "\u0085", "\u1680", "\u2000", "\u200a",
              "\u202f", "\u205f", "\u001c", "\u001f", "\t", "\n", "\r", "\x0b", "\x0c", " ",
              "\u200b", "\u180e", "\ufeff"]  # the last three are not Python whitespace
WORDS = ["Hello", "こんにちは", "世界", "naïve", "😀", "👩‍💻", "{{ x }}", "<|turn>", "a\\b",
         "x = f(1, 2)", "0.5", "Ünïcödé", "\"quoted\"", "'single'", "tab\there", "𝔘𝔫𝔦"]
ROLES_AFTER_USER = ["assistant", "assistant", "assistant", "tool_call"]


def text(rng):
    parts = []
    for _ in range(rng.randint(0, 5)):
        parts.append(rng.choice(WORDS) if rng.random() < 0.7 else rng.choice(WHITESPACE))
        if rng.random() < 0.5:
            parts.append(" ")
    s = "".join(parts)
    if rng.random() < 0.4:
        s = rng.choice(WHITESPACE) + s
    if rng.random() < 0.4:
        s = s + rng.choice(WHITESPACE)
    return s


def argument(rng, depth=0):
    kind = rng.randrange(7 if depth < 2 else 5)
    if kind == 0:
        return rng.choice([0, 1, -7, 42, 2**40])
    if kind == 1:
        return rng.choice([0.5, 2.25, -3.0, 1e-3, 100.0])
    if kind == 2:
        return text(rng)
    if kind == 3:
        return rng.choice([True, False])
    if kind == 4:
        return None
    if kind == 5:
        return [argument(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {f"k{i}": argument(rng, depth + 1) for i in range(rng.randint(0, 3))}


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city", "enum": ["Paris", "Oslo"]},
        "days": {"type": "integer", "nullable": True}}, "required": ["city"]}}}]


def conversation(rng):
    messages = []
    if rng.random() < 0.3:
        messages.append({"role": "system", "content": text(rng) or "Be brief."})
    for turn in range(rng.randint(1, 4)):
        messages.append({"role": "user", "content": text(rng) or "q"})
        kind = rng.choice(ROLES_AFTER_USER)
        m = {"role": "assistant"}
        if kind == "tool_call":
            m["tool_calls"] = [{"id": "c1", "type": "function", "function": {
                "name": "get_weather",
                "arguments": {"city": "Paris", "days": argument(rng), "extra": argument(rng)}}}]
            if rng.random() < 0.5:
                m["content"] = None
            if rng.random() < 0.3:
                m["reasoning_content"] = text(rng) or "think"
            messages.append(m)
            messages.append({"role": "tool", "tool_call_id": "c1", "content": text(rng) or "ok"})
            m = {"role": "assistant"}
        choice = rng.randrange(6)
        m["content"] = [text(rng) or "answer", "", "   ", None, [], text(rng)][choice]
        if isinstance(m["content"], str) and rng.random() < 0.2:
            m["content"] = [{"type": "text", "text": m["content"]}]
        if rng.random() < 0.3:
            m["tool_calls"] = None  # an OpenAI export's null
        if rng.random() < 0.2:
            m["reasoning"] = text(rng) or "because"
        messages.append(m)
    example = {"messages": messages}
    if rng.random() < 0.3:
        example["tools"] = TOOLS
    if rng.random() < 0.2:
        example["chat_template_kwargs"] = {"enable_thinking": rng.random() < 0.5}
    return example


def render(template, example, add_generation_prompt, generation=False):
    conversation = _normalize_chat_messages(example["messages"])
    kwargs = {"bos_token": "<bos>", "eos_token": "<eos>", **example.get("chat_template_kwargs", {})}
    try:
        rendered, indices = render_jinja_template(
            conversations=[conversation], tools=example.get("tools"),
            documents=example.get("documents"), chat_template=template,
            return_assistant_tokens_mask=generation, add_generation_prompt=add_generation_prompt,
            **kwargs)
    except Exception as e:  # the template's own error, or jinja2's
        return {"error": f"{type(e).__name__}: {e}"}
    text = rendered[0]
    out = {"text": text}
    if generation:
        def byte(i):
            return len(text[:i].encode("utf-8"))
        out["spans"] = [[byte(b), byte(e)] for b, e in indices[0]]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=60, help="conversations per template")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=str(pathlib.Path(__file__).with_name("cases.json")))
    a = ap.parse_args()
    rng = random.Random(a.seed)
    templates = {name: (ROOT / path).read_text(encoding="utf-8")
                 for name, path in TEMPLATE_FILES.items()}
    templates["generation"] = GENERATION
    templates["strings"] = STRINGS
    cases = []
    for name, template in templates.items():
        for _ in range(a.count):
            example = conversation(rng)
            if name == "strings":
                example["chat_template_kwargs"] = {"x": text(rng)}
            gen = rng.random() < 0.3
            case = {"template": name, "example": example, "add_generation_prompt": gen}
            case.update(render(template, example, gen, generation=(name == "generation" and not gen)))
            cases.append(case)
    out = {"made_by": f"transformers {transformers.__version__}, jinja2 {jinja2.__version__}",
           "templates": {**TEMPLATE_FILES, "generation": GENERATION, "strings": STRINGS},
           "cases": cases}
    pathlib.Path(a.out).write_text(json.dumps(out, ensure_ascii=False) + "\n",
                                   encoding="utf-8")
    failed = sum("error" in c for c in cases)
    print(f"wrote {a.out}: {len(cases)} cases ({failed} that fail in transformers)")


if __name__ == "__main__":
    main()
