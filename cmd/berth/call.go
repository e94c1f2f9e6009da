package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"berth.dev/berth/controller"
	"berth.dev/berth/tools"
)

// runFlags choose the run a one-shot command opens.
type runFlags struct {
	workspace    string
	sandbox      string
	conversation string
	surface      string
	json         bool
}

func (f *runFlags) add(cmd *cobra.Command, defaultSandbox string) {
	fl := cmd.Flags()
	fl.StringVar(&f.workspace, "workspace", "", "workspace directory inside the sandbox (default: the current directory on the host; required for a container)")
	fl.StringVar(&f.sandbox, "sandbox", defaultSandbox, "auto, host, docker://NAME-or-ID or containerd://NAMESPACE/ID")
	fl.StringVar(&f.conversation, "conversation", "", "conversation id: with --sandbox auto, the container labelled with it is used")
	fl.StringVar(&f.surface, "surface", "default", "surface: default, plan or readonly")
	fl.BoolVar(&f.json, "json", false, "print raw JSON")
}

// withRun opens a run in-process, hands it to fn and closes it, which
// kills everything the run started.
func withRun(ctx context.Context, g *globalFlags, f *runFlags, stderr io.Writer, fn func(*controller.Run, tools.Surface) error) (err error) {
	surface, err := tools.ParseSurface(f.surface)
	if err != nil {
		return err
	}
	b, err := newBackends(g)
	if err != nil {
		return err
	}
	defer b.Close()
	c, err := newController(g, b, nil, g.logger(stderr), "", "")
	if err != nil {
		return err
	}
	defer c.Close()
	run, err := c.Open(ctx, controller.RunSpec{
		ConversationID: f.conversation,
		Workspace:      f.workspace,
		Sandbox:        f.sandbox,
	})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := run.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	return fn(run, surface)
}

func newCall(g *globalFlags) *cobra.Command {
	f := &runFlags{}
	cmd := &cobra.Command{
		Use:   "call [flags] TOOL ['ARGS_JSON']",
		Short: "Open a run, call one tool, print its result and close the run",
		Long: `call opens a run, calls one tool with ARGS_JSON (default {}), prints the
result's text (or the raw result with --json) and closes the run, which kills
everything it started. It exits 1 when the result is an error or the call
fails.

By default the run is placed by --sandbox auto: the container labelled with
--conversation, or the host with the current directory as workspace.`,
		Example: `  berth call read '{"path":"README.md"}'
  berth call --sandbox docker://c1 --workspace /workspace read '{"path":"main.go"}'
  berth call --surface plan --json edit '{"path":"a.go","old_string":"x","new_string":"y"}'`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw := json.RawMessage("{}")
			if len(args) == 2 {
				raw = json.RawMessage(args[1])
			}
			if !json.Valid(raw) {
				return fmt.Errorf("berth: ARGS_JSON is not valid JSON: %s: quote it for the shell, e.g. '{\"path\":\"README.md\"}'", strings.TrimSpace(args[1]))
			}
			return withRun(cmd.Context(), g, f, cmd.ErrOrStderr(), func(run *controller.Run, s tools.Surface) error {
				res, err := run.Call(cmd.Context(), s, args[0], raw)
				if err != nil {
					return err
				}
				return printResult(cmd.OutOrStdout(), res, f.json)
			})
		},
	}
	f.add(cmd, controller.AutoSandbox)
	return cmd
}

// printResult prints res as text or JSON; an isError result becomes an
// exit code 1 with its text on stderr (text mode) or the JSON on stdout.
func printResult(w io.Writer, res *tools.Result, asJSON bool) error {
	if asJSON {
		if res.Content == nil {
			res.Content = []tools.Content{}
		}
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
		if res.IsError {
			return &exitError{code: 1}
		}
		return nil
	}
	var sb strings.Builder
	for _, c := range res.Content {
		switch c.Type {
		case "text":
			sb.WriteString(c.Text)
		default:
			fmt.Fprintf(&sb, "[%s %s, %d bytes]", c.Type, c.MimeType, len(c.Data))
		}
		if !strings.HasSuffix(sb.String(), "\n") {
			sb.WriteByte('\n')
		}
	}
	if res.IsError {
		return &exitError{code: 1, msg: strings.TrimSuffix(sb.String(), "\n")}
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

func newTools(g *globalFlags) *cobra.Command {
	f := &runFlags{}
	cmd := &cobra.Command{
		Use:   "tools [flags]",
		Short: "List the tools of a run: names, levels and descriptions (--json: with schemas), and the tools it lacks and why",
		Long: `tools opens a run as call does, lists its tools for the surface and closes
it. Some tools come only with some runs: debug needs a conversation id,
ask_user a question port (a run of berth serve), vibe_* vibe mode. Those
this run lacks are listed after its own, each with what it needs (JSON:
"not_in_this_run").`,
		Example: `  berth tools
  berth tools --conversation c1          # with debug
  berth tools --surface plan --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withRun(cmd.Context(), g, f, cmd.ErrOrStderr(), func(run *controller.Run, s tools.Surface) error {
				list := run.Tools(s)
				if list == nil {
					list = []tools.Info{}
				}
				missing := missingTools(list, s)
				w := cmd.OutOrStdout()
				if f.json {
					enc := json.NewEncoder(w)
					enc.SetEscapeHTML(false)
					enc.SetIndent("", "  ")
					return enc.Encode(map[string]any{"tools": list, "not_in_this_run": missing})
				}
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "TOOL\tLEVEL\tDESCRIPTION")
				for _, t := range list {
					desc, _, _ := strings.Cut(t.Description, "\n")
					fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Name, t.Level, desc)
				}
				if len(missing) > 0 {
					fmt.Fprintln(tw, "\nNOT IN THIS RUN\tLEVEL\tNEEDS")
					for _, m := range missing {
						fmt.Fprintf(tw, "%s\t%s\t%s\n", m.Name, m.Level, m.Needs)
					}
				}
				return tw.Flush()
			})
		},
	}
	f.add(cmd, controller.HostScheme)
	return cmd
}

// missing is a tool a run could have and this one lacks.
type missing struct {
	Name        string      `json:"name"`
	Level       tools.Level `json:"level"`
	Description string      `json:"description"`
	Needs       string      `json:"needs"`
}

// missingTools lists the conditional tools that are not in list and that
// surface s would see.
func missingTools(list []tools.Info, s tools.Surface) []missing {
	have := map[string]bool{}
	for _, t := range list {
		have[t.Name] = true
	}
	out := []missing{}
	for _, c := range controller.ConditionalTools() {
		if !have[c.Name] && c.Level <= s.MaxLevel() {
			out = append(out, missing{Name: c.Name, Level: c.Level, Description: c.Description, Needs: c.Needs})
		}
	}
	return out
}
