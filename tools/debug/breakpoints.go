package debug

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"berth.dev/berth/dap"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/workspace"
)

// BreakpointInfo is one breakpoint's state as reported.
type BreakpointInfo struct {
	Line         int    `json:"line"`
	Condition    string `json:"condition,omitempty"`
	HitCondition string `json:"hit_condition,omitempty"`
	LogMessage   string `json:"log_message,omitempty"`
	Verified     bool   `json:"verified"`
	Pending      bool   `json:"pending,omitempty"`
	ActualLine   int    `json:"actual_line,omitempty"`
	Message      string `json:"message,omitempty"`
}

func parseLines(lines []any) ([]dap.Breakpoint, error) {
	var out []dap.Breakpoint
	for i, l := range lines {
		var bp dap.Breakpoint
		switch v := l.(type) {
		case float64:
			if v != float64(int(v)) {
				return nil, tools.Fail("lines[%d] = %v is not a whole line number", i, v)
			}
			bp.Line = int(v)
		case map[string]any:
			for k, x := range v {
				switch k {
				case "line":
					f, ok := x.(float64)
					if !ok || f != float64(int(f)) {
						return nil, tools.Fail("lines[%d].line must be a whole number", i)
					}
					bp.Line = int(f)
				case "condition", "hit_condition", "log_message", "hitCondition", "logMessage":
					str, ok := x.(string)
					if !ok {
						return nil, tools.Fail("lines[%d].%s must be a string", i, k)
					}
					switch k {
					case "condition":
						bp.Condition = str
					case "hit_condition", "hitCondition":
						bp.HitCondition = str
					default:
						bp.LogMessage = str
					}
				default:
					return nil, tools.Fail("lines[%d] has an unknown field %q: use line, condition, hit_condition, log_message", i, k)
				}
			}
		default:
			return nil, tools.Fail("lines[%d] = %v: give a line number or an object like {\"line\": 12, \"condition\": \"i > 3\"}", i, l)
		}
		if bp.Line <= 0 {
			return nil, tools.Fail("lines[%d]: line numbers start at 1", i)
		}
		out = append(out, bp)
	}
	return out, nil
}

// breakpoints sets in.File's breakpoints, in cur and for later sessions,
// or lists them all without a file.
func (s *Supervisor) breakpoints(ctx context.Context, in Input, cur *session) (reply, error) {
	if in.File == "" {
		if len(in.Lines) > 0 {
			return reply{}, tools.Fail("breakpoints needs file: the source file the lines belong to")
		}
		return s.listBreakpoints(cur), nil
	}
	name, err := s.resolve(in.File, "file")
	if err != nil {
		return reply{}, err
	}
	bps, err := parseLines(in.Lines)
	if err != nil {
		return reply{}, err
	}
	if fi, err := s.ws.Stat(ctx, name); err != nil {
		return reply{}, workspace.Explain(s.root, name, err)
	} else if fi.IsDir() {
		return reply{}, tools.Fail("%s is a directory: breakpoints go into a source file", name)
	}
	abs := s.abs(name)
	s.mu.Lock()
	if len(bps) == 0 {
		delete(s.bps, abs)
	} else {
		s.bps[abs] = bps
	}
	s.mu.Unlock()
	var results []dap.BreakpointResult
	if cur != nil {
		results, err = cur.ds.SetBreakpoints(ctx, abs, bps)
		if err != nil && results == nil {
			return reply{}, tools.Fail("setting breakpoints in %s failed: %v", name, err)
		}
	} else {
		for _, b := range bps {
			results = append(results, dap.BreakpointResult{Line: b.Line, Message: dap.PendingMessage})
		}
	}
	infos := breakpointInfos(bps, results)
	if len(bps) == 0 {
		return reply{text: "cleared the breakpoints of " + name, data: map[string]any{"file": name, "breakpoints": []BreakpointInfo{}}}, nil
	}
	text := name + ":\n" + formatBreakpoints(infos)
	if cur == nil {
		text += "\n(no session yet: they are applied when you launch)"
	}
	return reply{text: text, data: map[string]any{"file": name, "breakpoints": infos}}, nil
}

func breakpointInfos(bps []dap.Breakpoint, results []dap.BreakpointResult) []BreakpointInfo {
	infos := make([]BreakpointInfo, len(bps))
	for i, b := range bps {
		infos[i] = BreakpointInfo{Line: b.Line, Condition: b.Condition, HitCondition: b.HitCondition, LogMessage: b.LogMessage}
		if i < len(results) {
			r := results[i]
			infos[i].Verified, infos[i].Message = r.Verified, r.Message
			infos[i].Pending = r.Message == dap.PendingMessage
			if r.ActualLine != 0 && r.ActualLine != b.Line {
				infos[i].ActualLine = r.ActualLine
			}
		}
	}
	return infos
}

func formatBreakpoints(infos []BreakpointInfo) string {
	var b strings.Builder
	for _, bp := range infos {
		fmt.Fprintf(&b, "  line %d", bp.Line)
		if bp.Condition != "" {
			fmt.Fprintf(&b, " if %s", bp.Condition)
		}
		if bp.HitCondition != "" {
			fmt.Fprintf(&b, " hit %s", bp.HitCondition)
		}
		if bp.LogMessage != "" {
			fmt.Fprintf(&b, " log %q", bp.LogMessage)
		}
		switch {
		case bp.Pending:
			b.WriteString(": pending (sent when the program is launched)")
		case bp.Verified:
			b.WriteString(": verified")
			if bp.ActualLine != 0 {
				fmt.Fprintf(&b, " (moved to line %d)", bp.ActualLine)
			}
			if bp.Message != "" {
				b.WriteString(" — " + bp.Message)
			}
		default:
			b.WriteString(": unverified")
			if bp.Message != "" {
				b.WriteString(" — " + bp.Message)
			}
		}
		b.WriteByte('\n')
	}
	return strings.TrimRight(b.String(), "\n")
}

// listBreakpoints lists every file's breakpoints, as cur verified them.
func (s *Supervisor) listBreakpoints(cur *session) reply {
	s.mu.Lock()
	want := make(map[string][]dap.Breakpoint, len(s.bps))
	for k, v := range s.bps {
		want[k] = v
	}
	s.mu.Unlock()
	var results map[string][]dap.BreakpointResult
	if cur != nil {
		results = cur.ds.Breakpoints()
	}
	files := make([]string, 0, len(want))
	for f := range want {
		files = append(files, f)
	}
	slices.Sort(files)
	data := map[string][]BreakpointInfo{}
	var b strings.Builder
	for _, f := range files {
		res := results[f]
		if cur == nil {
			for _, bp := range want[f] {
				res = append(res, dap.BreakpointResult{Line: bp.Line, Message: dap.PendingMessage})
			}
		}
		infos := breakpointInfos(want[f], res)
		data[s.show(f)] = infos
		fmt.Fprintf(&b, "%s:\n%s\n", s.show(f), formatBreakpoints(infos))
	}
	if len(files) == 0 {
		return reply{text: "no breakpoints set", data: map[string]any{"breakpoints": data}}
	}
	return reply{text: strings.TrimSpace(b.String()), data: map[string]any{"breakpoints": data}}
}
