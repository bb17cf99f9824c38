#!/bin/bash
# Size and shape of the source tree at one or more git revisions, side by side: what a refactor
# changed, read from the repository itself (nothing is built).
#
#   bench/code_metrics.sh REV [REV ...]        e.g. bench/code_metrics.sh fa26436 HEAD
#
# For each REV, over src/ (files *.h *.cc *.cu *.cuh):
# - files, lines, and code lines: lines that are neither blank nor only comment (// lines and
#   /* */ blocks; a line with code and a comment counts as code). A simple filter, not cloc: a
#   comment marker inside a string literal is taken for a comment.
# - the 10 largest files (lines).
# - the 10 longest functions (lines from the line that opens the body to its closing brace). A
#   heuristic: a function body is a line ending in '{' outside any other body, with a ')' on it
#   and no '=' before its first '(', that does not start with a control keyword, namespace,
#   struct, class, enum or union; its body ends where the braces balance. Lambdas and local
#   classes count with the function that holds them. Braces in strings and comments are counted.
# - string-keyed configuration lookups outside src/gemmax/config/: calls `get_<name>("`, in src/
#   and tools/.
# - the places the gmm op's parameter list is spelled out: declarations, definitions and
#   explicit instantiations of a function `gmm`/`do_gmm` whose parameter list has two or more
#   Tensor parameters, and the definition of an argument struct `GmmArgs` of Tensors (the list,
#   once; the cuda kernels' GmmArgs of raw pointers is not the op's list).
#   Calls, and signatures that take the argument struct, do not count.
# - lines under tests/ (the same file types).
# - the places a config key is written, for num_vocab_tiling, remat_policy and learning_rate: the
#   lines of src/, tools/ and configs/ that declare, copy or spell the key: a member assigned
#   (`.key =`), a declaration (`Type key =`), "key", a YAML line `key:` (configs/base.yml counts,
#   though it may be generated) or a key-table entry `X(Type, field, key, ...)`; and the files
#   holding them.
# - the places gmm's derived sizes are computed: `weight_rows < 0` (the rows of the weights a
#   call reads when weight_rows is -1) anywhere in src/.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: bench/code_metrics.sh REV [REV ...]" >&2; exit 2; }
repo=$(git rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for rev in "$@"; do
  sha=$(git -C "$repo" rev-parse --verify --quiet "$rev^{commit}") ||
    { echo "code_metrics: '$rev' is not a revision of $repo" >&2; exit 2; }
  mkdir -p "$work/$rev"
  dirs=(src)
  for d in tools tests configs; do git -C "$repo" cat-file -e "$sha:$d" 2> /dev/null && dirs+=("$d"); done
  git -C "$repo" archive "$sha" "${dirs[@]}" | tar -x -C "$work/$rev"
done
python3 - "$work" "$@" << 'EOF'
import os, re, sys

work, revs = sys.argv[1], sys.argv[2:]
SOURCE = ('.h', '.cc', '.cu', '.cuh')

def sources(root, sub):
    for d, _, names in os.walk(os.path.join(root, sub)):
        for n in sorted(names):
            if n.endswith(SOURCE):
                p = os.path.join(d, n)
                yield os.path.relpath(p, root), open(p, encoding='utf-8', errors='replace').read()

def code_lines(text):
    n, in_block = 0, False
    for line in text.split('\n'):
        s, code = line.strip(), False
        while s:
            if in_block:
                end = s.find('*/')
                if end < 0: s = ''
                else: s, in_block = s[end + 2:].strip(), False
            elif s.startswith('//'): s = ''
            elif s.startswith('/*'): s, in_block = s[2:], True
            else: code, s = True, ''
        n += code
    return n

NOT_A_FUNCTION = re.compile(r'\s*(if|for|while|switch|else|do|try|catch|namespace|struct|class|'
                            r'enum|union|extern|template\s*<[^>]*>\s*(struct|class))\b')

def functions(path, text):
    lines, i, out = text.split('\n'), 0, []
    while i < len(lines):
        l = lines[i]
        s = l.strip()
        if (s.endswith('{') and ')' in s and not s.startswith(('}', '//', '#')) and
                '=' not in s.split('(')[0] and not NOT_A_FUNCTION.match(l)):
            depth, j = 0, i
            while j < len(lines):
                depth += lines[j].count('{') - lines[j].count('}')
                if depth <= 0: break
                j += 1
            # the signature may start on earlier lines: name the function by its line with '('
            k = i
            while k > 0 and '(' not in lines[k] : k -= 1
            out.append((j - i + 1, f'{path}:{k + 1}', lines[k].strip()[:60]))
            i = j + 1
            continue
        i += 1
    return out

GMM = re.compile(r'\b(?:do_)?gmm\s*(?:<[^<>()]*>)?\s*\(')

def gmm_places(path, text):
    out = []
    for m in GMM.finditer(text):
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {'(': 1, ')': -1}.get(text[j], 0)
            j += 1
        params = text[m.end():j - 1]
        if len(re.findall(r'\bTensor\s*&', params)) >= 2:
            out.append(f'{path}:{text.count(chr(10), 0, m.start()) + 1}')
    for m in re.finditer(r'\bstruct\s+GmmArgs\s*(?::[^{;]*)?\{([^}]*)\}', text):
        if 'Tensor' in m.group(1):
            out.append(f'{path}:{text.count(chr(10), 0, m.start()) + 1}')
    return out

LOOKUP = re.compile(r'\bget_[a-z0-9_]+\("')
KEYS = ('num_vocab_tiling', 'remat_policy', 'learning_rate')
DERIVED = re.compile(r'weight_rows\s*<\s*0')

def files_of(root, sub, ends):
    for d, _, names in os.walk(os.path.join(root, sub)):
        for n in sorted(names):
            if n.endswith(ends):
                p = os.path.join(d, n)
                yield os.path.relpath(p, root), open(p, encoding='utf-8', errors='replace').read()
report = {}
for rev in revs:
    root = os.path.join(work, rev)
    src = list(sources(root, 'src'))
    r = {'files': len(src),
         'lines': sum(t.count('\n') for _, t in src),
         'code lines': sum(code_lines(t) for _, t in src)}
    lookups = [(p, len(LOOKUP.findall(t))) for sub in ('src', 'tools')
               for p, t in sources(root, sub) if not p.startswith('src/gemmax/config/')]
    r['get_*("key") lookups'] = sum(n for _, n in lookups)
    r['files with lookups'] = sum(1 for _, n in lookups if n)
    r['tests lines'] = sum(t.count('\n') for _, t in sources(root, 'tests'))
    named = [(p, t) for sub, ends in (('src', SOURCE), ('tools', SOURCE), ('configs', ('.yml',)))
             for p, t in files_of(root, sub, ends)]
    for key in KEYS:
        write = re.compile(r'[.>]' + key + r'\s*=(?!=)|^\s*[\w:<>]+\s+' + key + r'\s*=|"' + key +
                           r'"|^' + key + r':|X\([^,()]+,\s*\w+,\s*' + key + r',', re.M)
        hits = [(p, len(write.findall(t))) for p, t in named]
        r[f'{key}: lines'] = sum(n for _, n in hits)
        r[f'{key}: files'] = sum(1 for _, n in hits if n)
    r['gmm weight_rows < 0'] = sum(len(DERIVED.findall(t)) for _, t in src)
    places = [g for p, t in src for g in gmm_places(p, t)]
    r['gmm parameter lists'] = len(places)
    report[rev] = (r, sorted(((t.count('\n'), p) for p, t in src), reverse=True)[:10],
                   sorted((f for p, t in src for f in functions(p, t)), reverse=True)[:10], places)

width = max(12, *(len(r) + 2 for r in revs))
print(f'{"":28}' + ''.join(f'{r:>{width}}' for r in revs))
for key in report[revs[0]][0]:
    print(f'{key:28}' + ''.join(f'{report[r][0][key]:>{width}}' for r in revs))
for rev in revs:
    _, files, funcs, places = report[rev]
    print(f'\n== {rev}')
    print('largest files (lines):')
    for n, p in files: print(f'  {n:6}  {p}')
    print('longest functions (lines):')
    for n, where, name in funcs: print(f'  {n:6}  {where}  {name}')
    print('gmm parameter lists:')
    for p in places: print(f'  {p}')
EOF
