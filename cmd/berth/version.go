package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"berth.dev/berth/syntax"
)

func newVersion() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print berth's version, commit, Go and tree-sitter versions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return writeVersion(cmd.OutOrStdout())
		},
	}
}

// writeVersion prints what a bug report needs: the version (the first
// line, "berth VERSION"), the commit it was built from, the Go toolchain
// and platform, and the tree-sitter runtime.
func writeVersion(w io.Writer) error {
	bi, _ := debug.ReadBuildInfo()
	commit, when, modified := "unknown (built without VCS information)", "", false
	sitterMod := "unknown"
	if bi != nil {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		for _, d := range bi.Deps {
			if d.Path == "github.com/tree-sitter/go-tree-sitter" {
				sitterMod = d.Version
			}
		}
	}
	if revision != "" {
		commit = revision
	}
	if when != "" {
		commit += " (" + when + ")"
	}
	if modified {
		commit += ", with uncommitted changes"
	}
	lo, hi := syntax.RuntimeABI()
	_, err := fmt.Fprintf(w, "berth %s\ncommit       %s\ngo           %s %s/%s\ntree-sitter  go-tree-sitter %s, grammar ABI %d to %d\n",
		versionString(), commit, runtime.Version(), runtime.GOOS, runtime.GOARCH, sitterMod, lo, hi)
	return err
}

// versionString is the -ldflags version, else the module version, else
// the VCS revision, else "devel".
func versionString() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			return "devel-" + s.Value[:12]
		}
	}
	return "devel"
}
