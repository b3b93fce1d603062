#!/usr/bin/env python3
"""Lines per Rust function, longest first: `scripts/fn-lengths.py LIMIT PATH...` lists the
functions (methods and nested functions too) longer than LIMIT lines under each PATH (a file
or a directory; target/ and vendor/ are skipped), from the `fn` line to its closing brace.

It reads rustfmt's layout: a function's closing brace sits alone at the indentation of its
`fn` line. Run `cargo fmt` first."""

import os
import re
import sys

FN = re.compile(
    r'^(\s*)(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+"[^"]*"\s+)?'
    r'fn\s+([A-Za-z_][A-Za-z0-9_]*)')


def functions(path):
    lines = open(path, encoding='utf-8', errors='replace').read().split('\n')
    for i, line in enumerate(lines):
        m = FN.match(line)
        if not m:
            continue
        indent = m.group(1)
        for j in range(i, len(lines)):
            s = lines[j]
            if j == i and s.rstrip().endswith(';'):
                break  # a declaration without a body
            if j == i and s.rstrip().endswith('}'):
                yield 1, path, i + 1, m.group(8)  # a one-line body
                break
            if j > i and s.startswith(indent + '}') and s[len(indent):].strip() in ('}', '},', '});', '};'):
                yield j - i + 1, path, i + 1, m.group(8)
                break
            if j > i and s.strip() and not s.startswith(indent):
                break  # left the item without finding its end


def rust_files(root):
    if os.path.isfile(root):
        yield root
        return
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in ('target', 'vendor')]
        for f in sorted(files):
            if f.endswith('.rs'):
                yield os.path.join(d, f)


def main():
    limit = int(sys.argv[1])
    found = [f for root in sys.argv[2:] for p in rust_files(root) for f in functions(p)]
    found = sorted((f for f in found if f[0] > limit), reverse=True)
    for n, path, line, name in found:
        print(f"{n:5} {path}:{line} {name}")
    print(f"{len(found)} functions over {limit} lines")


if __name__ == '__main__':
    main()
