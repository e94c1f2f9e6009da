# pytruth.py ROOT: the ground truth of the cross-file questions of
# TestTruthPython, computed with Python's ast, independently of any
# language server and of berth's text scan. For every top-level function
# and class defined once under ROOT it prints, as JSON, where it is
# defined and which files refer to it other than by its definition: a
# Name, an Attribute of that name, or an import of it.
import ast
import json
import os
import sys

root = sys.argv[1]
defs = {}   # name -> [(file, line)]
uses = {}   # name -> set(file)
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
        for node in ast.walk(tree):
            name = None
            if isinstance(node, ast.Name):
                name = node.id
            elif isinstance(node, ast.Attribute):
                name = node.attr
            elif isinstance(node, ast.alias):
                name = node.asname or node.name.split(".")[-1]
                uses.setdefault(node.name.split(".")[-1], set()).add(rel)
            if name:
                uses.setdefault(name, set()).add(rel)

out = []
for name, where in sorted(defs.items()):
    if len(where) != 1:
        continue
    f, line = where[0]
    refs = sorted(uses.get(name, set()))
    out.append({"name": name, "file": f, "line": line, "files": refs})
json.dump(out, sys.stdout)
