#!/usr/bin/env python3
"""The public items of a crate of this workspace, as a program that depends on
it sees them (a reading of the source, close to what `cargo public-api` lists
without the nightly toolchain it needs).

usage: public-api.py [-v] [--features F,…] [CRATE_ROOT]
       (CRATE_ROOT: a library's root file, default harness/src/lib.rs;
        -v: list the items; --features: features taken as on, for
        `#[cfg(feature = "…")]` and `#[cfg(not(feature = "…"))]`)

An item counts when a path from the crate root reaches it through `pub`
modules or `pub use` re-exports: a `pub` function, type, trait, constant,
static or macro; each `pub` field, variant (and struct variant's field) and method of a
type that is reached (methods in the defining file's `impl` blocks); each method of a
`pub` trait. `#[doc(hidden)]` items are left out (rustdoc and `cargo
public-api` leave them out too). Re-exports of other crates
count as one item each, except those of this workspace's own crates
(`pub use locklab_core::keys`), which are followed into their source, and so does an item a
macro makes (the step kinds of `kinds!`), whose members and modules this
reading does not follow. Prints the count; with -v, each item as
`path (file:line)`.
"""

import os
import re
import sys

ARGS = sys.argv[1:]
VERBOSE = "-v" in ARGS
FEATURES = set()
rest = []
i = 0
while i < len(ARGS):
    a = ARGS[i]
    if a == "-v":
        pass
    elif a == "--features":
        i += 1
        FEATURES |= {f for f in ARGS[i].split(",") if f}
    elif a.startswith("--features="):
        FEATURES |= {f for f in a.split("=", 1)[1].split(",") if f}
    else:
        rest.append(a)
    i += 1
ROOT_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ROOT = os.path.abspath(rest[0] if rest else os.path.join(ROOT_DIR, "harness/src/lib.rs"))


def blank(seg):
    """`seg` with every character but newlines made a space (same length)."""
    return re.sub(r"[^\n]", " ", seg)


def strip(text):
    """Comments and string contents blanked, keeping every offset, so that
    a position in the result is the same position in the original text
    (whose attributes `feature_cfg` reads)."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(blank(text[i:j]))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(blank(text[i:j]))
            i = j
        elif text[i] == "r" and re.match(r'r#*"', text[i : i + 10]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            seg = text[i:j]
            out.append('"' + blank(seg[2:-1]) + '"' if len(seg) >= 2 else blank(seg))
            i = j
        elif text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            seg = text[i : j + 1]
            out.append('"' + blank(seg[1:-1]) + '"' if len(seg) >= 2 else blank(seg))
            i = j + 1
        elif text[i] == "'" and re.match(r"'(\\.|[^\\'])'", text[i : i + 4]):
            m = re.match(r"'(\\.|[^\\'])'", text[i : i + 4])
            out.append("'" + " " * (len(m.group(0)) - 2) + "'")
            i += len(m.group(0))
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


class File:
    def __init__(self, path):
        self.path = path
        self.raw = open(path, encoding="utf-8").read()
        self.text = strip(self.raw)

    def line_of(self, pos):
        return self.text.count("\n", 0, pos) + 1


def block_end(text, start):
    """Index just past the `}` matching the `{` at `start`."""
    depth = 0
    for j in range(start, len(text)):
        c = text[j]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(text)


ITEM = re.compile(
    r"(?P<attrs>(?:\s*#\s*\[[^\]]*(?:\[[^\]]*\][^\]]*)*\])*)\s*"
    r"(?P<vis>pub(?:\s*\([^)]*\))?\s+)?"
    r"(?P<kw>(?:(?:async|const|unsafe|extern\s*\"\")\s+)*(?:fn|struct|enum|trait|const|static|type|mod|use|union|macro_rules!|impl))\b"
)


def feature_cfg(raw_attrs):
    """From an item's attributes in the original text: False when a
    `#[cfg(test)]` or a feature condition removes it."""
    for a in re.findall(r"#\s*\[\s*cfg\s*\((.*?)\)\s*\]", raw_attrs, re.S):
        a = a.replace(" ", "")
        if a == "test":
            return False
        m = re.fullmatch(r'feature="([^"]+)"', a)
        if m and m.group(1) not in FEATURES:
            return False
        m = re.fullmatch(r'not\(feature="([^"]+)"\)', a)
        if m and m.group(1) in FEATURES:
            return False
    return True


def top_items(f, start=0, end=None):
    """The items at the top level of `f.text[start:end]`: (kind, name, vis,
    hidden, pos, body_start, body_end, header)."""
    text = f.text
    end = len(text) if end is None else end
    items = []
    i = start
    depth_guard = 0
    while i < end:
        m = ITEM.search(text, i, end)
        if not m:
            break
        # Only items at this block's top level: skip over nested blocks.
        brace = text.find("{", i, m.start())
        if brace >= 0:
            i = block_end(text, brace)
            continue
        kw = m.group("kw").split()[-1]
        vis = (m.group("vis") or "").strip()
        raw_attrs = f.raw[m.start("attrs") : m.end("attrs")] if m.group("attrs") else ""
        hidden = "doc(hidden)" in raw_attrs.replace(" ", "")
        keep = feature_cfg(raw_attrs)
        j = m.end()
        # The item's extent: to its `;` or its block.
        semi = text.find(";", j)
        brace = text.find("{", j)
        if kw in ("fn", "struct", "enum", "trait", "mod", "impl", "union", "macro_rules!") and brace >= 0 and (semi < 0 or brace < semi or kw in ("impl", "trait", "macro_rules!")):
            # `struct S;`, `mod m;`, `fn f();` (trait) end at the `;` before any `{`.
            if semi >= 0 and semi < brace and kw in ("struct", "mod", "fn", "union"):
                body = (None, None)
                nxt = semi + 1
            else:
                e = block_end(text, brace)
                body = (brace + 1, e - 1)
                nxt = e
        else:
            body = (None, None)
            nxt = (semi + 1) if semi >= 0 else end
        header = text[m.start("kw") : (body[0] - 1 if body[0] else nxt)]
        name = None
        if kw == "use":
            name = header[3:].strip().rstrip(";").strip()
        elif kw == "impl":
            name = header
        else:
            nm = re.match(r"(?:(?:async|const|unsafe|extern\s*\"\")\s+)*(?:fn|struct|enum|trait|const|static|type|mod|union|macro_rules!)\s*([A-Za-z_][A-Za-z0-9_]*)", header)
            name = nm.group(1) if nm else None
        if keep:
            items.append((kw, name, vis, hidden, m.start("kw"), body[0], body[1], header))
        i = nxt
    return items


FILES = {}


def file(path):
    if path not in FILES:
        FILES[path] = File(path)
    return FILES[path]


def child_path(parent_path, name):
    d = os.path.dirname(parent_path)
    base = os.path.basename(parent_path)
    if base not in ("lib.rs", "mod.rs", "main.rs"):
        d = os.path.join(d, base[:-3])
    for p in (os.path.join(d, name + ".rs"), os.path.join(d, name, "mod.rs")):
        if os.path.exists(p):
            return p
    return None


class Module:
    def __init__(self, path, modpath):
        self.path = path
        self.modpath = modpath
        self.f = file(path)
        self.items = top_items(self.f)
        self.children = {}
        for kw, name, vis, hidden, pos, b0, b1, header in self.items:
            if kw == "mod" and b0 is None:
                cp = child_path(path, name.replace("r#", ""))
                if cp:
                    self.children[name] = (vis == "pub", hidden, cp)


MODULES = {}


def module(path, modpath):
    if path not in MODULES:
        MODULES[path] = Module(path, modpath)
    return MODULES[path]


def expand_use(tree):
    """`a::{b, c::{d, e as f}, self}` → [('a::b', 'b'), ('a::c::d', 'd'),
    ('a::c::e', 'f'), ('a', 'a')]."""
    tree = re.sub(r"\s+", " ", tree).strip()
    tree = re.sub(r"\s*(::|,|\{|\})\s*", r"\1", tree)
    out = []

    def go(prefix, t):
        if t.endswith("}") and "{" in t:
            k = t.index("{")
            head, inner = t[:k], t[k + 1 : -1]
            parts, depth, cur = [], 0, ""
            for c in inner:
                if c == "," and depth == 0:
                    parts.append(cur)
                    cur = ""
                    continue
                depth += c == "{"
                depth -= c == "}"
                cur += c
            if cur:
                parts.append(cur)
            for p in parts:
                go(prefix + head, p)
            return
        m = re.fullmatch(r"(.+) as ([A-Za-z_][A-Za-z0-9_]*)", t)
        src, alias = (m.group(1), m.group(2)) if m else (t, t.split("::")[-1])
        full = prefix + src
        if full.endswith("::self"):
            full = full[: -len("::self")]
            alias = full.split("::")[-1] if not m else alias
        out.append((full, alias))

    go("", tree)
    return out


COUNTED = []
SEEN = set()


def count(path, where, line):
    if path in SEEN:
        return
    SEEN.add(path)
    COUNTED.append((path, where, line))


def members(f, kw, name, b0, b1, pub_path):
    """Fields, variants and trait methods of a reached type; methods of its
    `impl` blocks in the same file."""
    text = f.text
    if b0 is not None and kw == "struct":
        for m in re.finditer(r"(?m)^\s*pub\s+([a-z_][a-z0-9_]*)\s*:", text[b0:b1]):
            count(f"{pub_path}.{m.group(1)}", f.path, f.line_of(b0 + m.start(1)))
    if b0 is not None and kw == "enum":
        depth = 0
        body = text[b0:b1]
        variant, brace = None, False
        for m in re.finditer(r"(?m)[{}()]|^\s*([A-Z][A-Za-z0-9_]*)\b|^\s*([a-z_][a-z0-9_]*)\s*:(?!:)", body):
            tok = m.group(0).strip()
            if tok in "{(":
                depth += 1
                brace = depth == 1 and tok == "{"
            elif tok in "})":
                depth -= 1
            elif depth == 0 and m.group(1):
                variant = m.group(1)
                count(f"{pub_path}::{variant}", f.path, f.line_of(b0 + m.start(1)))
            elif depth == 1 and brace and variant and m.group(2):
                # A struct variant's field.
                count(f"{pub_path}::{variant}.{m.group(2)}", f.path, f.line_of(b0 + m.start(2)))
    if b0 is not None and kw == "trait":
        for it in top_items(f, b0, b1):
            if it[0] in ("fn", "const", "type") and not it[3]:
                count(f"{pub_path}::{it[1]}", f.path, f.line_of(it[4]))
    # impl blocks for it in the same file
    for it in top_items(f):
        if it[0] != "impl":
            continue
        header = re.sub(r"\s+", " ", it[7])
        target = re.sub(r"<.*?>", "", header.split(" for ")[-1] if " for " in header else header[4:]).strip()
        target = re.sub(r"^(?:<[^>]*>\s*)", "", target).split("<")[0].strip().split("::")[-1]
        if target != name:
            continue
        inherent = " for " not in header
        for sub in top_items(f, it[5], it[6]):
            if sub[0] in ("fn", "const", "type") and (sub[2] == "pub" or not inherent) and not sub[3]:
                if inherent:
                    count(f"{pub_path}::{sub[1]}", f.path, f.line_of(sub[4]))


# The workspace's other library crates: a re-export of one of their items
# is followed into its source, as a dependent sees it.
WORKSPACE = {
    "locklab_core": os.path.join(ROOT_DIR, "core/src/lib.rs"),
    "locklab_drivers": os.path.join(ROOT_DIR, "drivers/src/lib.rs"),
    "locklab_holders": os.path.join(ROOT_DIR, "holders/src/lib.rs"),
}


def resolve(mod, segs):
    """The module and item a path names, from `mod` (`crate::`, `super::`,
    `self::`, a child, or a crate of `WORKSPACE`): (module, item name or
    None)."""
    if not segs:
        return mod, None
    cur = mod
    if segs[0] == "crate":
        cur = module(ROOT, "crate")
        segs = segs[1:]
    elif segs[0] in WORKSPACE and segs[0] not in mod.children:
        cur = module(WORKSPACE[segs[0]], segs[0])
        segs = segs[1:]
    while segs and segs[0] in ("self", "super"):
        if segs[0] == "super":
            parent = [m for m in MODULES.values() if any(c[2] == cur.path for c in m.children.values())]
            cur = parent[0] if parent else cur
        segs = segs[1:]
    while len(segs) > 1:
        c = cur.children.get(segs[0])
        if not c:
            return None, None
        cur = module(c[2], cur.modpath + "::" + segs[0])
        segs = segs[1:]
    if segs and segs[0] in cur.children:
        c = cur.children[segs[0]]
        return module(c[2], cur.modpath + "::" + segs[0]), None
    return cur, (segs[0] if segs else None)


def walk(mod, pub_path):
    for kw, name, vis, hidden, pos, b0, b1, header in mod.items:
        if vis != "pub" or hidden:
            continue
        line = mod.f.line_of(pos)
        if kw == "mod":
            if b0 is None and name in mod.children:
                count(f"{pub_path}::{name}", mod.path, line)
                c = mod.children[name]
                walk(module(c[2], mod.modpath + "::" + name), f"{pub_path}::{name}")
            continue
        if kw == "use":
            for src, alias in expand_use(name):
                segs = src.split("::")
                if segs[0] not in ("crate", "self", "super") and segs[0] not in mod.children and segs[0] not in WORKSPACE:
                    count(f"{pub_path}::{alias} (= {src})", mod.path, line)
                    continue
                if alias == "*":
                    tm, _ = resolve(mod, segs[:-1])
                    if tm:
                        walk(tm, pub_path)
                    continue
                tm, item = resolve(mod, segs)
                if tm is None:
                    count(f"{pub_path}::{alias} (= {src}, unresolved)", mod.path, line)
                elif item is None:
                    count(f"{pub_path}::{alias}", mod.path, line)
                    walk(tm, f"{pub_path}::{alias}")
                else:
                    reach(tm, item, f"{pub_path}::{alias}")
            continue
        if kw == "impl":
            continue
        count(f"{pub_path}::{name}", mod.path, line)
        members(mod.f, kw, name, b0, b1, f"{pub_path}::{name}")


def reach(mod, item, pub_path):
    """An item named `item` in `mod`, reached at `pub_path`."""
    for kw, name, vis, hidden, pos, b0, b1, header in mod.items:
        if kw == "use" and vis.startswith("pub"):
            for src, alias in expand_use(name):
                if alias == item:
                    segs = src.split("::")
                    tm, it = resolve(mod, segs)
                    if tm is not None and it is not None:
                        return reach(tm, it, pub_path)
                    count(pub_path + f" (= {src})", mod.path, mod.f.line_of(pos))
                    return
        if name == item and kw not in ("use", "impl", "mod"):
            if hidden:
                return
            count(pub_path, mod.path, mod.f.line_of(pos))
            members(mod.f, kw, name, b0, b1, pub_path)
            return
    # (Made by a macro, e.g. the step kinds' `kinds!`: counted as one.)
    count(pub_path + " (made by a macro)", mod.path, 0)


root = module(ROOT, "crate")
crate = os.path.basename(os.path.dirname(os.path.dirname(ROOT)))
walk(root, "crate")
if VERBOSE:
    for path, where, line in sorted(COUNTED):
        print(f"{path}  ({os.path.relpath(where, ROOT_DIR)}:{line})")
print(f"{len(COUNTED)} public item(s) reachable from {os.path.relpath(ROOT, ROOT_DIR)}"
      + (f" (features: {','.join(sorted(FEATURES))})" if FEATURES else ""))
