# pytruth.py ROOT: the ground truth of the cross-file questions of
# TestTruthPython, computed with Python's ast, independently of any
# language server and of berth's text scan. For every top-level function
# and class defined once under ROOT it prints, as JSON, where it is
# defined and which files refer to it other than by its definition: a
# Name, an Attribute of that name, or an import of it. An attribute of
# self in a class that defines a method of that name is that method, not
# a reference. "attr_files" are the files that refer to it only through
# an attribute of some object other than an imported module
# (msg.walk()), which only a type of the object links to the definition.
# A name is not a reference where it is another symbol: a name a function
# binds (a parameter, an assignment) inside that function, a name a module
# assigns at its top level, and a name imported from outside ROOT's
# package, or an attribute of one (sys.version_info).
import ast
import json
import os
import sys

root = sys.argv[1]
pkg = os.path.basename(os.path.normpath(root))
defs = {}   # name -> [(file, line)]
uses = {}   # name -> set(file)
direct = {}  # name -> set(file): by a Name or an import


def own_methods(tree):
    """The self.X attributes of tree that are methods of their own class."""
    out = set()
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        methods = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        for n in ast.walk(cls):
            if isinstance(n, ast.Attribute) and n.attr in methods and isinstance(n.value, ast.Name) and n.value.id == "self":
                out.add(id(n))
    return out

def outside(tree):
    """The names tree's imports bind to modules outside the package, and the
    ids of those imports' alias nodes."""
    names, aliases = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] != pkg:
                    names.add(a.asname or a.name.split(".")[0])
                    aliases.add(id(a))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] != pkg:
            for a in node.names:
                names.add(a.asname or a.name)
                aliases.add(id(a))
    return names, aliases


def other_symbols(tree):
    """The ids of the Name nodes of tree that are other symbols: bound in
    their function, or assigned at the module's top level."""
    out = set()
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        a = fn.args
        local = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
        local |= {x.arg for x in (a.vararg, a.kwarg) if x}
        declared = set()
        for n in ast.walk(fn):
            if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
                local.add(n.id)
            elif isinstance(n, (ast.Global, ast.Nonlocal)):
                declared.update(n.names)
        local -= declared
        for n in ast.walk(fn):
            if isinstance(n, ast.Name) and n.id in local:
                out.add(id(n))
    top = set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]):
                top |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and n.id in top:
            out.add(id(n))
    return out

for dirpath, dirnames, filenames in os.walk(root):
    dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
    for fn in sorted(filenames):
        if not fn.endswith(".py"):
            continue
        path = os.path.join(dirpath, fn)
        rel = os.path.relpath(path, root)
        with open(path, "rb") as f:
            tree = ast.parse(f.read(), path)
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defs.setdefault(node.name, []).append((rel, node.lineno))
        own = own_methods(tree)
        other = other_symbols(tree)
        ext, ext_aliases = outside(tree)
        imported = set()  # names the file's imports bind
        for node in ast.walk(tree):
            if isinstance(node, ast.alias):
                imported.add(node.asname or node.name.split(".")[0])
        for node in ast.walk(tree):
            name = None
            if isinstance(node, ast.Name):
                if id(node) in other or node.id in ext:
                    continue
                name = node.id
                direct.setdefault(name, set()).add(rel)
            elif isinstance(node, ast.Attribute) and id(node) not in own:
                name = node.attr
                base = node.value
                while isinstance(base, ast.Attribute):
                    base = base.value
                if isinstance(base, ast.Name) and base.id in ext:
                    continue  # sys.version_info
                if isinstance(base, ast.Name) and base.id in imported:
                    direct.setdefault(name, set()).add(rel)  # module.name
            elif isinstance(node, ast.alias) and id(node) not in ext_aliases:
                name = node.asname or node.name.split(".")[-1]
                uses.setdefault(node.name.split(".")[-1], set()).add(rel)
                direct.setdefault(node.name.split(".")[-1], set()).add(rel)
                direct.setdefault(name, set()).add(rel)
            if name:
                uses.setdefault(name, set()).add(rel)

out = []
for name, where in sorted(defs.items()):
    if len(where) != 1:
        continue
    f, line = where[0]
    refs = sorted(uses.get(name, set()))
    attr = sorted(uses.get(name, set()) - direct.get(name, set()))
    out.append({"name": name, "file": f, "line": line, "files": refs, "attr_files": attr})
json.dump(out, sys.stdout)
