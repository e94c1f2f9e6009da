// berth's eval prelude for JavaScript kernels: the helper "!cmd" lines are
// rewritten to. tool() is the kernel's own (await tool(name, args)).
globalThis.__berth_sh = function (cmd) {
  const cp = require("child_process");
  const r = cp.spawnSync("/bin/sh", ["-c", cmd], { encoding: "utf8" });
  if (r.stdout) process.stdout.write(r.stdout);
  if (r.stderr) process.stderr.write(r.stderr);
  if (r.status) process.stderr.write("(exit status " + r.status + ")\n");
};
