// Chat templates: the Jinja renderer against Python's jinja2 (configured as transformers
// configures it) on real chat templates, and `messages` JSONL through gemmax tokenize.
#include "gemmax/data/chat_template.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "gemmax/data/jinja.h"
#include "gemmax/data/token_shard.h"
#include "gemmax/data/tokenize_files.h"
#include "gemmax/data/tokenizer.h"
#include "test_util.h"

namespace gemmax {
namespace {

using json = nlohmann::ordered_json;
using testing::TempDir;

// Gemma 4's chat template, verbatim: google/gemma-4-E2B-it, chat_template.jinja
// (https://huggingface.co/google/gemma-4-E2B-it/resolve/main/chat_template.jinja).
const char* kGemma4 = R"jinja({%- macro format_parameters(properties, required) -%}
    {%- set standard_keys = ['description', 'type', 'properties', 'required', 'nullable'] -%}
    {%- set ns = namespace(found_first=false) -%}
    {%- for key, value in properties | dictsort -%}
        {%- set add_comma = false -%}
        {%- if key not in standard_keys -%}
            {%- if ns.found_first %},{% endif -%}
            {%- set ns.found_first = true -%}
            {{ key }}:{
            {%- if value['description'] -%}
                description:<|"|>{{ value['description'] }}<|"|>
                {%- set add_comma = true -%}
            {%- endif -%}
            {%- if value['type'] | upper == 'STRING' -%}
                {%- if value['enum'] -%}
                    {%- if add_comma %},{%- else -%} {%- set add_comma = true -%} {% endif -%}
                    enum:{{ format_argument(value['enum']) }}
                {%- endif -%}
            {%- elif value['type'] | upper == 'ARRAY' -%}
                {%- if value['items'] is mapping and value['items'] -%}
                    {%- if add_comma %},{%- else -%} {%- set add_comma = true -%} {% endif -%}
                    items:{
                    {%- set ns_items = namespace(found_first=false) -%}
                    {%- for item_key, item_value in value['items'] | dictsort -%}
                        {%- if item_value is not none -%}
                            {%- if ns_items.found_first %},{% endif -%}
                            {%- set ns_items.found_first = true -%}
                            {%- if item_key == 'properties' -%}
                                properties:{
                                {%- if item_value is mapping -%}
                                    {{- format_parameters(item_value, value['items']['required'] | default([])) -}}
                                {%- endif -%}
                                }
                            {%- elif item_key == 'required' -%}
                                required:[
                                {%- for req_item in item_value -%}
                                    <|"|>{{- req_item -}}<|"|>
                                    {%- if not loop.last %},{% endif -%}
                                {%- endfor -%}
                                ]
                            {%- elif item_key == 'type' -%}
                                {%- if item_value is string -%}
                                    type:{{ format_argument(item_value | upper) }}
                                {%- else -%}
                                    type:{{ format_argument(item_value | map('upper') | list) }}
                                {%- endif -%}
                            {%- else -%}
                                {{ item_key }}:{{ format_argument(item_value) }}
                            {%- endif -%}
                        {%- endif -%}
                    {%- endfor -%}
                    }
                {%- endif -%}
            {%- endif -%}
            {%- if value['nullable'] %}
                {%- if add_comma %},{%- else -%} {%- set add_comma = true -%} {% endif -%}
                nullable:true
            {%- endif -%}
            {%- if value['type'] | upper == 'OBJECT' -%}
                {%- if value['properties'] is defined and value['properties'] is mapping -%}
                    {%- if add_comma %},{%- else -%} {%- set add_comma = true -%} {% endif -%}
                    properties:{
                    {{- format_parameters(value['properties'], value['required'] | default([])) -}}
                    }
                {%- elif value is mapping -%}
                    {%- if add_comma %},{%- else -%} {%- set add_comma = true -%} {% endif -%}
                    properties:{
                    {{- format_parameters(value, value['required'] | default([])) -}}
                    }
                {%- endif -%}
                {%- if value['required'] -%}
                    {%- if add_comma %},{%- else -%} {%- set add_comma = true -%} {% endif -%}
                    required:[
                    {%- for item in value['required'] | default([]) -%}
                        <|"|>{{- item -}}<|"|>
                        {%- if not loop.last %},{% endif -%}
                    {%- endfor -%}
                    ]
                {%- endif -%}
            {%- endif -%}
            {%- if add_comma %},{%- else -%} {%- set add_comma = true -%} {% endif -%}
            type:<|"|>{{ value['type'] | upper }}<|"|>}
        {%- endif -%}
    {%- endfor -%}
{%- endmacro -%}
{%- macro format_function_declaration(tool_data) -%}
    declaration:{{- tool_data['function']['name'] -}}{description:<|"|>{{- tool_data['function']['description'] -}}<|"|>
    {%- set params = tool_data['function']['parameters'] -%}
    {%- if params -%}
        ,parameters:{
        {%- if params['properties'] -%}
            properties:{ {{- format_parameters(params['properties'], params['required']) -}} },
        {%- endif -%}
        {%- if params['required'] -%}
            required:[
            {%- for item in params['required'] -%}
                <|"|>{{- item -}}<|"|>
                {{- ',' if not loop.last -}}
            {%- endfor -%}
            ],
        {%- endif -%}
        {%- if params['type'] -%}
            type:<|"|>{{- params['type'] | upper -}}<|"|>}
        {%- endif -%}
    {%- endif -%}
    {%- if 'response' in tool_data['function'] -%}
        {%- set response_declaration = tool_data['function']['response'] -%}
        ,response:{
        {%- if response_declaration['description'] -%}
            description:<|"|>{{- response_declaration['description'] -}}<|"|>,
        {%- endif -%}
        {%- if response_declaration['type'] | upper == 'OBJECT' -%}
            type:<|"|>{{- response_declaration['type'] | upper -}}<|"|>}
        {%- endif -%}
    {%- endif -%}
    }
{%- endmacro -%}
{%- macro format_argument(argument, escape_keys=True) -%}
    {%- if argument is string -%}
        {{- '<|"|>' + argument + '<|"|>' -}}
    {%- elif argument is boolean -%}
        {{- 'true' if argument else 'false' -}}
    {%- elif argument is mapping -%}
        {{- '{' -}}
        {%- set ns = namespace(found_first=false) -%}
        {%- for key, value in argument | dictsort -%}
            {%- if ns.found_first %},{% endif -%}
            {%- set ns.found_first = true -%}
            {%- if escape_keys -%}
                {{- '<|"|>' + key + '<|"|>' -}}
            {%- else -%}
                {{- key -}}
            {%- endif -%}
            :{{- format_argument(value, escape_keys=escape_keys) -}}
        {%- endfor -%}
        {{- '}' -}}
    {%- elif argument is sequence -%}
        {{- '[' -}}
        {%- for item in argument -%}
            {{- format_argument(item, escape_keys=escape_keys) -}}
            {%- if not loop.last %},{% endif -%}
        {%- endfor -%}
        {{- ']' -}}
    {%- else -%}
        {{- argument -}}
    {%- endif -%}
{%- endmacro -%}
{%- macro strip_thinking(text) -%}
    {%- set ns = namespace(result='') -%}
    {%- for part in text.split('<channel|>') -%}
        {%- if '<|channel>' in part -%}
            {%- set ns.result = ns.result + part.split('<|channel>')[0] -%}
        {%- else -%}
            {%- set ns.result = ns.result + part -%}
        {%- endif -%}
    {%- endfor -%}
    {{- ns.result | trim -}}
{%- endmacro -%}
{%- macro format_tool_response_block(tool_name, response) -%}
    {{- '<|tool_response>' -}}
    {%- if response is mapping -%}
        {{- 'response:' + tool_name + '{' -}}
        {%- for key, value in response | dictsort -%}
            {{- key -}}:{{- format_argument(value, escape_keys=False) -}}
            {%- if not loop.last %},{% endif -%}
        {%- endfor -%}
        {{- '}' -}}
    {%- else -%}
        {{- 'response:' + tool_name + '{value:' + format_argument(response, escape_keys=False) + '}' -}}
    {%- endif -%}
    {{- '<tool_response|>' -}}
{%- endmacro -%}
{%- set ns = namespace(prev_message_type=None) -%}
{%- set loop_messages = messages -%}
{{- bos_token -}}
{%- if (enable_thinking is defined and enable_thinking) or tools or messages[0]['role'] in ['system', 'developer'] -%}
    {{- '<|turn>system\n' -}}
    {%- if enable_thinking is defined and enable_thinking -%}
        {{- '<|think|>\n' -}}
        {%- set ns.prev_message_type = 'think' -%}
    {%- endif -%}
    {%- if messages[0]['role'] in ['system', 'developer'] -%}
        {{- messages[0]['content'] | trim -}}
        {%- set loop_messages = messages[1:] -%}
    {%- endif -%}
    {%- if tools -%}
        {%- for tool in tools %}
            {{- '<|tool>' -}}
            {{- format_function_declaration(tool) | trim -}}
            {{- '<tool|>' -}}
        {%- endfor %}
        {%- set ns.prev_message_type = 'tool' -%}
    {%- endif -%}
    {{- '<turn|>\n' -}}
{%- endif %}
{%- set ns_turn = namespace(last_user_idx=-1) -%}
{%- for i in range(loop_messages | length) -%}
    {%- if loop_messages[i]['role'] == 'user' -%}
        {%- set ns_turn.last_user_idx = i -%}
    {%- endif -%}
{%- endfor -%}
{%- for message in loop_messages -%}
    {%- if message['role'] != 'tool' -%}
    {%- set ns.prev_message_type = None -%}
    {%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}
    {%- set prev_nt = namespace(role=None, found=false) -%}
    {%- if loop.index0 > 0 -%}
        {%- for j in range(loop.index0 - 1, -1, -1) -%}
            {%- if not prev_nt.found -%}
                {%- if loop_messages[j]['role'] != 'tool' -%}
                    {%- set prev_nt.role = loop_messages[j]['role'] -%}
                    {%- set prev_nt.found = true -%}
                {%- endif -%}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
    {%- set continue_same_model_turn = (role == 'model' and prev_nt.role == 'assistant') -%}
    {%- if not continue_same_model_turn -%}
        {{- '<|turn>' + role + '\n' }}
    {%- endif -%}
    {%- set thinking_text = message.get('reasoning') or message.get('reasoning_content') -%}
    {%- if thinking_text and loop.index0 > ns_turn.last_user_idx and message.get('tool_calls') -%}
        {{- '<|channel>thought\n' + thinking_text + '\n<channel|>' -}}
    {%- endif -%}
            {%- if message['tool_calls'] -%}
                {%- for tool_call in message['tool_calls'] -%}
                    {%- set function = tool_call['function'] -%}
                    {{- '<|tool_call>call:' + function['name'] + '{' -}}
                    {%- if function['arguments'] is mapping -%}
                        {%- set ns_args = namespace(found_first=false) -%}
                        {%- for key, value in function['arguments'] | dictsort -%}
                            {%- if ns_args.found_first %},{% endif -%}
                            {%- set ns_args.found_first = true -%}
                            {{- key -}}:{{- format_argument(value, escape_keys=False) -}}
                        {%- endfor -%}
                    {%- elif function['arguments'] is string -%}
                        {{- function['arguments'] -}}
                    {%- endif -%}
                    {{- '}<tool_call|>' -}}
                {%- endfor -%}
                {%- set ns.prev_message_type = 'tool_call' -%}
            {%- endif -%}
            {%- set ns_tr_out = namespace(flag=false) -%}
            {%- if message.get('tool_responses') -%}
                {%- for tool_response in message['tool_responses'] -%}
                    {{- format_tool_response_block(tool_response['name'] | default('unknown'), tool_response['response']) -}}
                    {%- set ns_tr_out.flag = true -%}
                    {%- set ns.prev_message_type = 'tool_response' -%}
                {%- endfor -%}
            {%- elif message.get('tool_calls') -%}
                {%- set ns_tool_scan = namespace(stopped=false) -%}
                {%- for k in range(loop.index0 + 1, loop_messages | length) -%}
                    {%- if ns_tool_scan.stopped -%}
                    {%- elif loop_messages[k]['role'] != 'tool' -%}
                        {%- set ns_tool_scan.stopped = true -%}
                    {%- else -%}
                        {%- set follow = loop_messages[k] -%}
                        {%- set ns_tname = namespace(name=follow.get('name') | default('unknown')) -%}
                        {%- for tc in message['tool_calls'] -%}
                            {%- if tc.get('id') == follow.get('tool_call_id') -%}
                                {%- set ns_tname.name = tc['function']['name'] -%}
                            {%- endif -%}
                        {%- endfor -%}
                        {%- set tool_body = follow.get('content') -%}
                        {%- if tool_body is string -%}
                            {{- format_tool_response_block(ns_tname.name, tool_body) -}}
                        {%- elif tool_body is sequence and tool_body is not string -%}
                            {%- set ns_txt = namespace(s='') -%}
                            {%- for part in tool_body -%}
                                {%- if part.get('type') == 'text' -%}
                                    {%- set ns_txt.s = ns_txt.s + (part.get('text') | default('')) -%}
                                {%- endif -%}
                            {%- endfor -%}
                            {{- format_tool_response_block(ns_tname.name, ns_txt.s) -}}
                        {%- else -%}
                            {{- format_tool_response_block(ns_tname.name, tool_body) -}}
                        {%- endif -%}
                        {%- set ns_tr_out.flag = true -%}
                        {%- set ns.prev_message_type = 'tool_response' -%}
                    {%- endif -%}
                {%- endfor -%}
            {%- endif -%}
            {%- if message['content'] is string -%}
                {%- if role == 'model' -%}
                    {{- strip_thinking(message['content']) -}}
                {%- else -%}
                    {{- message['content'] | trim -}}
                {%- endif -%}
            {%- elif message['content'] is sequence -%}
                {%- for item in message['content'] -%}
                    {%- if item['type'] == 'text' -%}
                        {%- if role == 'model' -%}
                            {{- strip_thinking(item['text']) -}}
                        {%- else -%}
                            {{- item['text'] | trim -}}
                        {%- endif -%}
                    {%- elif item['type'] == 'image' -%}
                        {{- '<|image|>' -}}
                        {%- set ns.prev_message_type = 'image' -%}
                    {%- elif item['type'] == 'audio' -%}
                        {{- '<|audio|>' -}}
                        {%- set ns.prev_message_type = 'audio' -%}
                    {%- elif item['type'] == 'video' -%}
                        {{- '<|video|>' -}}
                        {%- set ns.prev_message_type = 'video' -%}
                    {%- endif -%}
                {%- endfor -%}
            {%- endif -%}
        {%- if ns.prev_message_type == 'tool_call' and not ns_tr_out.flag -%}
            {{- '<|tool_response>' -}}
        {%- elif not (ns_tr_out.flag and not message.get('content')) -%}
            {{- '<turn|>\n' -}}
        {%- endif -%}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {%- if ns.prev_message_type != 'tool_response' and ns.prev_message_type != 'tool_call' -%}
        {{- '<|turn>model\n' -}}
    {%- endif -%}
{%- endif -%})jinja";

// Gemma 3's chat template, verbatim: google/gemma-3-4b-it, tokenizer_config.json "chat_template".
const char* kGemma3 = R"jinja({{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
)jinja";

// A ChatML template in the indented, block-per-line style (no `-`): trim_blocks and
// lstrip_blocks decide its whitespace.
const char* kChatMl = R"jinja({% for message in messages %}
    {% if loop.first and message['role'] != 'system' %}
<|im_start|>system
You are a helpful assistant.<|im_end|>
    {% endif %}
<|im_start|>{{ message['role'] }}
{{ message['content'] }}<|im_end|>
{% endfor %}
{% if add_generation_prompt %}
<|im_start|>assistant
{% endif %}
)jinja";

// The rest of the subset: tojson, selectattr, set blocks, loop controls and loop.*, slices,
// string methods, Python's str() of values, arithmetic, tests, `+` whitespace markers.
const char* kFeatures = R"jinja({#- a comment -#}
{%- set system = messages | selectattr('role', 'equalto', 'system') | list -%}
{%- set ns = namespace(n=0, seen=[]) -%}
{%- set header %}[{{ system | length }} system, {{ messages | length }} total]{% endset -%}
{{ header }}
{% for m in messages if m.role != 'system' -%}
  {%- if loop.index > 4 %}{% break %}{% endif -%}
  {%- if m.content is not string %}{% continue %}{% endif -%}
  {%- set ns.n = ns.n + m.content | length -%}
  {{ loop.index }}/{{ loop.length }} {{ loop.revindex0 }} {{ m.role | upper }}{{ '!' if loop.last }}: {{ m.content[:12] ~ '|' ~ m.content[-3:] }}
  {{- ' first' if loop.first else ' prev=' ~ loop.previtem.role }} {{ loop.cycle('a', 'b') }}
{% else %}
no turns
{% endfor -%}
chars={{ ns.n }} {{ 7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1.5 * 2 }} {{ 0.1 + 0.2 }} {{ 10 - 3 * 2 }}
{{ messages[0] | tojson }} {{ {'b': [1, 2.5, none, true], 'a': "q\"uote"} | tojson }}
{{ [1, 'x', none, false, (1, 2)] }} {{ {'k': 'v'} }} {{ none }} {{ true }} {{ undefined_name }}|
{{ "  Mixed Case  ".strip().lower().replace("mixed", "MIXED") }} {{ "a,b,,c".split(",") }} {{ " x  y ".split() }}
{{ "abc".startswith("ab") }} {{ "abc".endswith("bc") }} {{ "hello world" | title }} {{ "HELLO" | capitalize }}
{{ [3, 1, 2] | reverse | list }} {{ ["a", "b"] | join(", ") }} {{ [1, 2, 3] | sum }}
{{ [1, 2, 3][::-1] }} {{ "héllo"[1:3] }} {{ "héllo" | length }} {{ [1, 2, 3] | first }} {{ [1, 2, 3] | last }}
{{ 3 is odd }} {{ 4 is even }} {{ 6 is divisibleby(3) }} {{ none is none }} {{ 1 is number }} {{ "x" is sequence }}
{{ {} is mapping }} {{ [] is iterable }} {{ x is undefined }} {{ 1 in [1, 2] }} {{ 'a' not in 'bcd' }} {{ 'k' in {'k': 1} }}
{{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ 1 < 2 < 3 }} {{ not 0 }} {{ 0 or 'fallback' }} {{ 'x' and 'y' }}
{{ messages | map(attribute='role') | unique | list }} {{ messages | rejectattr('role', 'eq', 'user') | map(attribute='role') | list }}
{{ {'b': 1, 'A': 2, 'c': 0} | dictsort }} {{ {'b': 1, 'A': 2} | dictsort(by='value', reverse=true) }} {{ {'x': 1}.items() | list }}
{{ undefined_name | default('dflt') }} {{ '' | default('empty', true) }} {{ '3' | int + 1 }} {{ '2.5' | float }} {{ -3 | abs }}
{% macro greet(name, punct='!') -%}
  Hi {{ name }}{{ punct }}
{%- endmacro %}
{{ greet('you') }} {{ greet('all', punct='?') }} {{ "%s" | length }}
    {%+ if true %}kept indent{% endif +%}
{{ 'end' }}
)jinja";

// transformers' renderer: jinja2 with trim_blocks, lstrip_blocks and loop controls, its own
// tojson, raise_exception; renders TEMPLATE with the JSON CONTEXT into OUT (or the error).
const char* kHarness = R"py(
import json, sys
import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
template, context, out = sys.argv[1:4]
def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)
def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                    extensions=["jinja2.ext.loopcontrols"])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
with open(template, encoding="utf-8") as f:
    compiled = env.from_string(f.read())
with open(context, encoding="utf-8") as f:
    ctx = json.load(f)
try:
    text = "OK" + compiled.render(**ctx)
except Exception as e:
    text = "ERROR" + str(e)
with open(out, "w", encoding="utf-8") as f:
    f.write(text)
)py";

bool have_jinja2() {
  static const bool have = std::system("python3 -c 'import jinja2' >/dev/null 2>&1") == 0;
  return have;
}

// "OK<text>" or "ERROR<message>", from jinja2.
std::string render_with_jinja2(const TempDir& dir, const std::string& templ, const json& context) {
  testing::write_file(dir / "harness.py", kHarness);
  testing::write_file(dir / "t.jinja", templ);
  testing::write_file(dir / "ctx.json", context.dump());
  std::string log;
  const int rc = testing::run_command("python3 " + dir / "harness.py" + " " + dir / "t.jinja" +
                                          " " + dir / "ctx.json" + " " + dir / "out.txt",
                                      &log);
  EXPECT_EQ(rc, 0) << log;
  return testing::read_file(dir / "out.txt");
}

std::string render_with_gemmax(const std::string& templ, const json& context) {
  try {
    return "OK" + jinja::Template(templ, "t.jinja").render(context);
  } catch (const Error& e) {
    return std::string("ERROR") + e.what();
  }
}

json conversation(std::initializer_list<std::pair<const char*, const char*>> turns) {
  json m = json::array();
  for (auto [role, content] : turns) m.push_back({{"role", role}, {"content", content}});
  return m;
}

std::vector<json> conversations() {
  std::vector<json> out;
  out.push_back(conversation({{"user", "What is 7 plus 5?"}, {"assistant", " Twelve. "}}));
  out.push_back(conversation({{"system", "  Answer briefly.\n"},
                              {"user", "Hi\n\nthere"},
                              {"assistant", "Hello! \"quoted\" 'single' {{ not a tag }}"},
                              {"user", "Ünïcödé, tabs\tand\nnewlines"},
                              {"assistant", "<|channel>thinking...<channel|>Fine, thanks."}}));
  json parts = conversation({{"user", "x"}});
  parts[0]["content"] =
      json::array({{{"type", "text"}, {"text", " part one "}}, {{"type", "image"}}});
  parts.push_back({{"role", "assistant"}, {"content", "seen"}});
  out.push_back(parts);
  return out;
}

TEST(ChatTemplate, RendersAsJinja2DoesOnRealTemplates) {
  if (!have_jinja2())
    GTEST_SKIP() << "python3 with jinja2 is not installed (Debian: python3-jinja2)";
  TempDir dir;
  const std::vector<std::pair<const char*, const char*>> templates = {
      {"gemma4", kGemma4}, {"gemma3", kGemma3}, {"chatml", kChatMl}, {"features", kFeatures}};
  int compared = 0;
  for (const auto& [name, templ] : templates) {
    for (const json& messages : conversations()) {
      for (bool gen : {false, true}) {
        json ctx = {{"messages", messages},
                    {"bos_token", "<bos>"},
                    {"eos_token", "<eos>"},
                    {"add_generation_prompt", gen}};
        const std::string want = render_with_jinja2(dir, templ, ctx);
        EXPECT_EQ(render_with_gemmax(templ, ctx), want) << name << " on " << messages.dump();
        EXPECT_EQ(want.substr(0, 2), "OK") << name << ": " << want;
        ++compared;
      }
    }
  }
  // Gemma 4 with tools, thinking and tool calls: its macros, dictsort, map, namespaces.
  json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Weather of a city", "parameters": {"type": "object", "properties": {
      "city": {"type": "string", "description": "The city", "enum": ["Paris", "Oslo"]},
      "days": {"type": "integer", "nullable": true},
      "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["city"]}}}])");
  json messages = json::parse(R"([{"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "", "reasoning": "look it up", "tool_calls": [{"id": "c1",
       "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2, "ok": true}}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21 C"},
      {"role": "assistant", "content": "Sunny and 21 C."}])");
  for (bool thinking : {false, true}) {
    json ctx = {{"messages", messages},
                {"tools", tools},
                {"enable_thinking", thinking},
                {"bos_token", "<bos>"},
                {"add_generation_prompt", true}};
    const std::string want = render_with_jinja2(dir, kGemma4, ctx);
    EXPECT_EQ(render_with_gemmax(kGemma4, ctx), want);
    EXPECT_NE(want.find("declaration:get_weather"), std::string::npos) << want;
    ++compared;
  }
  // Gemma 3 refuses roles that do not alternate, with its own message.
  json bad = {{"messages", conversation({{"user", "a"}, {"user", "b"}})}, {"bos_token", "<bos>"}};
  const std::string want = render_with_jinja2(dir, kGemma3, bad);
  ASSERT_EQ(want.substr(0, 5), "ERROR");
  const std::string got = render_with_gemmax(kGemma3, bad);
  EXPECT_NE(got.find("Conversation roles must alternate"), std::string::npos) << got;
  EXPECT_NE(got.find("t.jinja:15:"), std::string::npos) << got;
  EXPECT_EQ(compared, 4 * 3 * 2 + 2);
}

// Whitespace control in isolation, each case against jinja2.
TEST(ChatTemplate, WhitespaceControlAsJinja2) {
  if (!have_jinja2())
    GTEST_SKIP() << "python3 with jinja2 is not installed (Debian: python3-jinja2)";
  TempDir dir;
  const char* cases[] = {
      "a\n  {% if true %}\n  b\n  {% endif %}\nc\n",
      "a  {%- if true -%}  b  {%- endif -%}  c",
      "  {{ 'x' }}  \n  {# note #}\n  y  {#- note -#}  z\n",
      "{% for i in range(3) %}\n  {{ i }}\n{% endfor %}\n\n",
      "x {%+ if true %} y {% endif +%}\nz",
      "\r\nline\r\n{% if 1 %}\r\nwin{% endif %}\r\n",
      "{{- ' lead' }} {{ 'trail' -}} \n\n end",
  };
  for (const char* t : cases) {
    json ctx = json::object();
    EXPECT_EQ(render_with_gemmax(t, ctx), render_with_jinja2(dir, t, ctx)) << json(t).dump();
  }
}

TEST(ChatTemplate, ErrorsNameTheTemplateLineAndColumn) {
  auto error_of = [](const std::string& t, const json& ctx = json::object()) {
    try {
      jinja::Template(t, "tmpl.jinja").render(ctx);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("ok\n{{ x | frobnicate }}")
                .find("tmpl.jinja:2:8: the filter 'frobnicate' is not supported"),
            std::string::npos)
      << error_of("ok\n{{ x | frobnicate }}");
  EXPECT_NE(error_of("{% call f() %}x{% endcall %}")
                .find("tmpl.jinja:1:4: the statement '{% call %}' is not supported"),
            std::string::npos);
  EXPECT_NE(error_of("{% if x %}never closed").find("expected '{% endif %}'"), std::string::npos);
  EXPECT_NE(error_of("{{ 'unterminated }}").find("tmpl.jinja:1:4: a string that is never closed"),
            std::string::npos);
  EXPECT_NE(error_of("\n  {{ raise_exception('no system role') }}")
                .find("tmpl.jinja:2:6: the template raised an exception: no system role"),
            std::string::npos)
      << error_of("\n  {{ raise_exception('no system role') }}");
  EXPECT_NE(error_of("{{ a.b }}").find("'a' is undefined"), std::string::npos);
  EXPECT_NE(error_of("{{ 'a' + 1 }}").find("unsupported operand types for +: 'str' and 'int'"),
            std::string::npos);
  EXPECT_NE(error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").find("deeper than 200"),
            std::string::npos);
  EXPECT_NE(error_of("{% break %}").find("outside a for loop"), std::string::npos);
}

TEST(ChatTemplate, ModelFolderTemplateAsTransformersFindsIt) {
  TempDir dir;
  testing::write_file(dir / "tokenizer_config.json",
                      R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>",
                          "chat_template": [{"name": "tool_use", "template": "tools"},
                                            {"name": "default", "template": "{{ bos_token }}config"}]})");
  ChatTemplateSource s = chat_template_from_model_dir(dir.str());
  EXPECT_EQ(s.text, "{{ bos_token }}config");
  EXPECT_EQ(s.bos_token, "<s>");
  EXPECT_EQ(s.eos_token, "</s>");
  testing::write_file(dir / "chat_template.jinja",
                      "{{ bos_token }}file");  // wins, as in transformers
  s = chat_template_from_model_dir(dir.str());
  EXPECT_EQ(s.text, "{{ bos_token }}file");
  EXPECT_EQ(ChatTemplate(s).render_text({json::array({{{"role", "user"}, {"content", "x"}}})}, false),
            "<s>file");
  TempDir empty;
  try {
    chat_template_from_model_dir(empty.str());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no chat template"), std::string::npos) << e.what();
  }
}

// The loss mask of a conversation: the assistant turns' rendered text (content and the turn's
// closing marker), never the generation prompt, the user's text or the system prompt.
TEST(ChatTemplate, TokenizeMasksInTheAssistantTurns) {
  TempDir dir;
  const std::string in = dir / "chat.jsonl", out = dir / "chat.bin";
  testing::write_file(dir / "gemma4.jinja", kGemma4);
  json line = {{"messages", conversation({{"system", "Be brief."},
                                          {"user", "2+2?"},
                                          {"assistant", " Four. "},
                                          {"user", "3+3?"},
                                          {"assistant", "Six."}})}};
  testing::write_file(in, line.dump() + "\n{\"prompt\": \"P\", \"completion\": \"C\"}\n");
  TokenizeOptions o;
  o.inputs = {in};
  o.out = out;
  o.chat_template_path = dir / "gemma4.jinja";
  const TokenizeResult r = tokenize_files(o);
  EXPECT_EQ(r.conversations, 1u);
  EXPECT_EQ(r.pairs, 1u);
  const TokenShard s(out);
  ASSERT_EQ(s.header().version, 2u);
  auto tok = make_byte_tokenizer();
  const auto ids = s.tokens();
  const auto mask = s.loss_mask();
  // The first document: bos (the template's "<bos>" as the bos id), the text, eos.
  size_t end = 0;
  while (ids[end] != uint32_t(tok->eos_id())) ++end;
  ASSERT_EQ(ids[0], uint32_t(tok->bos_id()));
  std::string all, counted;
  for (size_t k = 1; k < end; ++k) {
    const int32_t id = int32_t(ids[k]);
    all += tok->decode(std::span(&id, 1));
    if (mask[k]) counted += tok->decode(std::span(&id, 1));
  }
  EXPECT_EQ(
      all,
      "<|turn>system\nBe brief.<turn|>\n<|turn>user\n2+2?<turn|>\n<|turn>model\nFour.<turn|>\n"
      "<|turn>user\n3+3?<turn|>\n<|turn>model\nSix.<turn|>\n");
  EXPECT_EQ(counted, "Four.<turn|>\nSix.<turn|>\n");
  EXPECT_EQ(mask[0], 0);    // bos
  EXPECT_EQ(mask[end], 1);  // the eos after a closing assistant turn is learnt with it

  // Bad conversations: named by file and line, nothing left behind.
  auto bad = [&](const std::string& text, const std::vector<std::string>& parts,
                 TokenizeOptions opt) {
    testing::write_file(in, line.dump() + "\n" + text + "\n");
    std::filesystem::remove(out);
    std::vector<std::string> want = {in + ":2"};
    want.insert(want.end(), parts.begin(), parts.end());
    testing::expect_error([&] { tokenize_files(opt); }, want);
    EXPECT_FALSE(std::filesystem::exists(out));
  };
  bad(R"({"messages": [{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}]})",
      {"unknown role \"robot\""}, o);
  bad(R"({"messages": [{"role": "user", "content": "only a question"}]})", {"no assistant turn"},
      o);
  TokenizeOptions g3 = o;
  g3.chat_template_path.clear();
  g3.chat_template = kGemma3;
  bad(R"({"messages": [{"role": "user", "content": "q"}, {"role": "user", "content": "q"}]})",
      {"Conversation roles must alternate"}, g3);
  TokenizeOptions none = o;
  none.chat_template_path.clear();
  testing::write_file(in, line.dump() + "\n");
  testing::expect_error([&] { tokenize_files(none); }, {in + ":1", "needs a chat template"});
  TokenizeOptions unsupported = o;
  unsupported.chat_template_path.clear();
  unsupported.chat_template = "{% for m in messages %}{{ m.content | frobnicate }}{% endfor %}";
  testing::expect_error([&] { tokenize_files(unsupported); },
                        {"--chat_template:1:39", "filter 'frobnicate' is not supported"});
}

}  // namespace
}  // namespace gemmax
