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
import ast
import json
import os
import sys

root = sys.argv[1]
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
        imported = set()  # names the file's imports bind
        for node in ast.walk(tree):
            if isinstance(node, ast.alias):
                imported.add(node.asname or node.name.split(".")[0])
        for node in ast.walk(tree):
            name = None
            if isinstance(node, ast.Name):
                name = node.id
                direct.setdefault(name, set()).add(rel)
            elif isinstance(node, ast.Attribute) and id(node) not in own:
                name = node.attr
                base = node.value
                while isinstance(base, ast.Attribute):
                    base = base.value
                if isinstance(base, ast.Name) and base.id in imported:
                    direct.setdefault(name, set()).add(rel)  # module.name
            elif isinstance(node, ast.alias):
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
