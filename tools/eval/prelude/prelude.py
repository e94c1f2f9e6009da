# berth's eval prelude: run once in a fresh Python kernel's user namespace
# (ipykernel or berth's own kernel). It defines the helpers the rewritten
# IPython idioms call. tool() comes from the kernel (berth's own) or from
# kernel/bundled's shim (ipykernel).


def __berth_setup():
    import os
    import shlex
    import subprocess
    import sys
    import timeit as _timeit

    g = globals()

    def _run(argv, shell, capture):
        if capture:
            p = subprocess.run(argv, shell=shell, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            return p.stdout.decode("utf-8", "replace").splitlines()
        p = subprocess.Popen(argv, shell=shell, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            for line in iter(p.stdout.readline, b""):
                sys.stdout.write(line.decode("utf-8", "replace"))
                sys.stdout.flush()
            p.wait()
        except KeyboardInterrupt:
            p.kill()
            p.wait()
            raise
        if p.returncode:
            sys.stderr.write("(exit status %d)\n" % p.returncode)
        return None

    def sh(cmd, capture=False):
        return _run(cmd, True, capture)

    def bash(script):
        import shutil
        shell = shutil.which("bash") or "/bin/sh"
        return _run([shell, "-c", script], False, False)

    def cd(d):
        if d:
            os.chdir(os.path.expanduser(d))
        print(os.getcwd())

    def _dists():
        import importlib
        try:
            from importlib import metadata
        except ImportError:
            return {}
        importlib.invalidate_caches()  # directory listings are cached
        out = {}
        for d in metadata.distributions():
            try:
                out[(d.metadata["Name"].lower(), d.version, str(getattr(d, "_path", "")))] = d
            except Exception:
                pass
        return out

    def _top_level(dist):
        names = set()
        try:
            tl = dist.read_text("top_level.txt")
        except Exception:
            tl = None
        if tl:
            names.update(n.strip() for n in tl.split() if n.strip())
        for f in dist.files or []:
            parts = str(f).split("/")
            if parts[0].endswith((".dist-info", ".egg-info")) or parts[0] == "..":
                continue
            top = parts[0]
            if top.endswith(".py"):
                top = top[:-3]
            if top and top.isidentifier():
                names.add(top)
        return names

    def _externally_managed():
        # PEP 668: the OS owns this python's site-packages.
        import sysconfig
        if sys.prefix != sys.base_prefix:
            return False
        try:
            return os.path.exists(os.path.join(sysconfig.get_paths()["stdlib"], "EXTERNALLY-MANAGED"))
        except Exception:
            return False

    def _prune_target():
        # pip --target --upgrade leaves the old version's .dist-info next
        # to the new one; keep the newest per project.
        import shutil
        infos = {}
        for e in os.listdir(_pip_target):
            if e.endswith(".dist-info"):
                name = e[:-len(".dist-info")].rsplit("-", 1)[0].lower().replace("_", "-")
                infos.setdefault(name, []).append(os.path.join(_pip_target, e))
        for paths in infos.values():
            paths.sort(key=os.path.getmtime)
            for old in paths[:-1]:
                shutil.rmtree(old, ignore_errors=True)

    def pip(args):
        import importlib
        argv = shlex.split(args)
        placed = ("--target", "-t", "--user", "--prefix", "--root", "--break-system-packages")
        if argv and argv[0] == "install" and _externally_managed() and not any(a.startswith(placed) for a in argv):
            # Never write into an OS-managed python: install into a
            # directory of its own on sys.path instead.
            os.makedirs(_pip_target, exist_ok=True)
            if _pip_target not in sys.path:
                sys.path.insert(0, _pip_target)
            argv = argv[:1] + ["--target", _pip_target, "--upgrade"] + argv[1:]
            print("berth: this python is managed by the OS (PEP 668); installing into %s, which is on sys.path" % _pip_target)
        before = _dists()
        code = _run([sys.executable, "-m", "pip"] + argv, False, False)
        if "--target" in argv and argv[argv.index("--target") + 1] == _pip_target:
            _prune_target()
        after = _dists()
        purged = set()
        for k, dist in after.items():
            if k not in before:
                for top in _top_level(dist):
                    for m in list(sys.modules):
                        if m == top or m.startswith(top + "."):
                            del sys.modules[m]
                            purged.add(top)
        importlib.invalidate_caches()
        if purged:
            print("berth: dropped %s from sys.modules; the next import loads the installed version" % ", ".join(sorted(purged)))
        return code

    def timeit(stmt, setup="pass", number=0, repeat=7):
        t = _timeit.Timer(stmt, setup, globals=g)
        if not number:
            number, _ = t.autorange()
        runs = [x / number for x in t.repeat(repeat=repeat, number=number)]
        mean = sum(runs) / len(runs)
        std = (sum((x - mean) ** 2 for x in runs) / len(runs)) ** 0.5

        def fmt(s):
            for unit, scale in (("s", 1.0), ("ms", 1e3), ("µs", 1e6), ("ns", 1e9)):
                if s * scale >= 1 or unit == "ns":
                    return "%.3g %s" % (s * scale, unit)

        print("%s ± %s per loop (mean ± std. dev. of %d run%s, %d loop%s each)" % (
            fmt(mean), fmt(std), repeat, "" if repeat == 1 else "s", number, "" if number == 1 else "s"))

    # Workspace modules changed on disk since import (eval's pre-cell
    # check, tools/eval/stale.go). The source loader stats each file as it
    # imports (or reloads) it: that stat is the module's baseline.
    import importlib.machinery as _machinery
    import json as _json
    _seen = {}
    _path_stats = _machinery.SourceFileLoader.path_stats

    def _recording_path_stats(self, path):
        st = _path_stats(self, path)
        _seen[path] = (st["mtime"], st["size"])
        return st

    _machinery.SourceFileLoader.path_stats = _recording_path_stats

    class _Report(object):
        # Shown as its JSON in every kernel (_repr_mimebundle_ and repr).
        def __init__(self, s):
            self.s = s

        def _repr_mimebundle_(self, include=None, exclude=None):
            return {"text/plain": self.s}

        def __repr__(self):
            return self.s

    _where = {}  # module name -> (module, its file under the root or None), for _where_root
    _where_root = [None]

    def _workspace_modules(root):
        roots = tuple(set(os.path.join(r, "") for r in (os.path.abspath(root), os.path.realpath(root))))
        if _where_root[0] != roots:
            _where.clear()
            _where_root[0] = roots
        mods, files = [], set()
        for name, m in list(sys.modules.items()):
            hit = _where.get(name)
            if hit is None or hit[0] is not m:
                f = getattr(m, "__file__", None)
                f = os.path.abspath(f) if isinstance(f, str) and name != "__main__" else None
                hit = (m, f if f and f.startswith(roots) else None)
                _where[name] = hit
            f = hit[1]
            if f is not None and f not in files:
                files.add(f)
                mods.append((name, m, f))
        return mods

    def _binding(m):
        for k, v in list(g.items()):
            if v is m and not k.startswith("_"):
                return k
        return None

    def _holds(ns, name):
        # the functions and classes of module name that namespace ns holds
        out = []
        for k, v in list(ns.items()):
            if isinstance(v, type(sys)) or k.startswith("__"):
                continue
            try:
                if getattr(v, "__module__", None) == name and callable(v):
                    out.append(k)
            except Exception:
                pass
        return out

    def stale(root, reload=False):
        import importlib
        mods = _workspace_modules(root)
        changed = []
        for name, m, f in mods:
            try:
                st = os.stat(f)
                now = (st.st_mtime, st.st_size)
            except OSError:
                now = None
            was = _seen.get(f)
            if was is None:
                # Loaded before the prelude or not from source: its
                # baseline is what is on disk now.
                if now is not None:
                    _seen[f] = now
                continue
            if now != was:
                changed.append((name, m, f, now is None))
        out = {"changed": [], "reloaded": [], "failed": [], "stale_names": []}
        for name, m, f, gone in changed:
            b = _binding(m)
            call = "importlib.reload(%s)" % b if b else "importlib.reload(sys.modules[%r])" % name
            out["changed"].append({"name": name, "file": f, "gone": gone, "call": call})
        if reload and changed:
            todo = [c for c in changed if not c[3]]
            for c in changed:
                if c[3]:
                    _seen.pop(c[2], None)  # deleted: said once, with this reload
            names = set(c[0] for c in todo)
            deps = {}
            for name, m, f, _ in todo:
                deps[name] = set(n for n in names if n != name and (_holds(vars(m), n) or any(v is sys.modules.get(n) for v in vars(m).values())))
            order, done = [], set()

            def visit(n, path):
                if n in done or n in path:
                    return
                path.add(n)
                for d in sorted(deps[n]):
                    visit(d, path)
                done.add(n)
                order.append(n)

            for name, _, _, _ in todo:
                visit(name, set())
            byname = dict((c[0], c) for c in todo)
            for n in order:
                name, m, f, _ = byname[n]
                was = _seen.get(f)
                try:
                    importlib.reload(m)
                except Exception as e:
                    # Partly run at most: still stale, said again next cell.
                    out["failed"].append({"name": name, "error": "%s: %s" % (type(e).__name__, e)})
                    _seen[f] = was
                    continue
                out["reloaded"].append(name)
                try:
                    st = os.stat(f)
                    _seen[f] = (st.st_mtime, st.st_size)
                except OSError:
                    pass
            done = set(out["reloaded"])
            holders = [("the cell namespace", g)] + [(n, vars(m)) for n, m, f in mods if n not in done]
            for where, ns in holders:
                for n in sorted(done):
                    held = [k for k in _holds(ns, n) if getattr(sys.modules[n], getattr(ns[k], "__name__", k), None) is not ns[k]]
                    if held:
                        out["stale_names"].append({"in": where, "module": n, "names": sorted(held)})
        return _Report(_json.dumps(out))

    import tempfile
    _pip_target = os.path.join(tempfile.gettempdir(), "berth-pip-%d-py%d.%d" % (os.getuid(), sys.version_info[0], sys.version_info[1]))
    if os.path.isdir(_pip_target) and _pip_target not in sys.path:
        sys.path.insert(0, _pip_target)

    g["__berth_sh"] = sh
    g["__berth_bash"] = bash
    g["__berth_cd"] = cd
    g["__berth_pip"] = pip
    g["__berth_timeit"] = timeit
    g["__berth_stale"] = stale


__berth_setup()
del __berth_setup
