// Package bench compares berth's structural search (package
// tools/structural, the `berth ast-grep` command) with the ast-grep CLI on
// the same files, patterns and match counts. It has no code of its own: the
// comparison is TestReport (run by bench/run, or with BERTH_BENCH=1) and the
// in-process Benchmark functions, which are the profiling entry points.
package bench
