#!/usr/bin/env python3
"""Makes numbers.json: templates on Python's numbers rendered by jinja2 as transformers sets it up.

Python's ints have no bound, int()/float() of a str have their own syntax, round() is correctly
rounded half to even, and transformers' tojson takes json.dumps's arguments. Each case is a
template, a context and the text jinja2 renders (or the fact that it raises). The environment
is transformers' (_compile_jinja_template): an ImmutableSandboxedEnvironment with trim_blocks,
lstrip_blocks and loopcontrols, its tojson and raise_exception.

Needs only jinja2, the version transformers installs (3.1.6; Debian 12's 3.1.2 differs: its
int filter lets int(float('inf')) raise where 3.1.6 returns the default):
    python3 tests/data/jinja2_fixtures/make_numbers.py
"""
import json
import pathlib

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


ENV = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                    extensions=[loopcontrols])
ENV.filters["tojson"] = tojson
ENV.globals["raise_exception"] = raise_exception

# A tool call's arguments as a JSON line carries them: an unsigned 64-bit id, floats, Unicode.
ARGS = {"id": 12345678901234567890, "neg": -9223372036854775808, "pi": 3.14159,
        "tiny": 1e-7, "big": 1e16, "zero": -0.0, "name": "Zoë 😀\u3000\u007f\n\"q\"",
        "nested": {"b": [1, 2.5, True, None], "a": "x"}}

EXPRESSIONS = [
    # ints without a bound
    "2**100", "2**64 - 1", "-2**63", "9223372036854775807 + 1", "-9223372036854775807 - 2",
    "(2**70) // 3", "(-(2**70)) % 7", "(2**70) % -7", "2**70 / 2**69", "10**20 * 10**20",
    "(2**53 + 1) > 2.0**53", "2**53 + 1 == 9007199254740992.0", "2**64 == 2.0**64",
    "-(-9223372036854775807 - 1)", "(2**63) | abs", "(-2**63) | abs", "2**-2", "(-2)**3",
    "3**0", "0**0", "(2**70) is even", "(2**70 + 1) is odd", "(2**70) is divisibleby 2**69",
    "[1, 2, 3][2**70] is undefined", "2**70 > 1e30", "2**70 < 1e300", "12345678901234567890123",
    "(12345678901234567890123 | string)[:5]", "2**1000 | float", "(2**70) | float",
    "7 // -2", "-7 % 3", "7 % -3", "7.5 // -2", "-7.5 % 2", "7.5 % -2", "-0.0 // 1",
    "1 / 3", "0.1 + 0.2", "1e16", "1e15 + 0.5", "-0.0", "2.0**0.5", "10 / 4", "2**0.5",
    "1e308 * 10", "5 // 0", "5 % 0", "5.0 / 0", "0.0 ** -1", "0 ** -1",
    # int() as Jinja's do_int calls it: int(s, base), then int(float(s)), then the default
    "'1e3' | int", "'42.23' | int", "' 12 ' | int", "'1_000' | int", "'0x1f' | int(0, 16)",
    "'0x1f' | int(0, 0)", "'010' | int(7, 0)", "'00' | int(7, 0)", "'0o17' | int(0, 0)",
    "'0b101' | int(0, 2)", "'ff' | int(0, 16)", "'z' | int(0, 36)",
    "'12345678901234567890123' | int", "'\u3000 7 \u3000' | int", "'nan' | int(5)",
    "'abc' | int(3)", "1e30 | int", "'\uff11\uff12' | int", "'\u0663' | int", "'1__0' | int(9)",
    "'_1' | int(9)", "'1_' | int(9)", "'0x_1f' | int(0, 16)", "'-12' | int", "'+5' | int",
    "'- 5' | int(8)", "true | int", "none | int(4)", "3.99 | int", "-3.99 | int",
    "'inf' | int", "'-1e400' | int", "'1e400' | int(1)", "[] | int(2)", "'4.5e1' | int",
    "2**70 | int",
    # float() as do_float calls it
    "'1_0.5' | float", "' inf ' | float", "'-Infinity' | float", "'nan' | float",
    "'1e400' | float", "'0x10' | float(2.5)", "'1e' | float(1.5)", "'.5' | float", "'5.' | float",
    "'\uff11.\uff15' | float", "none | float(3.0)", "'1_' | float(0.5)", "'1e1_0' | float",
    "'1._5' | float(7.0)", "true | float", "' \u2028-2.5e-3\u3000' | float",
    # round as do_round calls it: round(value, precision), or math.ceil/floor
    "2.675 | round(2)", "2.5 | round", "3.5 | round", "-2.5 | round", "1 | round",
    "1 | round(2)", "1250 | round(-2)", "1350 | round(-2)", "-1250 | round(-2)", "-0.4 | round",
    "0.5 | round", "1.5 | round", "1234.5678 | round(-2)", "1e300 | round(2)",
    "2.675 | round(2, 'floor')", "2.675 | round(2, 'ceil')", "5 | round(1, 'ceil')",
    "0.125 | round(2)", "0.375 | round(2)", "1.0000000000000002 | round(15)",
    "123.456 | round(1)", "(2**70) | round(-3)", "2.5 | round(0, 'floor')",
    "-2.5 | round(0, 'ceil')", "1234.5 | round(-1, 'floor')", "0.1 | round(20)",
    "5e-324 | round(400)", "1e22 | round(-22)", "5e22 | round(-23)", "true | round",
    "2.5 | round(1.5)", "'x' | round", "2.5 | round(0, 'up')", "1.23456789e-5 | round(7)",
    # comparisons with nan
    "('nan' | float) < 1", "('nan' | float) > 1", "('nan' | float) == ('nan' | float)",
    "[3, 1, 2] | max", "[2**70, 1.5, -3] | min", "[1, 2**65] | sum",
    "('nan' | float) is le 1", "('nan' | float) is ge 1", "('nan' | float) is lt 1",
    "2**53 + 1 is gt 2.0**53", "0 / -1", "-1 / 10**400", "0 / 7", "'5' | int(base=1)",
    "'7' | int(3, 99)", "10**5000", "('1' * 5000) | int", "(10**4299) | string | length",
    "[10**5000] | length",
]
TOJSON = [
    "args | tojson", "args | tojson(indent=2)", "args | tojson(indent='\\t')",
    "args | tojson(separators=(',', ':'))", "args | tojson(sort_keys=true)",
    "args | tojson(ensure_ascii=true)", "args | tojson(true, 2)", "args | tojson(indent=0)",
    "args | tojson(indent=-1)", "args.nested | tojson(none, 1, (';', '='), true)",
    "[2**70, 2.0**70, -0.0, 1e-5, 1e16] | tojson", "('nan' | float) | tojson",
    "missing | tojson", "args.id + 1", "args.id * 2", "-args.id", "args.id | tojson",
    "args.neg - 1", "args.id | string", "args.id // 7", "args.id > 2**63", "args.id | float",
    "args.zero", "args.tiny", "args.big", "args.pi | round(2)",
]


def render(template, context):
    try:
        return {"output": ENV.from_string(template).render(**context)}
    except Exception as e:  # what jinja2 raises: the case expects an error
        return {"error": type(e).__name__}


def main():
    cases = []
    for expr in EXPRESSIONS:
        template = "{{ " + expr + " }}"
        cases.append({"template": template, "context": {}, **render(template, {})})
    for expr in TOJSON:
        template = "{{ " + expr + " }}"
        cases.append({"template": template, "context": {"args": ARGS},
                      **render(template, {"args": ARGS})})
    out = pathlib.Path(__file__).with_name("numbers.json")
    out.write_text(json.dumps({"jinja2": jinja2.__version__, "cases": cases}, indent=1,
                              ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{out}: {len(cases)} cases, {sum('error' in c for c in cases)} errors")


if __name__ == "__main__":
    main()
