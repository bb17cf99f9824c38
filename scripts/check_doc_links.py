#!/usr/bin/env python3
"""Checks the relative links of the project's markdown files.

    scripts/check_doc_links.py [FILE.md ...]      (default: README.md docs/*.md bench/results/*.md)

Every inline link `[text](target)` outside code must name a file that exists, relative to the
file that links; a `#anchor` (on its own or after a markdown file) must be the GitHub anchor of
one of that file's headings. Links with a scheme (https:, mailto:) are not checked. Prints each
broken link as FILE:LINE: TARGET (why) and exits 1 if there is one.
"""
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = re.compile(r"\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose_lines(path):
    """(line number, text) of the lines outside fenced code, with code spans blanked."""
    in_fence = False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if FENCE.match(line):
                in_fence = not in_fence
                continue
            if not in_fence:
                yield number, re.sub(r"`[^`]*`", "``", line)


def slug(heading):
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading: its text
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen = {}
        found = set()
        in_fence = False
        with open(path, encoding="utf-8") as f:
            for line in f:
                if FENCE.match(line):
                    in_fence = not in_fence
                    continue
                m = None if in_fence else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
                if m:
                    base = slug(m.group(1))
                    n = seen.get(base, 0)
                    seen[base] = n + 1
                    found.add(base if n == 0 else f"{base}-{n}")
        cache[path] = found
    return cache[path]


def check(path):
    problems = []
    for number, line in prose_lines(path):
        for m in LINK.finditer(line):
            target = m.group(1)
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                continue
            file_part, _, anchor = target.partition("#")
            dest = (os.path.normpath(os.path.join(os.path.dirname(path), file_part))
                    if file_part else path)
            if not os.path.exists(dest):
                problems.append((number, target, "no such file"))
            elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                problems.append((number, target, "no such heading"))
    return problems


def main(argv):
    files = argv or [os.path.join(ROOT, p) for p in ["README.md"]] + sorted(
        glob.glob(os.path.join(ROOT, "docs", "*.md"))) + sorted(
        glob.glob(os.path.join(ROOT, "bench", "results", "*.md")))
    bad = 0
    for path in files:
        for number, target, why in check(path):
            print(f"{os.path.relpath(path, ROOT)}:{number}: {target} ({why})")
            bad += 1
    print(f"{len(files)} files, {bad} broken link(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
