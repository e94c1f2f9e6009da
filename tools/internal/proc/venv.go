package proc

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Bounds of [VenvStartup].
const (
	// MaxVenvStartup is how many findings VenvStartup lists; past it, one
	// more entry says how many were left out.
	MaxVenvStartup = 16
	// MaxPthBytes is how much of one .pth file VenvStartup reads; a longer
	// file is a finding of its own (python would read all of it).
	MaxPthBytes = 1 << 20
	// maxPthFiles bounds the .pth files read per site directory; past it,
	// the rest are findings unread.
	maxPthFiles = 256
)

// VenvStartup lists what python, started as py (a virtualenv's
// bin/python inside workspace, on the host, whose interpreter lies outside
// it), would execute from the virtualenv before it runs anything it was
// asked to: every .pth file with an import line (site runs those lines),
// sitecustomize and usercustomize modules in its site-packages or in a
// directory a .pth file adds, and a pyvenv.cfg whose home lies inside the
// workspace (the standard library would be read from there). Paths are
// workspace-relative. Nothing is executed; files are only read.
//
// It lists nothing when the venv has no pyvenv.cfg: python then is the
// plain interpreter it links to, and the workspace's site-packages are not
// on its path.
func VenvStartup(workspace, py string) []string {
	binDir := filepath.Dir(py)
	prefix := filepath.Dir(binDir)
	cfg := ""
	for _, c := range []string{filepath.Join(binDir, "pyvenv.cfg"), filepath.Join(prefix, "pyvenv.cfg")} {
		if _, err := os.Stat(c); err == nil {
			cfg = c
			break
		}
	}
	if cfg == "" {
		return nil
	}
	var found []string
	add := func(p, why string) {
		found = append(found, rel(workspace, p)+" ("+why+")")
	}
	if data, err := readCapped(cfg, MaxPthBytes); err != nil {
		add(cfg, "unreadable, so its home is unknown")
	} else {
		for _, line := range strings.Split(string(data), "\n") {
			k, v, ok := strings.Cut(line, "=")
			if !ok || strings.TrimSpace(k) != "home" {
				continue
			}
			home := strings.TrimSpace(v)
			if !filepath.IsAbs(home) {
				home = filepath.Join(filepath.Dir(cfg), home)
			}
			if insideResolved(workspace, home) {
				add(cfg, "its home "+home+" is inside the workspace: the standard library would be read from there")
			}
		}
	}
	var sites []string
	for _, pat := range []string{"lib*/python*/site-packages", "lib*/python*/dist-packages", "local/lib*/python*/dist-packages"} {
		m, _ := filepath.Glob(filepath.Join(prefix, pat))
		sites = append(sites, m...)
	}
	var seen []string // resolved directories already looked at (lib64 → lib)
	var dirs []string // directories on python's path: the sites, then what .pth files add
	for _, site := range sites {
		real, err := filepath.EvalSymlinks(site)
		if err != nil || slices.Contains(seen, real) {
			continue
		}
		seen = append(seen, real)
		dirs = append(dirs, site)
		pths, _ := filepath.Glob(filepath.Join(site, "*.pth"))
		slices.Sort(pths)
		for i, pth := range pths {
			if i == maxPthFiles {
				add(site, fmt.Sprintf("%d more .pth files, not read", len(pths)-maxPthFiles))
				break
			}
			data, err := readCapped(pth, MaxPthBytes)
			switch {
			case err != nil:
				add(pth, "unreadable")
				continue
			case len(data) > MaxPthBytes:
				add(pth, fmt.Sprintf("larger than %d KiB, not read whole", MaxPthBytes>>10))
				continue
			}
			imports := false
			for _, line := range strings.Split(string(data), "\n") {
				line = strings.TrimRight(line, "\r")
				switch {
				case strings.HasPrefix(line, "import ") || strings.HasPrefix(line, "import\t"):
					imports = true
				case line == "" || strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "":
				default:
					d := strings.TrimRight(line, " \t")
					if !filepath.IsAbs(d) {
						d = filepath.Join(site, d)
					}
					if !slices.Contains(dirs, d) {
						dirs = append(dirs, d)
					}
				}
			}
			if imports {
				add(pth, "import line")
			}
		}
	}
	for _, d := range dirs {
		ents, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range ents {
			n := e.Name()
			for _, mod := range []string{"sitecustomize", "usercustomize"} {
				if n == mod || strings.HasPrefix(n, mod+".") {
					add(filepath.Join(d, n), "imported at start")
				}
			}
		}
	}
	if len(found) > MaxVenvStartup {
		found = append(found[:MaxVenvStartup], fmt.Sprintf("and %d more", len(found)-MaxVenvStartup))
	}
	return found
}

// VenvStartupWhy says, for a permission card and a refusal, that the
// virtualenv of py (workspace-relative) runs startup, VenvStartup's list.
func VenvStartupWhy(workspace, py string, startup []string) string {
	venv := rel(workspace, filepath.Dir(filepath.Dir(py)))
	return "the workspace venv " + venv + " runs at start: " + strings.Join(startup, ", ")
}

// rel is p relative to workspace when inside it, else p.
func rel(workspace, p string) string {
	if r, err := filepath.Rel(workspace, p); err == nil && Within(workspace, p) {
		return r
	}
	return p
}

// insideResolved reports whether p, or what it resolves to, lies inside
// workspace (as given or resolved).
func insideResolved(workspace, p string) bool {
	if Within(workspace, p) {
		return true
	}
	if real, err := filepath.EvalSymlinks(p); err == nil {
		p = real
	}
	ws, err := filepath.EvalSymlinks(workspace)
	return Within(workspace, p) || err == nil && Within(ws, p)
}

// readCapped reads at most max+1 bytes of file, which must be a regular
// file (a FIFO planted in the workspace is not waited on).
func readCapped(file string, max int64) ([]byte, error) {
	f, err := os.OpenFile(file, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("proc: %s is not a regular file", file)
	}
	var b bytes.Buffer
	_, err = io.Copy(&b, io.LimitReader(f, max+1))
	return b.Bytes(), err
}
