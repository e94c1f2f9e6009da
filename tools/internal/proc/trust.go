package proc

import (
	"path/filepath"
	"strings"
)

// HostEnv is what every go command berth starts on the host gets: a go.mod
// or go.work toolchain line would otherwise make go download and run
// another toolchain.
const HostEnv = "GOTOOLCHAIN=local"

// HostProgram resolves p, a path on the host berth runs on, following
// every symbolic link, without executing anything. inside reports whether
// what p resolves to lies inside workspace (as given or resolved): such a
// program comes from the workspace and is never run on the host. A link in
// the workspace to a program outside it (a virtualenv's bin/python) is not
// inside. When p does not resolve (missing, a dangling link) real is "" and
// inside says whether p itself is in the workspace.
func HostProgram(workspace, p string) (real string, inside bool) {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", Within(workspace, p)
	}
	real, _ = filepath.Abs(real)
	if Within(workspace, real) {
		return real, true
	}
	if ws, err := filepath.EvalSymlinks(workspace); err == nil && Within(ws, real) {
		return real, true
	}
	return real, false
}

// Within reports whether p is dir or below it (lexically, both cleaned).
func Within(dir, p string) bool {
	dir, p = filepath.Clean(dir), filepath.Clean(p)
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}
