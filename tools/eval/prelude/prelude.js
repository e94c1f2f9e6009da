// berth's eval prelude for JavaScript kernels: the helper "!cmd" lines are
// rewritten to. tool() is the kernel's own (await tool(name, args)).
globalThis.__berth_sh = function (cmd) {
  const cp = require("child_process");
  const r = cp.spawnSync("/bin/sh", ["-c", cmd], { encoding: "utf8" });
  if (r.stdout) process.stdout.write(r.stdout);
  if (r.stderr) process.stderr.write(r.stderr);
  if (r.status) process.stderr.write("(exit status " + r.status + ")\n");
};

// Workspace modules changed on disk since they were required (eval's
// pre-cell check, tools/eval/stale.go): each loader stats the file as it
// loads it, and that stat is the module's baseline.
(function () {
  const Module = require("module");
  const fs = require("fs");
  const path = require("path");
  const seen = new Map();
  const stat = (f) => {
    try {
      const st = fs.statSync(f);
      return st.mtimeMs + ":" + st.size;
    } catch (e) {
      return null;
    }
  };
  for (const ext of Object.keys(Module._extensions)) {
    const load = Module._extensions[ext];
    Module._extensions[ext] = function (m, filename) {
      const now = stat(filename);
      if (now !== null) seen.set(filename, now);
      return load.call(this, m, filename);
    };
  }
  globalThis.__berth_stale = function (root, reload) {
    let real = path.resolve(root);
    try {
      real = fs.realpathSync(root);
    } catch (e) {}
    const roots = [...new Set([path.resolve(root), real])].map((r) => r + path.sep);
    const out = { changed: [], reloaded: [], failed: [], stale_names: [] };
    for (const file of Object.keys(Module._cache)) {
      if (!roots.some((r) => file.startsWith(r))) continue;
      const now = stat(file);
      const was = seen.get(file);
      if (was === undefined) {
        if (now !== null) seen.set(file, now);
        continue;
      }
      if (now === was) continue;
      const f = JSON.stringify(file);
      out.changed.push({ name: path.relative(root, file), file, gone: now === null,
        call: "delete require.cache[" + f + "]; require(" + f + ")" });
    }
    if (reload) {
      for (const c of out.changed) {
        const old = Module._cache[c.file];
        const was = seen.get(c.file);
        delete Module._cache[c.file];
        if (c.gone) continue;
        try {
          Module.createRequire(c.file)(c.file);
          out.reloaded.push(c.name);
        } catch (e) {
          // The old module stays loaded, still stale: said again next cell.
          Module._cache[c.file] = old;
          seen.set(c.file, was);
          out.failed.push({ name: c.name, error: String(e) });
        }
      }
    }
    const s = JSON.stringify(out);
    return { _repr_mimebundle_: () => ({ "text/plain": s }) };
  };
})();
