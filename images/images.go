// Package images names berth's sandbox test images and reads their recipes.
//
// Each image has a directory here with packages.txt (Debian bookworm packages, one a
// line), optionally env and setup, and a Dockerfile for users who have a registry. The
// script images/build makes the images offline with debootstrap and docker import; this
// package lets Go tests name the images and keeps the Dockerfiles honest.
package images

import (
	"bufio"
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// References of the images that images/build tags. Tests may override them with the
// environment variable BERTH_TEST_IMAGE (or a test-specific one) when they need another.
const (
	// Minimal has python3 and nodejs but no Jupyter kernel.
	Minimal = "berth-test-minimal:latest"
	// Python has python3 with ipykernel, debugpy, pylsp (pyflakes, pycodestyle), pandas and matplotlib.
	Python = "berth-test-python:latest"
	// Go has the build machine's Go toolchain, gopls and dlv, and clangd. It is built only on request
	// (images/build go).
	Go = "berth-test-go:latest"
	// Node has Node.js 20 with pyright, typescript-language-server (with
	// TypeScript), bash-language-server and shellcheck. It is built only on
	// request (images/build node).
	Node = "berth-test-node:latest"
)

//go:embed */packages.txt
var recipes embed.FS

// Names returns the names of the images that have a recipe, sorted.
func Names() []string {
	entries, err := fs.Glob(recipes, "*/packages.txt")
	if err != nil {
		// The pattern is a constant and valid; Glob fails only on a bad pattern.
		panic(err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, path.Dir(e))
	}
	sort.Strings(names)
	return names
}

// Packages returns the Debian packages of image name's packages.txt, in file order.
func Packages(name string) ([]string, error) {
	data, err := recipes.ReadFile(name + "/packages.txt")
	if err != nil {
		return nil, fmt.Errorf("images: no recipe for image %q (images are %s): %w",
			name, strings.Join(Names(), ", "), err)
	}
	return ParsePackages(data), nil
}

// ParsePackages returns the package names in a packages.txt: one a line, with '#'
// starting a comment and blank lines ignored.
func ParsePackages(data []byte) []string {
	var pkgs []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if line = strings.TrimSpace(line); line != "" {
			pkgs = append(pkgs, line)
		}
	}
	return pkgs
}
