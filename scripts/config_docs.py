#!/usr/bin/env python3
"""Renders configs/base.yml and docs/MAXTEXT.md from the key table (src/gemmax/config/keys.h and
maxtext_keys.cc), as `gemmax info --keys` prints it.

    scripts/config_docs.py --gemmax build/bin/gemmax            # rewrites both files
    scripts/config_docs.py --gemmax build/bin/gemmax --check    # fails, with a diff, if stale

The prose of docs/MAXTEXT.md is scripts/config_docs/MAXTEXT.md.in; the tables are the key table's.
"""
import argparse
import difflib
import json
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WIDTH = 100

BASE_HEADER = """\
# gemmax's configuration: every key with its default. Generated from src/gemmax/config/keys.h
# by scripts/config_docs.py (a test fails while the two differ); edit keys.h, then regenerate.
# The type of a key is the type of its default. A copy of this file is a config file
# (`gemmax train FILE`); the model's keys are commented out because the preset sets them.
#
# Load order: this file's defaults, then the file given on the command line, then key=value
# overrides, then the preset named by model_name fills every key that none of those set.
#
# Defaults differ from MaxText's where MaxText's are sized for TPU pods: model_name,
# dataset_type, per_device_batch_size, max_target_length, steps and learning_rate are chosen
# so that `gemmax train` with no arguments trains the tiny model on a laptop in minutes.
"""

PART_TITLES = {
    "run": "run: folder, steps, schedule, logging",
    "backend": "backend: what runs the ops",
    "model": "model (the preset named by model_name sets these; uncomment one to override it)",
    "data": "data (docs/DATA.md)",
    "step": "step: shape, numerics and memory, the seed's switches (docs/SEED.md)",
    "optimizer": "optimizer",
    "parallel": "multi-rank training: FSDP over MPI (docs/FSDP.md)",
    "checkpoint": "checkpoints",
    "eval": "evaluation (docs/EVAL.md)",
    "lora": "LoRA and QLoRA fine-tuning, MaxText's lora: block read flat (docs/LORA.md)",
}


def yaml_value(key):
    v = key["default"]
    if key["type"] == "bool":
        return "true" if v else "false"
    if key["type"] == "string":
        return json.dumps(v, ensure_ascii=False)
    if key["type"] == "float":
        text = repr(float(v))
        return text if ("." in text or "e" in text or "inf" in text) else text + ".0"
    return str(v)


def base_yml(table):
    out = [BASE_HEADER]
    part = None
    for k in table["keys"]:
        if k["part"] != part:
            part = k["part"]
            title = f"# ---- {PART_TITLES[part]} "
            out.append("\n" + title + "-" * max(4, WIDTH - len(title)) + "\n")
        line = f"{k['key']}: {yaml_value(k)}"
        if k["part"] == "model" and k["key"] != "model_name":
            line = "# " + line
        comment = k["help"]
        if "range" in k:  # an integer range up to INT64_MAX reads as a lower bound
            valid = k["range"]
            if valid.endswith(", 9223372036854775807]"):
                valid = valid.replace("[", ">=").split(",")[0]
            comment += f" (valid: {valid})"
        pad = max(len(line) + 1, 34)
        lines = textwrap.wrap(comment, WIDTH - pad - 2, break_on_hyphens=False) or [""]
        out.append(line.ljust(pad) + "# " + lines[0] + "\n")
        for rest in lines[1:]:
            out.append(" " * pad + "# " + rest + "\n")
    return "".join(out)


def code(s):
    return f"`{s}`"


def maxtext_md(table):
    with open(os.path.join(ROOT, "scripts", "config_docs", "MAXTEXT.md.in"), encoding="utf-8") as f:
        template = f.read()
    models = "| MaxText `model_name` | gemmax preset | in gemmax |\n|---|---|---|\n"
    for m in table["maxtext_models"]:
        preset = code(m["preset"]) if m["preset"] else "(none)"
        status = m["status"] if m["preset"] else "not built yet: " + m["status"]
        models += f"| {code(m['maxtext_name'])} | {preset} | {status} |\n"
    mx = [k for k in table["keys"] if k["maxtext"]]
    aliases = [k for k in table["maxtext_keys"] if k["class"] == "alias"]
    implemented = ""
    for k in mx:
        if "none_means" in k:
            implemented += f"- {code(k['key'])}: MaxText's `None` is read as {code(k['none_means'])}\n"
    for k in aliases:
        implemented += f"- {code(k['key'])}: read as gemmax's {code(k['value'])}\n"
    plain = [code(k["key"]) for k in mx if "none_means" not in k]
    implemented += "- and " + ", ".join(plain) + ".\n"
    fixed = ""
    for k in table["maxtext_keys"]:
        if k["class"] == "fixed":
            note = k["note"] or "MaxText's default, the only behaviour gemmax has"
            fixed += f"| {code(k['key'])} | {code(k['value'])} | {note} |\n"
    groups = []
    for k in table["maxtext_keys"]:
        if k["class"] == "no_meaning" and k["note"] not in groups:
            groups.append(k["note"])
    no_meaning = ""
    for g in groups:
        keys = [code(k["key"]) for k in table["maxtext_keys"]
                if k["class"] == "no_meaning" and k["note"] == g]
        no_meaning += f"- **{g}**: {', '.join(keys)}.\n"
    header = ("<!-- Generated by scripts/config_docs.py from src/gemmax/config/keys.h, maxtext_keys.cc\n"
              "     and scripts/config_docs/MAXTEXT.md.in; edit those, then regenerate (a test fails\n"
              "     while this file differs). -->\n")
    return header + template.format(
        models=models, implemented_count=len(mx) + len(aliases), implemented=implemented,
        fixed_count=fixed.count("\n"), fixed=fixed,
        no_meaning_count=sum(1 for k in table["maxtext_keys"] if k["class"] == "no_meaning"),
        no_meaning=no_meaning)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gemmax", required=True, help="the gemmax binary")
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    args = ap.parse_args()
    table = json.loads(subprocess.run([args.gemmax, "info", "--keys"], check=True,
                                      capture_output=True, text=True).stdout)
    stale = []
    for rel, text in (("configs/base.yml", base_yml(table)), ("docs/MAXTEXT.md", maxtext_md(table))):
        path = os.path.join(ROOT, rel)
        old = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
        if old == text:
            continue
        if args.check:
            stale.append(rel)
            sys.stdout.writelines(difflib.unified_diff(
                old.splitlines(True), text.splitlines(True), rel, rel + " (generated)"))
        else:
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(path + ".tmp", path)
            print("wrote", rel)
    if stale:
        print(f"\n{', '.join(stale)} differ from the key table: run "
              f"scripts/config_docs.py --gemmax {args.gemmax}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
