package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"berth.dev/berth/syntax"
	"berth.dev/berth/syntax/grammars"
)

// newGrammars is `berth grammars install|list`: the tree-sitter grammars
// berth loads at run time (Dart, Swift), built from their npm packages.
func newGrammars() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "grammars",
		Short: "Install and list the grammars berth loads at run time (Dart, Swift)",
		Long: `berth bundles most tree-sitter grammars. Dart and Swift are compiled on the machine
berth runs on: "berth grammars install dart swift" downloads each grammar's npm
package at the exact version and sha512 integrity berth pins, compiles its
generated parser with the system C compiler and checks it by parsing a snippet.

Grammars go to --dir, else $` + syntax.GrammarDirEnv + `, else $XDG_CACHE_HOME/berth/grammars
(~/.cache/berth/grammars): the directory berth loads them from. berth also loads
the grammars shipped next to its executable (../lib/berth/grammars).
The registry is $` + grammars.RegistryEnv + `, else npm's (npm config get registry),
else ` + grammars.DefaultRegistry + `.`,
		Annotations: map[string]string{grammarsAnnotation: grammarsOnDemand},
	}
	cmd.AddCommand(newGrammarsInstall(), newGrammarsList())
	return cmd
}

func newGrammarsInstall() *cobra.Command {
	var dir string
	var force bool
	cmd := &cobra.Command{
		Use:         "install [--dir DIR] [--force] [NAME...]",
		Short:       "Download, compile and check grammars (default: all berth knows: " + strings.Join(grammars.Names(), ", ") + ")",
		Annotations: map[string]string{grammarsAnnotation: grammarsOnDemand},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				args = grammars.Names()
			}
			for _, a := range args {
				if _, ok := grammars.Lookup(a); !ok {
					return fmt.Errorf("grammars install: no grammar named %q; berth installs: %s (add another by config: a descriptor in the grammar directory)", a, strings.Join(grammars.Names(), ", "))
				}
			}
			for _, a := range args {
				if _, err := grammars.Install(cmd.Context(), a, grammars.Options{Dir: dir, Force: force, Log: cmd.OutOrStdout()}); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "grammar directory (default: $"+syntax.GrammarDirEnv+" or ~/.cache/berth/grammars)")
	cmd.Flags().BoolVar(&force, "force", false, "rebuild grammars that are already installed")
	return cmd
}

func newGrammarsList() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:         "list [--dir DIR]",
		Short:       "Show the grammars installed, where, and those berth can install",
		Args:        cobra.NoArgs,
		Annotations: map[string]string{grammarsAnnotation: grammarsOnDemand},
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir == "" {
				dir = syntax.DefaultGrammarDir()
			}
			dirs := []string{dir}
			if b := syntax.BundledGrammarDir(); b != "" && b != dir {
				dirs = append(dirs, b)
			}
			return listGrammars(cmd.OutOrStdout(), dirs)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "grammar directory (default: $"+syntax.GrammarDirEnv+" or ~/.cache/berth/grammars)")
	return cmd
}

// listGrammars prints one line per grammar found in dirs, then one per
// installable grammar found in none.
func listGrammars(w io.Writer, dirs []string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GRAMMAR\tVERSION\tSTATUS\tLIBRARY")
	seen := map[string]bool{}
	for _, d := range dirs {
		list, err := grammars.List(d)
		if err != nil {
			return err
		}
		for _, it := range list {
			status := "installed"
			switch {
			case it.Err != nil:
				status = "broken: " + it.Err.Error()
			case seen[it.ID]:
				status = "shadowed (an earlier directory has it)"
			case it.Pinned != "" && it.Pinned != it.Version:
				status = fmt.Sprintf("installed (berth pins %s: berth grammars install --force %s)", it.Pinned, it.ID)
			case it.Pinned == "":
				status = "installed (added by config)"
			}
			seen[it.ID] = true
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", it.ID, orDash(it.Version), status, orDash(it.Library))
		}
	}
	for _, n := range grammars.Names() {
		if !seen[n] {
			s, _ := grammars.Lookup(n)
			fmt.Fprintf(tw, "%s\t%s\tnot installed (berth grammars install %s)\t-\n", n, s.Version, n)
		}
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
