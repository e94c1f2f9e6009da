# pysig.py ROOT prints, as JSON, the module-level functions of the Python
# tree under ROOT that make a clean signature-change test: each is called
# by name, without * or ** arguments, three times or more in its own file
# and named in no other file; "calls" are the lines of those calls
# (Python's ast is the truth), "old" the signature as written and "new"
# the same with a required keyword-only parameter added, which breaks
# every one of those calls.
import ast, json, os, re, sys

root = sys.argv[1]
files = {}
for d, _, fs in os.walk(root):
    for f in fs:
        if f.endswith('.py'):
            p = os.path.join(d, f)
            files[os.path.relpath(p, root)] = open(p, encoding='utf-8').read()
out = []
for rel, src in sorted(files.items()):
    try:
        tree = ast.parse(src)
    except SyntaxError:
        continue
    for fn in tree.body:
        if not isinstance(fn, ast.FunctionDef) or fn.decorator_list:
            continue
        a = fn.args
        if a.vararg or a.kwarg or a.kwonlyargs:
            continue
        name = fn.name
        calls, bad = [], False
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name:
                if any(isinstance(x, ast.Starred) for x in node.args) or any(k.arg is None for k in node.keywords):
                    bad = True
                calls.append(node.lineno)
            elif isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load):
                bad = True
            elif isinstance(node, (ast.FunctionDef, ast.Lambda)) and node is not fn:
                args = node.args
                if any(x.arg == name for x in args.args + args.posonlyargs + args.kwonlyargs):
                    bad = True
        loads = sum(1 for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == name)
        if bad or len(calls) < 3 or loads != len(calls):
            continue
        word = re.compile(r'\b%s\b' % re.escape(name))
        if any(word.search(s) for r, s in files.items() if r != rel):
            continue
        lines = src.splitlines(keepends=True)
        # the signature: from "def name(" to its matching ")"
        start = sum(len(l) for l in lines[:fn.lineno - 1]) + fn.col_offset
        i = src.index('(', start)
        depth, j = 0, i
        while True:
            c = src[j]
            if c == '(':
                depth += 1
            elif c == ')':
                depth -= 1
                if depth == 0:
                    break
            j += 1
        old = src[start:j + 1]
        if src.count(old) != 1 or '#' in old:
            continue
        inner = src[i + 1:j].rstrip().rstrip(',')
        new = src[start:i + 1] + inner + (', ' if inner.strip() else '') + '*, berth_extra)'
        out.append({'file': rel, 'name': name, 'calls': sorted(calls), 'old': old, 'new': new})
json.dump(out, sys.stdout, indent=1)
