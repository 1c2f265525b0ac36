#!/usr/bin/env python3
"""Import circles between the modules of each crate of the workspace.

usage: module-cycles.py [-v] [ROOT]   (ROOT: the workspace, default: this script's ../..;
       -v: each module of a circle and the modules of the circle it uses)

A module is a file (`report.rs`, `report/markdown.rs`, `runner/mod.rs`). An
edge A -> B is a path in A's code that names B or an item in it: in a `use`
(braces expanded) or in code (`crate::x::y`, `super::y`, `self::y`). Two
kinds of edge are left out:
- to an ancestor of A (a module may use what its parents hold: they
  own it), and
- from test code (`#[cfg(test)] mod …` blocks, `tests.rs` and `*_tests.rs`).
What is left must have no circle. Each circle (a strongly connected set of
two or more modules) is printed as `crate: a -> b -> a`; exit 1 if there is
one, 0 if none.
"""

import os
import re
import sys

ARGS = [a for a in sys.argv[1:] if a != "-v"]
ROOT = os.path.abspath(ARGS[0] if ARGS else os.path.join(os.path.dirname(__file__), "..", ".."))

# (crate name, its root file): each library and each binary of the workspace.
CRATES = [
    ("locklab-core", "core/src/lib.rs"),
    ("locklab-drivers", "drivers/src/lib.rs"),
    ("locklab-holders", "holders/src/lib.rs"),
    ("locklab-holders (bin)", "holders/src/main.rs"),
    ("locklab", "harness/src/lib.rs"),
    ("locklab (bin)", "harness/src/bin/locklab/main.rs"),
]

MOD_DECL = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;", re.M)
PATH_ATTR = re.compile(r'#\[path\s*=\s*"([^"]+)"\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;')


def strip_comments_and_strings(text):
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + len(m.group(0)))
            out.append('""')
            i = n if j < 0 else j + len(end)
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""')
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]):
            m = re.match(r"'(\\.|[^\\'])'", text[i:])
            out.append("' '")
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def strip_test_blocks(code):
    """Removes `#[cfg(test)]` items (a `mod … { … }` or any braced item)."""
    out, i = [], 0
    while True:
        j = code.find("#[cfg(test)]", i)
        if j < 0:
            out.append(code[i:])
            return "".join(out)
        out.append(code[i:j])
        k = j + len("#[cfg(test)]")
        semi, brace = code.find(";", k), code.find("{", k)
        if brace < 0 or (0 <= semi < brace):
            i = semi + 1
            continue
        depth, m = 0, brace
        while m < len(code):
            if code[m] == "{":
                depth += 1
            elif code[m] == "}":
                depth -= 1
                if depth == 0:
                    break
            m += 1
        i = m + 1


def expand_use(tree):
    """`a::{b, c::{d, e}}` -> [a::b, a::c::d, a::c::e]."""
    tree = tree.strip()
    if not tree:
        return []
    depth = 0
    for idx, ch in enumerate(tree):
        if ch == "{":
            if depth == 0:
                prefix = tree[:idx].rstrip(":").strip()
                inner = tree[idx + 1:tree.rfind("}")]
                parts, d, start = [], 0, 0
                for k, c2 in enumerate(inner):
                    if c2 == "{":
                        d += 1
                    elif c2 == "}":
                        d -= 1
                    elif c2 == "," and d == 0:
                        parts.append(inner[start:k])
                        start = k + 1
                parts.append(inner[start:])
                out = []
                for p in parts:
                    for e in expand_use(p):
                        out.append(prefix + "::" + e if prefix else e)
                return out
            depth += 1
    return [re.split(r"\s+as\s+", tree)[0].strip()]


def modules_of(crate_root):
    """{module path tuple: file} for the crate whose root file is crate_root."""
    mods = {}

    def walk(path, file, is_dir_owner):
        mods[path] = file
        text = strip_comments_and_strings(open(file, encoding="utf-8").read())
        base = os.path.dirname(file) if is_dir_owner else os.path.splitext(file)[0]
        explicit = {name: p for p, name in PATH_ATTR.findall(text)}
        for name in MOD_DECL.findall(text):
            if name in explicit:
                child = os.path.join(os.path.dirname(file), explicit[name])
                walk(path + (name,), child, False)
                continue
            for cand, owner in ((os.path.join(base, name + ".rs"), False), (os.path.join(base, name, "mod.rs"), True)):
                if os.path.isfile(cand):
                    walk(path + (name,), cand, owner)
                    break

    walk((), crate_root, True)
    return mods


def is_test_file(file):
    b = os.path.basename(file)
    return b == "tests.rs" or b.endswith("_tests.rs")


def references(module, code, mods):
    """Absolute paths (tuples) that module's code names: from the crate
    root (`crate::`), relative (`super::`, `self::`), or through a child
    module's name (`markdown::render`, `use child::X`)."""
    found = []
    for m in re.finditer(r"\buse\s+([^;]+);", code):
        for p in expand_use(m.group(1)):
            found.append(p)
    for m in re.finditer(r"(?<![A-Za-z0-9_:])((?:[a-z_][a-z0-9_]*)(?:::[A-Za-z_][A-Za-z0-9_]*)+)", code):
        found.append(m.group(1))
    out = []
    for p in found:
        segs = [s for s in p.replace(" ", "").split("::") if s]
        if segs and segs[0] not in ("crate", "super", "self") and module + (segs[0],) in mods:
            segs = ["self"] + segs
        if not segs or segs[0] not in ("crate", "super", "self"):
            continue
        cur = list(module) if segs[0] != "crate" else []
        i = 1 if segs[0] == "crate" else 0
        while i < len(segs) and segs[i] in ("super", "self"):
            if segs[i] == "super":
                cur = cur[:-1]
            i += 1
        out.append(tuple(cur + segs[i:]))
    return out


def cycles(mods):
    files = {}
    edges = {m: set() for m in mods}
    for m, f in mods.items():
        if is_test_file(f):
            continue
        code = strip_test_blocks(strip_comments_and_strings(open(f, encoding="utf-8").read()))
        for p in references(m, code, mods):
            # The longest prefix that is a module.
            target = None
            for k in range(len(p), -1, -1):
                if p[:k] in mods:
                    target = p[:k]
                    break
            if target is None or target == m or m[:len(target)] == target or is_test_file(mods[target]):
                continue
            edges[m].add(target)
    # Tarjan's strongly connected components.
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(comp)

    for v in sorted(mods):
        if v not in index:
            visit(v)
    return sccs, edges


def name(m, mods):
    return os.path.relpath(mods[m], ROOT)


def main():
    found = 0
    verbose = "-v" in sys.argv[1:]
    for crate, root in CRATES:
        path = os.path.join(ROOT, root)
        if not os.path.isfile(path):
            continue
        mods = modules_of(path)
        sccs, edges = cycles(mods)
        for comp in sccs:
            found += 1
            members = set(comp)
            # One circle through the component, for the message.
            start = min(comp)
            seen, order, cur = {start}, [start], start
            while True:
                nxt = sorted(w for w in edges[cur] if w in members)
                back = [w for w in nxt if w == start]
                fresh = [w for w in nxt if w not in seen]
                if fresh:
                    cur = fresh[0]
                    seen.add(cur)
                    order.append(cur)
                    continue
                break
            print(f"{crate}: " + " -> ".join(name(m, mods) for m in order + [start]))
            if len(members) > len(order):
                print("  the same circle also holds " + ", ".join(sorted(name(m, mods) for m in members - set(order))))
            for m in sorted(members):
                if verbose:
                    print(f"  {name(m, mods)} uses " + ", ".join(sorted(name(w, mods) for w in edges[m] if w in members)))
    if found:
        print(f"{found} import circle(s)")
        return 1
    print("no import circle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
