package lsp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	lspc "berth.dev/berth/lsp"
	"berth.dev/berth/tools"
)

// MaxWriteDiagnostics is how many new diagnostics a write result lists;
// the rest are counted.
const MaxWriteDiagnostics = 20

// diagKey identifies a diagnostic for the journal (LSP-4): its position is
// deliberately left out, so a diagnostic that merely moved is not new.
type diagKey struct {
	severity lspc.DiagnosticSeverity
	code     string
	message  string
}

// journal is what a server's diagnostics were when last looked at: a count
// per key over all files, and per file. A key whose count grew is new.
type journal struct {
	known map[diagKey]int
	files map[string]map[diagKey]int // URI → key → count
}

// reported reports whether a diagnostic counts for diagnostics on write:
// errors and warnings (and unranked ones); info and hints are left to the
// lsp tool's diagnostics action.
func reported(d lspc.Diagnostic) bool {
	return d.Severity == 0 || d.Severity <= lspc.SeverityWarning
}

func keyOf(d lspc.Diagnostic) diagKey {
	return diagKey{d.Severity, d.CodeString(), strings.TrimSpace(d.Message)}
}

// snapshot counts the reported diagnostics of sets, leaving out the URIs in
// skip.
func snapshot(sets []lspc.DiagnosticSet, skip map[string]bool) *journal {
	j := &journal{known: map[diagKey]int{}, files: map[string]map[diagKey]int{}}
	for _, set := range sets {
		if skip[set.URI] {
			continue
		}
		for _, d := range set.Diagnostics {
			if !reported(d) {
				continue
			}
			k := keyOf(d)
			j.known[k]++
			if j.files[set.URI] == nil {
				j.files[set.URI] = map[diagKey]int{}
			}
			j.files[set.URI][k]++
		}
	}
	return j
}

// located is a diagnostic with its document.
type located struct {
	uri string
	d   lspc.Diagnostic
}

// fresh returns the diagnostics of now that the journal prev does not know:
// for each key whose count grew, that many instances, taken first from the
// files whose count of the key grew, touched files first.
func fresh(prev, now *journal, sets []lspc.DiagnosticSet, touched map[string]bool) []located {
	var out []located
	byKey := map[diagKey][]located{}
	for _, set := range sets {
		for _, d := range set.Diagnostics {
			if reported(d) {
				k := keyOf(d)
				byKey[k] = append(byKey[k], located{set.URI, d})
			}
		}
	}
	for k, n := range now.known {
		need := n - prev.known[k]
		if need <= 0 {
			continue
		}
		cands := byKey[k]
		rank := func(l located) int {
			r := 0
			if now.files[l.uri][k] <= prev.files[l.uri][k] {
				r += 2 // this file did not gain one
			}
			if !touched[l.uri] {
				r++
			}
			return r
		}
		slices.SortStableFunc(cands, func(a, b located) int { return rank(a) - rank(b) })
		out = append(out, cands[:min(need, len(cands))]...)
	}
	slices.SortFunc(out, func(a, b located) int {
		if c := strings.Compare(a.uri, b.uri); c != 0 {
			return c
		}
		if a.d.Range.Start.Line != b.d.Range.Start.Line {
			return int(a.d.Range.Start.Line) - int(b.d.Range.Start.Line)
		}
		return int(a.d.Range.Start.Character) - int(b.d.Range.Start.Character)
	})
	return out
}

// fixed counts the diagnostics of the journal prev that now has fewer of:
// for each key, by how much its count fell. A diagnostic that moved keeps
// its count and is not fixed.
func fixed(prev, now *journal) int {
	n := 0
	for k, c := range prev.known {
		n += max(c-now.known[k], 0)
	}
	return n
}

// settle waits, after a change, until the server has published diagnostics
// for every (uri, version) in want and then stayed quiet for the settle
// period (bounded by maxSettle). It returns the URIs whose diagnostics did
// not come in time.
func (s *Supervisor) settle(ctx context.Context, in *instance, c *lspc.Client, want map[string]int32) []string {
	var late []string
	wait := s.opts.DiagnosticsWait
	if in.spec.SilentWhenUnchanged {
		wait = min(wait, unchangedWait)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	uris := make([]string, 0, len(want))
	for u := range want {
		uris = append(uris, u)
	}
	slices.Sort(uris)
	for _, u := range uris {
		if _, err := c.WaitDiagnostics(wctx, u, want[u]); err != nil && !in.spec.SilentWhenUnchanged {
			late = append(late, u)
		}
	}
	s.quiet(ctx, in, c)
	return late
}

// unchangedWait bounds the wait for a changed file's diagnostics from a
// server that publishes none when they did not change
// (Server.SilentWhenUnchanged): past it, they are taken as unchanged.
const unchangedWait = 3 * time.Second

// quiet waits until no diagnostics were published for the settle period
// (the supervisor's, or the server's own when longer), at most maxSettle.
func (s *Supervisor) quiet(ctx context.Context, in *instance, c *lspc.Client) {
	end := time.Now().Add(maxSettle)
	period := max(s.opts.Settle, in.spec.Settle)
	for time.Now().Before(end) {
		seq := c.DiagnosticsSeq()
		qctx, cancel := context.WithTimeout(ctx, min(period, time.Until(end)))
		_, err := c.WaitPublish(qctx, seq, func(lspc.DiagnosticSet) bool { return true })
		cancel()
		if err != nil {
			return
		}
	}
}

// baseline records what a just-started server reports before anything is
// asked of it, once its indexing is done, so that only what later writes
// introduce is reported. Files written while it started are left out: what
// the write did to them is reported by the next write.
func (s *Supervisor) baseline(ctx context.Context, in *instance, c *lspc.Client) {
	ictx, cancel := context.WithTimeout(ctx, s.opts.QueryWait)
	c.WaitIdle(ictx)
	cancel()
	s.quiet(ctx, in, c)
	skip := map[string]bool{}
	for _, name := range in.takePending() {
		skip[s.uriOf(name)] = true
	}
	j := snapshot(s.present(ctx, c.AllDiagnostics()), skip)
	s.mu.Lock()
	if s.kept[in.key] {
		// The journal of before berth restarted stays the reference.
		delete(s.kept, in.key)
	} else {
		s.journal[in.key] = j
		s.gen++
	}
	s.mu.Unlock()
}

// writeReport is what diagnostics on write add to a write tool's result.
type writeReport struct {
	text       []string
	structured []Diag
	fixed      int // reported diagnostics that the write made go away
	more       int // new diagnostics past those listed
}

// afterWrite syncs the touched workspace files into their servers (one
// batch per server), waits for the diagnostics of the new text, and
// returns the new ones (LSP-3, LSP-4).
func (s *Supervisor) afterWrite(ctx context.Context, touched []string) writeReport {
	var rep writeReport
	groups := map[*instance][]string{}
	var order []*instance
	for _, name := range touched {
		in, err := s.serverFor(ctx, name, s.opts.StartWait)
		var none *noServerError
		switch {
		case errors.As(err, &none):
			// No server applies: silence would read as "no problems", so
			// say why, once per run for each reason.
			if s.firstTime(none.why) {
				rep.text = append(rep.text, fmt.Sprintf("diagnostics: none available (%s)", none.why))
			}
			continue
		case errors.Is(err, errStarting):
			in.notePending(name)
			if !slices.Contains(order, in) {
				order = append(order, in)
				groups[in] = nil
			}
			continue
		case err != nil:
			if ctx.Err() != nil {
				return rep
			}
			rep.text = append(rep.text, fmt.Sprintf("diagnostics: unavailable for %s: %v", name, err))
			continue
		}
		if _, ok := groups[in]; !ok {
			order = append(order, in)
		}
		groups[in] = append(groups[in], name)
	}
	for _, in := range order {
		names := groups[in]
		if len(names) == 0 {
			rep.text = append(rep.text, fmt.Sprintf("diagnostics: %s is still starting; the next write reports what this one introduced", in.key))
			continue
		}
		r, err := s.diagnoseWrite(ctx, in, names)
		if errors.Is(err, errDied) && ctx.Err() == nil {
			// The server died: one retry with a restarted one.
			if in2, err2 := s.serverFor(ctx, names[0], s.opts.StartWait); err2 == nil {
				r, err = s.diagnoseWrite(ctx, in2, names)
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return rep
			}
			rep.text = append(rep.text, fmt.Sprintf("diagnostics: %s: %v", in.key, err))
			continue
		}
		rep.text = append(rep.text, r.text...)
		rep.structured = append(rep.structured, r.structured...)
		rep.fixed += r.fixed
		rep.more += r.more
	}
	return rep
}

// firstTime reports whether diagnostics on write has not yet said why
// (this run), and remembers that it now does.
func (s *Supervisor) firstTime(why string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.told[why] {
		return false
	}
	s.told[why] = true
	return true
}

// diagnoseWrite is afterWrite for one server.
func (s *Supervisor) diagnoseWrite(ctx context.Context, in *instance, names []string) (writeReport, error) {
	release := in.acquire()
	defer release()
	c, g, err := in.client()
	if err != nil {
		return writeReport{}, err
	}
	rep, err := s.syncWrite(ctx, in, c, g, names)
	if err != nil {
		select {
		case <-c.Done():
			return writeReport{}, fmt.Errorf("%w: %w", errDied, err)
		default:
		}
	}
	return rep, err
}

func (s *Supervisor) syncWrite(ctx context.Context, in *instance, c *lspc.Client, g *generation, names []string) (writeReport, error) {
	if err := in.refresh(ctx, c, g); err != nil {
		return writeReport{}, err
	}
	want := map[string]int32{}
	touched := map[string]bool{}
	for _, name := range names {
		uri := s.uriOf(name)
		touched[uri] = true
		_, v, err := in.open(ctx, c, name)
		if isNotExist(err) {
			continue // deleted: refresh closed it and reported the deletion
		}
		if err != nil {
			return writeReport{}, err
		}
		if err := c.DidSave(ctx, uri); err != nil {
			return writeReport{}, err
		}
		want[uri] = v
	}
	late := s.settle(ctx, in, c, want)
	if ctx.Err() != nil {
		return writeReport{}, ctx.Err()
	}
	sets := s.present(ctx, c.AllDiagnostics())
	now := snapshot(sets, nil)
	s.mu.Lock()
	prev := s.journal[in.key]
	if prev == nil {
		prev = &journal{known: map[diagKey]int{}, files: map[string]map[diagKey]int{}}
	}
	s.journal[in.key] = now
	delete(s.kept, in.key)
	s.gen++
	s.mu.Unlock()
	news := fresh(prev, now, sets, touched)
	rep := writeReport{fixed: fixed(prev, now)}
	lines, structured := s.render(ctx, news, MaxWriteDiagnostics, c.PositionEncoding())
	rep.structured, rep.more = structured, len(news)-len(structured)
	switch {
	case len(news) == 0 && rep.fixed > 0:
		rep.text = append(rep.text, fmt.Sprintf("diagnostics (%s): no new problems; fixed %s", in.spec.ID, plural(rep.fixed, "problem")))
	case len(news) == 0:
		rep.text = append(rep.text, fmt.Sprintf("diagnostics (%s): no new problems", in.spec.ID))
	case rep.fixed > 0:
		rep.text = append(rep.text, fmt.Sprintf("diagnostics (%s): %s introduced (%d fixed):\n%s", in.spec.ID, plural(len(news), "new problem"), rep.fixed, lines))
	default:
		rep.text = append(rep.text, fmt.Sprintf("diagnostics (%s): %s introduced:\n%s", in.spec.ID, plural(len(news), "new problem"), lines))
	}
	for _, u := range late {
		name, _ := s.nameOfURI(u)
		rep.text = append(rep.text, fmt.Sprintf("diagnostics: %s sent none for %s within %v; they may be incomplete — call lsp diagnostics on it later", in.spec.ID, name, s.opts.DiagnosticsWait))
	}
	return rep, nil
}

// Middleware returns the tools middleware of diagnostics on write: after
// a successful call of a write tool whose result names the files it
// touched, their diagnostics are synced and the new ones appended.
func (s *Supervisor) Middleware() tools.Middleware {
	return func(t tools.Tool, next tools.Handler) tools.Handler {
		if !writeTools[t.Name] {
			return next
		}
		return func(ctx context.Context, args json.RawMessage) (*tools.Result, error) {
			res, err := next(ctx, args)
			if err != nil || res == nil || res.IsError || len(res.Touched) == 0 {
				return res, err
			}
			rep := s.afterWrite(ctx, res.Touched)
			if len(rep.text) == 0 {
				return res, nil
			}
			res.AppendText(strings.Join(rep.text, "\n"))
			sc, ok := res.StructuredContent.(map[string]any)
			if res.StructuredContent == nil {
				sc, ok = map[string]any{}, true
				res.StructuredContent = sc
			}
			if ok {
				sc["diagnostics"] = nonNil(rep.structured)
				if rep.fixed > 0 {
					sc["diagnostics_fixed"] = rep.fixed
				}
				if rep.more > 0 {
					sc["diagnostics_more"] = rep.more
				}
			}
			return res, nil
		}
	}
}

// writeTools are the tools diagnostics on write wraps.
var writeTools = map[string]bool{"write": true, "edit": true, "apply_patch": true, "lsp_rename": true, "resolve": true}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// present drops the diagnostics of workspace files that no longer exist: a
// server may keep what it last published for a file deleted behind its
// back.
func (s *Supervisor) present(ctx context.Context, sets []lspc.DiagnosticSet) []lspc.DiagnosticSet {
	out := sets[:0:0]
	for _, set := range sets {
		if len(set.Diagnostics) > 0 {
			if name, ok := s.nameOfURI(set.URI); ok {
				if _, err := s.ws.Stat(ctx, name); isNotExist(err) {
					continue
				}
			}
		}
		out = append(out, set)
	}
	return out
}
