"""Fails on an import circle in the Rust crates or the Python package (issue 36 item 3).

Usage: python .ci/import_cycles.py [--list]

Rust (src/, python/src/): every file is a module (`a/b.rs` is `a::b`, `a/mod.rs` is `a`). Its
edges are the paths it names outside comments: `use` trees (`use crate::a::{b, c::D};`) and
inline paths (`crate::a::f()`, `super::b::X`, `self::c`, and a child module named bare in the
file that declares it). A path is resolved to the deepest module it names; a name a module
re-exports (`pub use x::Y;`) is followed to where it is defined. Two graphs are checked:

* between top-level modules of a crate (`claims` -> `registry`), and
* inside every folder, between its children (`claims/norm` -> `claims/norm_fast`); the
  folder's own `mod.rs` is left out of this graph, since a parent re-exporting its children
  while they use the parent's items is how a Rust folder is built.

Python (python/dropmc/): every module is a node named by its dotted path, a folder's
`__init__.py` by the folder (`dropmc`, `dropmc.audit`); the edges are `from . import x`,
`from .x import y`, `from ..x.y import z`, `from dropmc.x import y`, `import dropmc.x` anywhere
in the file (an import inside a function is still a dependency); the compiled extension
`_dropmc` is not a node. Besides circles, the package's layers are checked (PYTHON_LAYERS,
lowest first: checks < model < correct < audit < assess < the front doors at the root): a
module may import its own layer and those below it, and an import that runs back up fails,
printed with its file, line and statement; a new subpackage must be given its layer.

A `#[cfg(test)]` module is left out: a unit test may drive its module through a sibling (the
cancellation test runs the engine's loop) without the library depending on it.

A circle is printed as `a -> b -> a` and the script exits 1; `--list` prints every graph's
circles and exits 0 (the count before and after a change; upward imports still fail).
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Circles reported but not failed, each with the reason and who removes it: a circle in files
# another open change owns. Empty this when that change lands; a new circle always fails.
KNOWN = {
}
RUST_CRATES = [ROOT / "src", ROOT / "python" / "src"]
PYTHON_PACKAGE = ROOT / "python" / "dropmc"

COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
STRING = re.compile(r'r#*"(?:.|\n)*?"#*|"(?:\\.|[^"\\])*"')
USE = re.compile(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);")
MOD = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*[;{]", re.M)
INLINE = re.compile(r"(?<![\w:])((?:crate|super|self)(?:::\w+)+)")


TEST_MODULE = re.compile(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{")


def strip(text):
    """The code of a Rust file: comments, string literals and `#[cfg(test)]` modules blanked."""
    text = COMMENT.sub(" ", text)
    text = STRING.sub('""', text)
    while (m := TEST_MODULE.search(text)) is not None:
        depth, end = 1, m.end()
        while depth and end < len(text):
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            end += 1
        text = text[: m.start()] + text[end:]
    return text


class Crate:
    """The modules of one Rust crate and the paths each one names."""

    def __init__(self, root):
        self.root = root
        self.files = {}  # module path tuple -> code
        for path in sorted(root.rglob("*.rs")):
            rel = path.relative_to(root).with_suffix("").parts
            if rel in (("main",),) or rel[0] == "bin":
                continue
            if rel == ("lib",):
                rel = ()
            elif rel[-1] == "mod":
                rel = rel[:-1]
            self.files[rel] = strip(path.read_text())
        self.children = {m: set(MOD.findall(code)) for m, code in self.files.items()}
        self.reexports = {}  # module -> {name: absolute path}
        self.uses = {}  # module -> [absolute paths]
        for module, code in self.files.items():
            self.uses[module] = []
            self.reexports[module] = {}
            for visibility, tree in USE.findall(code):
                for alias, segments in parse_use(tree):
                    absolute = self.absolute(module, segments)
                    if absolute is None:
                        continue
                    self.uses[module].append(absolute)
                    if visibility:
                        self.reexports[module][alias] = absolute
            inline = USE.sub(" ", code)
            for path in INLINE.findall(inline):
                absolute = self.absolute(module, path.split("::"))
                if absolute is not None:
                    self.uses[module].append(absolute)
            for child in self.children[module]:
                for m in re.finditer(r"(?<![\w:])" + child + r"::\w+", inline):
                    self.uses[module].append(module + tuple(m.group(0).split("::")))

    def absolute(self, module, segments):
        """The crate path `segments` names from `module`, or None outside the crate."""
        segments = list(segments)
        if segments[0] == "crate":
            return tuple(segments[1:])
        if segments[0] in ("self", "super"):
            base = list(module)
            while segments and segments[0] in ("self", "super"):
                if segments.pop(0) == "super":
                    if not base:
                        return None
                    base.pop()
            return tuple(base + segments)
        if segments[0] in self.children.get(module, ()):
            return tuple(module) + tuple(segments)
        return None  # an external crate, the standard library or a local item

    def target(self, path, depth=0):
        """The module that defines what `path` names, re-exports followed."""
        for end in range(len(path), -1, -1):
            module = path[:end]
            if module in self.files:
                if end < len(path) and depth < 8:
                    name = path[end]
                    again = self.reexports[module].get(name)
                    if again is not None and again != path:
                        return self.target(again + path[end + 1 :], depth + 1)
                return module
        return ()

    def edges(self):
        """(from module, to module) for every path a module names."""
        out = set()
        for module, paths in self.uses.items():
            for path in paths:
                target = self.target(path)
                if target != module:
                    out.add((module, target))
        return out


def parse_use(tree):
    """The (alias, segments) pairs of a `use` tree, `as` renames kept."""
    tree = re.sub(r"\s+as\s+", " as ", tree.strip())
    tree = re.sub(r"\s*(::|,|\{|\})\s*", r"\1", tree)
    out = []

    def walk(prefix, text):
        depth, parts, start = 0, [], 0
        for i, ch in enumerate(text):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                parts.append(text[start:i])
                start = i + 1
        parts.append(text[start:])
        for part in filter(None, (p.strip() for p in parts)):
            if "{" in part:
                head, _, rest = part.partition("{")
                walk(prefix + [s for s in head.split("::") if s], rest[: rest.rindex("}")])
                continue
            path, _, alias = part.partition(" as ")
            segments = prefix + [s for s in path.split("::") if s]
            if segments and segments[-1] == "self":
                segments = segments[:-1]
            if segments and segments[-1] != "*":
                out.append((alias or segments[-1], segments))
            elif segments:
                out.append(("*", segments[:-1]))

    walk([], tree)
    return out


def rust_graphs(crate):
    """{graph name: set of edges}: the top-level graph and one graph per folder."""
    graphs = {}
    name = crate.root.relative_to(ROOT).as_posix()
    for a, b in crate.edges():
        if a and b and a[0] != b[0]:
            graphs.setdefault(f"{name}/ (top level)", set()).add((a[0], b[0]))
        # Inside a folder: the deepest common folder of both, each side's child of it.
        common = 0
        while common < min(len(a), len(b)) and a[common] == b[common]:
            common += 1
        if common >= 1 and len(a) > common and len(b) > common:
            folder = "/".join(a[:common])
            graphs.setdefault(f"{name}/{folder}/", set()).add((a[common], b[common]))
    return graphs


PY_IMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+(\.+[\w.]*|dropmc(?:\.\w+)*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#]+)"
    r"|import[ \t]+(dropmc(?:\.\w+)*))",
    re.M,
)


EXTENSION = "_dropmc"  # the compiled extension (dropmc._dropmc): not a node


def python_modules(package):
    """{dotted name: path} of every module of the package, ``__init__.py`` named by its folder
    (``dropmc``, ``dropmc.audit``); the compiled extension is not a module here."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def python_imports(package):
    """``(from module, to module, line number, statement)`` for every import of one module of the
    package by another: ``from . import x``, ``from .x import y``, ``from ..x.y import z``,
    ``from dropmc.x import y``, ``import dropmc.x``, anywhere in the file (an import inside a
    function is still a dependency). ``from P import n`` is an edge to ``P.n`` when that is a
    module, else to ``P``."""
    modules = python_modules(package)
    out = []
    for here, path in modules.items():
        own = here if path.name == "__init__.py" else here.rpartition(".")[0]
        text = path.read_text()
        for m in PY_IMPORT.finditer(text):
            source, names, plain = m.groups()
            line = text.count("\n", 0, m.start()) + 1
            statement = " ".join(m.group(0).split())
            if plain:
                bases, imported = [plain], []
            else:
                if source.startswith("."):
                    dots = len(source) - len(source.lstrip("."))
                    parts = own.split(".")[: len(own.split(".")) - (dots - 1)]
                    rest = source.lstrip(".")
                    base = ".".join(parts + ([rest] if rest else []))
                else:
                    base = source
                imported = [n.split(" as ")[0].strip() for n in names.strip("()").replace("\n", " ").split(",")]
                bases = [base]
            targets = []
            for base in bases:
                targets += [f"{base}.{n}" for n in imported if f"{base}.{n}" in modules]
                names_only = [n for n in imported if n and n != EXTENSION and f"{base}.{n}" not in modules]
                if names_only or not imported:
                    while base and base not in modules:  # a name inside a module: the module
                        base = base.rpartition(".")[0]
                    if base:
                        targets.append(base)
            for t in targets:
                if t != here:
                    out.append((here, t, line, statement))
    return out


#: The layers of python/dropmc, lowest first (docs/architecture.md): each top-level subpackage
#: by name, then the front doors (the modules at the package's root: dropmc, dropmc.torch,
#: dropmc.flax, dropmc.keras, dropmc.testing, dropmc.pytest_plugin).
PYTHON_LAYERS = ("checks", "model", "correct", "audit", "assess")
FRONT_DOORS = "front doors"


def python_layer(module):
    """The layer of a dotted module name: its top-level subpackage, or the front doors for a
    module at the root (None: a subpackage PYTHON_LAYERS does not list)."""
    parts = module.split(".")
    if len(parts) == 1 or (len(parts) == 2 and parts[1] not in PYTHON_LAYERS and not _is_package(module)):
        return FRONT_DOORS
    return parts[1] if parts[1] in PYTHON_LAYERS else None


def _is_package(module):
    return (PYTHON_PACKAGE.parent / module.replace(".", "/") / "__init__.py").is_file()


def upward_imports(package):
    """One line per import that runs from a lower layer to a higher one, or from a module whose
    subpackage has no layer."""
    order = list(PYTHON_LAYERS) + [FRONT_DOORS]
    chain = " < ".join(order)
    out, paths = [], python_modules(package)
    for here, there, line, statement in python_imports(package):
        a, b = python_layer(here), python_layer(there)
        path = paths[here].relative_to(ROOT).as_posix()
        for name, layer in ((here, a), (there, b)):
            if layer is None:
                out.append(f"{path}:{line}: {name} is in no layer: give its subpackage a place in "
                           f"PYTHON_LAYERS ({chain})")
        if a is not None and b is not None and order.index(b) > order.index(a):
            out.append(f"upward import in {path}:{line}: `{statement}`: {a} may not import {b} "
                       f"(layers, lowest first: {chain})")
    return sorted(set(out))


def python_graph(package):
    """The edges between the package's modules."""
    return {(a, b) for a, b, _, _ in python_imports(package)}


def cycles(edges):
    """One circle per strongly connected component of more than one node (Tarjan)."""
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index, low, stack, on, comps = {}, {}, [], set(), []

    def connect(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
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
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            connect(v)
    out = []
    for comp in comps:
        members = set(comp)
        # A shortest circle through the component's first node (breadth-first).
        start = comp[0]
        previous, frontier = {start: None}, [start]
        found = None
        while frontier and found is None:
            nxt = []
            for v in frontier:
                for w in sorted(graph[v] & members):
                    if w == start:
                        found = v
                        break
                    if w not in previous:
                        previous[w] = v
                        nxt.append(w)
                if found is not None:
                    break
            frontier = nxt
        path = [found]
        while previous[path[-1]] is not None:
            path.append(previous[path[-1]])
        circle = list(reversed(path)) + [start]
        out.append((comp, circle))
    return out


def main():
    listing = "--list" in sys.argv[1:]
    graphs = {}
    for root in RUST_CRATES:
        if root.is_dir():
            graphs.update(rust_graphs(Crate(root)))
    if PYTHON_PACKAGE.is_dir():
        graphs["python/dropmc/"] = python_graph(PYTHON_PACKAGE)
    found = known = 0
    for name in sorted(graphs):
        for comp, circle in cycles(graphs[name]):
            line = f"import circle in {name}: {' -> '.join(circle)}  (component: {', '.join(comp)})"
            reason = KNOWN.get((name, tuple(comp)))
            if reason is None:
                found += 1
                print(line)
            else:
                known += 1
                print(f"{line}  [known: {reason}]")
    upward = upward_imports(PYTHON_PACKAGE) if PYTHON_PACKAGE.is_dir() else []
    for line in upward:
        print(line)
    edges = sum(len(e) for e in graphs.values())
    print(f"import_cycles: {found} new circle(s), {known} known, in {len(graphs)} graphs ({edges} edges); "
          f"{len(upward)} upward import(s) in python/dropmc/")
    if upward or (found and not listing):
        sys.exit(1)


if __name__ == "__main__":
    main()
