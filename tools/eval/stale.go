package eval

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"berth.dev/berth/kernel"
	"berth.dev/berth/tools"
)

// staleTimeout bounds the pre-cell query of the kernel's workspace modules
// (one user expression, no output). A reload runs the modules' code, so it
// gets the cell's own inactivity budget instead.
const staleTimeout = 30 * time.Second

// maxStaleListed caps how many changed modules a note names one by one;
// maxStaleStructured how many structuredContent.stale_modules lists.
const (
	maxStaleListed     = 10
	maxStaleStructured = 200
)

// staleReport is what the prelude's __berth_stale returns: the workspace
// modules whose file changed on disk after the kernel loaded it (Python's
// sys.modules, Node's require.cache), and with reload what was reloaded.
type staleReport struct {
	Changed []struct {
		Name string `json:"name"`
		File string `json:"file"`
		Gone bool   `json:"gone"`
		Call string `json:"call"`
	} `json:"changed"`
	Reloaded []string `json:"reloaded"`
	Failed   []struct {
		Name  string `json:"name"`
		Error string `json:"error"`
	} `json:"failed"`
	// StaleNames are functions and classes a namespace took from a
	// reloaded module (from m import f) that still are the old objects.
	StaleNames []struct {
		In     string   `json:"in"`
		Module string   `json:"module"`
		Names  []string `json:"names"`
	} `json:"stale_names"`
	// reload says the check was asked to reload (not from the kernel).
	reload bool
}

// staleCheck asks the kernel which of its loaded workspace modules changed
// on disk since import — after a cell, or before one with reload, when it
// reloads them. It
// returns the notes for the result and the report (nil when the kernel
// could not say: a kernel whose prelude predates the check, or one that
// died, which the cell's run then reports).
func (s *Supervisor) staleCheck(ctx context.Context, k *kern, reload bool) ([]string, *staleReport) {
	root, _ := json.Marshal(s.root)
	flag := map[string]string{JavaScript: "false", Python: "False"}[k.lang]
	if reload {
		flag = map[string]string{JavaScript: "true", Python: "True"}[k.lang]
	}
	expr := fmt.Sprintf("__berth_stale(%s, %s)", root, flag)
	timeout := staleTimeout
	if reload {
		timeout = s.opts.Budget
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var printed strings.Builder
	rep, err := k.client.Execute(cctx, "", kernel.ExecuteOptions{Silent: true, NoHistory: true,
		UserExpressions: map[string]string{"stale": expr},
		OnEvent: func(e kernel.Event) {
			if e.Type == kernel.EventStream && printed.Len() < MaxOutputChars/4 {
				printed.WriteString(ansi.ReplaceAllString(e.Text, ""))
			}
		}})
	// A check that cannot answer says nothing (the kernel died, which the
	// cell's run reports, or its prelude predates the check); a reload
	// that did not finish is said.
	unfinished := func(why string) ([]string, *staleReport) {
		if !reload || ctx.Err() != nil {
			return nil, nil
		}
		return []string{"reloading the changed workspace modules did not finish (" + why + "): modules may hold a mix of old and new code; run importlib.reload (Python) or require again (JavaScript) yourself and read its error"}, nil
	}
	if err != nil {
		return unfinished(err.Error())
	}
	var ue struct {
		Status string            `json:"status"`
		Data   map[string]string `json:"data"`
		kernel.ExecError
	}
	if rep.Status != "ok" {
		return unfinished(renderError(rep.Error))
	}
	if err := json.Unmarshal(rep.UserExpressions["stale"], &ue); err != nil || ue.Status != "ok" {
		return unfinished(ue.Name + ": " + ue.Value)
	}
	var r staleReport
	if json.Unmarshal([]byte(ue.Data["text/plain"]), &r) != nil {
		return nil, nil
	}
	r.reload = reload
	notes := r.notes(k.lang)
	if t := strings.TrimSpace(printed.String()); t != "" {
		notes = append(notes, "the reload printed: "+t)
	}
	return notes, &r
}

// notes words a report for the result.
func (r *staleReport) notes(lang string) []string {
	if len(r.Changed) == 0 {
		return nil
	}
	var notes []string
	if !r.reload {
		var each []string
		for i, c := range r.Changed {
			if i == maxStaleListed {
				each = append(each, fmt.Sprintf("and %d more", len(r.Changed)-i))
				break
			}
			if c.Gone {
				each = append(each, fmt.Sprintf("%s (%s, since deleted: nothing to reload)", c.Name, c.File))
				continue
			}
			each = append(each, fmt.Sprintf("%s (%s): %s", c.Name, c.File, c.Call))
		}
		after := "names taken with from … import keep the old objects: import them again after the reload"
		if lang == JavaScript {
			after = "a binding made by an earlier require keeps the old exports: assign it again from the new require"
		}
		what := "this workspace module changed on disk after the " + lang + " kernel loaded it"
		if len(r.Changed) > 1 {
			what = fmt.Sprintf("%d workspace modules changed on disk after the %s kernel loaded them", len(r.Changed), lang)
		}
		notes = append(notes, fmt.Sprintf("%s, and the kernel still runs the code as loaded, as this cell did: %s. The call shown loads the new code (%s); or pass \"reload\": true to reload changed modules before a cell runs", what, strings.Join(each, "; "), after))
		return notes
	}
	if len(r.Reloaded) > 0 {
		notes = append(notes, fmt.Sprintf("reloaded %s before the cell ran (changed on disk since the kernel loaded %s)", strings.Join(r.Reloaded, ", "), pronoun(len(r.Reloaded))))
	}
	for _, f := range r.Failed {
		notes = append(notes, fmt.Sprintf("reloading %s failed (%s): it may hold a mix of old and new code, and is said again until a reload succeeds; fix the file and reload again", f.Name, f.Error))
	}
	for _, c := range r.Changed {
		if c.Gone {
			notes = append(notes, fmt.Sprintf("%s (%s) was deleted after the kernel loaded it: not reloaded, the kernel keeps the old code", c.Name, c.File))
		}
	}
	for _, h := range r.StaleNames {
		notes = append(notes, fmt.Sprintf("%s still holds the old %s of %s (taken with from … import): import %s again to use the new code", h.In, strings.Join(h.Names, ", "), h.Module, pronoun(len(h.Names))))
	}
	return notes
}

func pronoun(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}

// annotate adds the report to the result's structured content:
// stale_modules (name, file, reload call) and reloaded.
func (r *staleReport) annotate(res *tools.Result) {
	if r == nil || len(r.Changed) == 0 {
		return
	}
	sc, _ := res.StructuredContent.(map[string]any)
	if sc == nil {
		sc = map[string]any{}
	}
	if !r.reload {
		sc["stale_modules"] = r.Changed[:min(len(r.Changed), maxStaleStructured)]
		if len(r.Changed) > maxStaleStructured {
			sc["stale_modules_left_out"] = len(r.Changed) - maxStaleStructured
		}
	} else {
		sc["reloaded"] = r.Reloaded
	}
	res.StructuredContent = sc
}
