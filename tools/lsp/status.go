package lsp

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"berth.dev/berth/tools"
	"berth.dev/berth/tools/internal/proc"
	wspath "berth.dev/berth/tools/workspace"
)

// status lists every server of the table for the workspace (or for file's
// directory), and every running server.
func (s *Supervisor) status(ctx context.Context, in Input) (*tools.Result, error) {
	dir, file := ".", ""
	if in.File != "" && in.File != "*" {
		name, err := wspath.Name(s.root, in.File)
		if err != nil {
			return nil, err
		}
		dir = name
		if fi, err := s.ws.Stat(ctx, name); err == nil && !fi.IsDir() {
			dir, file = path.Dir(name), name
		}
	}
	choices, err := s.discover(ctx, dir, "", true)
	if err != nil {
		return nil, err
	}
	type row struct {
		Server   string `json:"server"`
		Root     string `json:"root,omitempty"`
		Marker   string `json:"marker,omitempty"`
		Fallback string `json:"fallback,omitempty"`
		Binary   string `json:"binary,omitempty"`
		Missing  string `json:"missing,omitempty"`
		State    string `json:"state"`
		Pid      int    `json:"pid,omitempty"`
		Uptime   string `json:"uptime,omitempty"`
		Restarts int    `json:"restarts"`
		LastErr  string `json:"last_error,omitempty"`
		Indexing string `json:"indexing,omitempty"`
		// CompDB is the compilation database of a server that reads one
		// (Server.CompileCommandsDir): the one it started with, else the
		// one it would start with.
		CompDB string `json:"compilation_database,omitempty"`
		Stdlib string `json:"stdlib,omitempty"`
	}
	var rows []row
	covered := map[key]bool{}
	insts := map[key]*instance{}
	for _, in := range s.instances() {
		insts[in.key] = in
	}
	fill := func(r *row, in *instance) {
		st := in.state()
		r.Restarts, r.LastErr = st.restarts, st.lastErr
		switch {
		case st.gaveUp:
			r.State = fmt.Sprintf("given up after %d crashes in %v; reload to try again", MaxCrashes, CrashWindow)
		case !st.started:
			r.State = "not running"
		case st.stopped != "":
			r.State = "stopped: " + st.stopped
		case !st.ready:
			r.State = "starting"
			r.Pid = st.pid
		case st.startErr != nil:
			r.State = "failed to start"
			r.LastErr = st.startErr.Error()
		case !st.alive:
			r.State = "exited; restarted on the next call"
		default:
			r.State = "running"
			r.Pid = st.pid
			r.Uptime = time.Since(st.up).Round(time.Second).String()
			r.Binary = st.binary
			var ps []string
			for _, p := range st.progress {
				x := p.Title
				if p.Message != "" && x != "" {
					x += ": " + p.Message
				} else if p.Message != "" {
					x = p.Message
				}
				if p.Percentage != nil {
					x += fmt.Sprintf(" (%d%%)", *p.Percentage)
				}
				ps = append(ps, x)
			}
			r.Indexing = strings.Join(ps, "; ")
			r.Stdlib = st.typeshed.String()
		}
	}
	for _, c := range choices {
		r := row{Server: c.Server.ID, Root: c.Root, Marker: c.Marker, Binary: c.Binary, Missing: c.Missing, State: "not running"}
		if c.Fallback {
			r.Fallback = fmt.Sprintf("no marker found; %s works without one", c.Server.ID)
		}
		if c.Root != "" {
			if in := insts[c.key()]; in != nil {
				covered[c.key()] = true
				fill(&r, in)
			}
		}
		if c.Missing != "" && r.State == "not running" {
			r.State = "unavailable"
		}
		if c.Server.CompileCommandsDir != "" && c.Root != "" && c.Binary != "" {
			if d, ok := s.compDBFor(ctx, c.Root, insts[c.key()]); ok {
				r.CompDB = d.describe(c.Server.CompileCommandsDir)
			}
		}
		rows = append(rows, r)
	}
	for k, in := range insts {
		if !covered[k] {
			r := row{Server: k.id, Root: k.root, Marker: "", State: "not running"}
			fill(&r, in)
			rows = append(rows, r)
		}
	}
	var b strings.Builder
	var answering string
	if file != "" {
		// The file's own servers first, the one that answers it leading.
		ext := path.Ext(file)
		for _, c := range choices {
			if _, ok := c.Server.Languages[ext]; ok && c.Usable() {
				answering = c.Server.ID
				break
			}
		}
		rank := func(r row) int {
			switch {
			case r.Server == answering:
				return 0
			case slices.ContainsFunc(choices, func(c Choice) bool { _, ok := c.Server.Languages[ext]; return ok && c.Server.ID == r.Server }):
				return 1
			}
			return 2
		}
		slices.SortStableFunc(rows, func(a, b row) int { return rank(a) - rank(b) })
		if answering != "" {
			fmt.Fprintf(&b, "%s is answered by %s\n", file, answering)
		} else {
			fmt.Fprintf(&b, "no server answers %s: see its servers below\n", file)
		}
	}
	where := "the workspace root"
	if dir != "." {
		where = dir + "/"
	}
	fmt.Fprintf(&b, "language servers for %s:\n", where)
	var absent []string
	for _, r := range rows {
		if r.State == "unavailable" && r.Marker == "" && r.Binary == "" {
			absent = append(absent, r.Server)
			continue
		}
		fmt.Fprintf(&b, "%s: %s", r.Server, r.State)
		if r.Root != "" {
			fmt.Fprintf(&b, "; root %s", showRoot(r.Root))
			switch {
			case r.Marker != "":
				fmt.Fprintf(&b, " (%s)", r.Marker)
			case r.Fallback != "":
				fmt.Fprintf(&b, " (%s)", r.Fallback)
			}
		}
		if r.Binary != "" {
			fmt.Fprintf(&b, "; binary %s", r.Binary)
		}
		if r.Pid != 0 {
			fmt.Fprintf(&b, "; pid %d", r.Pid)
		}
		if r.Uptime != "" {
			fmt.Fprintf(&b, "; up %s", r.Uptime)
		}
		if r.Restarts > 0 {
			fmt.Fprintf(&b, "; restarts %d", r.Restarts)
		}
		if r.Indexing != "" {
			fmt.Fprintf(&b, "; indexing: %s", r.Indexing)
		}
		if r.CompDB != "" {
			fmt.Fprintf(&b, "; compilation database: %s", r.CompDB)
		}
		if r.Stdlib != "" {
			fmt.Fprintf(&b, "; %s", r.Stdlib)
		}
		if r.Missing != "" {
			fmt.Fprintf(&b, "; %s", r.Missing)
		}
		if r.LastErr != "" {
			fmt.Fprintf(&b, "; last error: %s", proc.Clip(r.LastErr, 400))
		}
		b.WriteString("\n")
	}
	if len(absent) > 0 {
		fmt.Fprintf(&b, "neither marker nor binary here: %s\n", strings.Join(absent, ", "))
	}
	res := tools.Text(strings.TrimRight(b.String(), "\n"))
	sc := map[string]any{"servers": rows}
	if answering != "" {
		sc["answering"] = answering
	}
	res.StructuredContent = sc
	return res, nil
}

// reload restarts the server of file's root, or every running one.
func (s *Supervisor) reload(ctx context.Context, in Input) (*tools.Result, error) {
	var targets []*instance
	if in.File != "" {
		name, err := wspath.Name(s.root, in.File)
		if err != nil {
			return nil, err
		}
		inst, err := s.serverFor(ctx, name, 0)
		if err != nil && !errors.Is(err, errStarting) {
			return nil, err
		}
		targets = append(targets, inst)
	} else {
		targets = s.instances()
		if len(targets) == 0 {
			return nil, tools.Fail("no language server has been started in this run; pass file to reload (and start) the server of that file's project")
		}
	}
	var b strings.Builder
	for _, t := range targets {
		oldPid := t.state().pid
		if err := t.reload(ctx); err != nil {
			return nil, err
		}
		if err := t.waitReady(ctx, s.opts.QueryWait); err != nil {
			fmt.Fprintf(&b, "%s: restarting, not ready yet: %v\n", t.key, err)
			continue
		}
		fmt.Fprintf(&b, "%s: restarted (pid %d, was %d)\n", t.key, t.state().pid, oldPid)
	}
	return tools.Text(strings.TrimRight(b.String(), "\n")), nil
}
