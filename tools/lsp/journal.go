package lsp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
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

// journal is what a server's diagnostics were when last accounted for: a
// count per key over all files, and per file. A key whose count grew is
// new.
//
// It also says to which write each later publication belongs (LSP-4). A
// file's first publication after the server started is its baseline (a
// server that checks the whole workspace, pyright or tsserver, publishes
// most files well after it started), unless a write touched that file. A
// publication that carries the document version a write sent is that
// write's; one without a version (a file the server was not told about,
// re-checked because an edited file changed) belongs to the last write
// sent before it arrived.
type journal struct {
	known map[diagKey]int
	files map[string]map[diagKey]int // URI → key → count
	// seen are the URIs whose diagnostics the journal accounts for, clean
	// ones included; written are those a write touched since the server
	// started (their first publication is not a baseline).
	seen    map[string]bool
	written map[string]bool
	// client is the connection whose publications are accounted for, up to
	// and including seq.
	client *lspc.Client
	seq    uint64
	edits  []editMark // the latest writes, oldest first, at most MaxJournalEdits
	// versions are the document versions of the publications accounted
	// for, by URI: a server publishes a version again when a change
	// elsewhere re-checks it (gopls), and that is not the write that sent
	// the version.
	versions map[string]int32
}

// MaxJournalEdits is how many writes a journal remembers for crediting
// late diagnostics: a publication that carries the version of an older
// write than these is credited to the last write before it arrived.
const MaxJournalEdits = 64

// editMark is one write as a journal remembers it.
type editMark struct {
	n        int              // the run's edit number, as the write's result says it
	seq      uint64           // the last publication before its changes were sent
	versions map[string]int32 // URI → document version sent
}

func newJournal() *journal {
	return &journal{known: map[diagKey]int{}, files: map[string]map[diagKey]int{}, seen: map[string]bool{}, written: map[string]bool{}, versions: map[string]int32{}}
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
	j := newJournal()
	for uri := range skip {
		j.written[uri] = true
	}
	for _, set := range sets {
		j.seq = max(j.seq, set.Seq)
		if !skip[set.URI] {
			j.apply(set)
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
// files whose count of the key grew, touched files first. They come in the
// touched files first, then by file and line, so that a cap keeps the
// written files' problems.
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
		if touched[a.uri] != touched[b.uri] {
			if touched[a.uri] {
				return -1
			}
			return 1
		}
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

// credit is what a journal's accounting credits to one write: what the
// publications that belong to it changed.
type credit struct {
	edit  int
	news  []located
	fixed int
	// first are files the write touched with new problems whose
	// diagnostics are published for the first time since the server
	// started: what was there before the write is unknown, so their
	// problems may predate it.
	first []string
}

// creditOf returns the number of the write a publication belongs to: the
// write that sent the document version it carries, when it is the first
// publication of that version, else the last write sent before it
// arrived; 0 for none.
func (j *journal) creditOf(set lspc.DiagnosticSet) int {
	if v, ok := j.versions[set.URI]; set.Version != nil && (!ok || v != *set.Version) {
		for _, e := range slices.Backward(j.edits) {
			if v, ok := e.versions[set.URI]; ok && v == *set.Version {
				return e.n
			}
		}
	}
	for _, e := range slices.Backward(j.edits) {
		if e.seq < set.Seq {
			return e.n
		}
	}
	return 0
}

// apply makes set the journal's record of its document.
func (j *journal) apply(set lspc.DiagnosticSet) {
	for k, n := range j.files[set.URI] {
		if j.known[k] -= n; j.known[k] <= 0 {
			delete(j.known, k)
		}
	}
	delete(j.files, set.URI)
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
	j.seen[set.URI] = true
	if set.Version != nil {
		j.versions[set.URI] = *set.Version
	}
}

// account takes the publications of sets (a connection's latest per
// document) that the journal has not accounted for yet, credits each to
// the write it belongs to and returns what they changed, per write, oldest
// first. A publication that belongs to no write, or is the first of a file
// no write touched (its baseline, unless allNew), changes the journal and
// is credited to nobody. cur is the write being diagnosed, once its
// changes were sent (0 before): a file written while the server started,
// whose first publication belongs to no write, is credited to it.
//
// allNew says the server publishes every file with problems before it
// goes idle after starting (gopls): a file's first publication after a
// write is then the write's doing.
func (j *journal) account(c *lspc.Client, sets []lspc.DiagnosticSet, cur int, allNew bool) []credit {
	if j.client != c {
		// Another process of the server: its publications are numbered
		// afresh, and no write was sent to it.
		j.client, j.seq, j.edits, j.versions = c, 0, nil, map[string]int32{}
	}
	groups := map[int][]lspc.DiagnosticSet{}
	top := j.seq
	for _, set := range sets {
		top = max(top, set.Seq)
		pending := j.written[set.URI] && !j.seen[set.URI]
		gone := set.Seq <= j.seq && len(set.Diagnostics) == 0 && len(j.files[set.URI]) > 0 // emptied by present
		if set.Seq <= j.seq && !pending && !gone {
			continue
		}
		e := j.creditOf(set)
		switch {
		case gone:
			if cur == 0 {
				continue // the deletion is the write's being diagnosed, or one behind its back
			}
			e = cur
		case pending && e == 0:
			if cur == 0 {
				continue // left for the write being diagnosed
			}
			e = cur
		case e == 0, !j.seen[set.URI] && !j.written[set.URI] && !allNew:
			j.apply(set)
			continue
		}
		groups[e] = append(groups[e], set)
	}
	j.seq = top
	var out []credit
	for _, e := range slices.Sorted(maps.Keys(groups)) {
		group := groups[e]
		touched := map[string]bool{}
		for _, m := range j.edits {
			if m.n == e {
				for u := range m.versions {
					touched[u] = true
				}
			}
		}
		prev, now := newJournal(), newJournal()
		cr := credit{edit: e}
		for _, set := range group {
			if old := j.files[set.URI]; old != nil {
				prev.files[set.URI] = old
				for k, n := range old {
					prev.known[k] += n
				}
			}
			now.apply(set)
		}
		cr.news, cr.fixed = fresh(prev, now, group, touched), fixed(prev, now)
		for _, l := range cr.news {
			if touched[l.uri] && !j.seen[l.uri] && !allNew && !slices.Contains(cr.first, l.uri) {
				cr.first = append(cr.first, l.uri)
			}
		}
		for _, set := range group {
			j.apply(set)
		}
		out = append(out, cr)
	}
	return out
}

// mark records that write n sent versions (URI → document version) after
// publication seq.
func (j *journal) mark(n int, seq uint64, versions map[string]int32) {
	for u := range versions {
		j.written[u] = true
	}
	j.edits = append(j.edits, editMark{n: n, seq: seq, versions: versions})
	if len(j.edits) > MaxJournalEdits {
		j.edits = slices.Delete(j.edits, 0, len(j.edits)-MaxJournalEdits)
	}
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

// settleBusy waits until the server is done with work it began before:
// pyright's analysis of the workspace (reported as progress), tsserver
// checking the files it opened (a stream of publications). Until then what
// it published for a file may be partial — pyright publishes none for a
// file it opened but has not checked, tsserver a file's syntax errors
// before the rest — and a write would be credited with what the file had
// before it. It waits while progress runs and until nothing was published
// for the server's settle period, at most DiagnosticsWait, and reports
// whether the server was still busy then.
func (s *Supervisor) settleBusy(ctx context.Context, in *instance, c *lspc.Client) bool {
	period := max(s.opts.Settle, in.spec.Settle)
	recent := false
	for _, set := range c.AllDiagnostics() {
		if time.Since(set.Received) < period {
			recent = true
			break
		}
	}
	if !c.Indexing() && !recent {
		return false
	}
	end := time.Now().Add(s.opts.DiagnosticsWait)
	wctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	if c.WaitIdle(wctx) != nil {
		return true
	}
	return !s.quietUntil(wctx, in, c, end)
}

// unchangedWait bounds the wait for a changed file's diagnostics from a
// server that publishes none when they did not change
// (Server.SilentWhenUnchanged): past it, they are taken as unchanged.
const unchangedWait = 3 * time.Second

// quiet waits until no diagnostics were published for the settle period
// (the supervisor's, or the server's own when longer), at most maxSettle.
func (s *Supervisor) quiet(ctx context.Context, in *instance, c *lspc.Client) {
	s.quietUntil(ctx, in, c, time.Now().Add(maxSettle))
}

// quietUntil is quiet until end; it reports whether a settle period passed
// with nothing published.
func (s *Supervisor) quietUntil(ctx context.Context, in *instance, c *lspc.Client, end time.Time) bool {
	period := max(s.opts.Settle, in.spec.Settle)
	for time.Until(end) >= period && ctx.Err() == nil {
		seq := c.DiagnosticsSeq()
		qctx, cancel := context.WithTimeout(ctx, period)
		_, err := c.WaitPublish(qctx, seq, func(lspc.DiagnosticSet) bool { return true })
		cancel()
		if err != nil {
			return ctx.Err() == nil && c.Err() == nil
		}
	}
	return false
}

// baseline records what a just-started server reports before anything is
// asked of it, once its indexing is done, so that only what later writes
// introduce is reported; a file it publishes later for the first time is
// taken into the baseline then (journal.account). Files written while it
// started are left out: what the write did to them is reported by the
// next write.
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
	j.client = c
	s.mu.Lock()
	if kj := s.journal[in.key]; s.kept[in.key] && kj != nil {
		// The journal of before berth restarted stays the reference: what
		// the server now publishes for the files it knew is credited to
		// the next write.
		delete(s.kept, in.key)
		for u := range kj.seen {
			kj.written[u] = true
		}
		for u := range skip {
			kj.written[u] = true
		}
		kj.seen, kj.client, kj.seq, kj.edits, kj.versions = map[string]bool{}, c, 0, nil, map[string]int32{}
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
	edit       int // the write's number in the run ("edit #3")
	late       []lateDiags
}

// afterWrite syncs the touched workspace files into their servers (one
// batch per server), waits for the diagnostics of the new text, and
// returns the new ones (LSP-3, LSP-4).
func (s *Supervisor) afterWrite(ctx context.Context, touched []string) writeReport {
	var rep writeReport
	s.mu.Lock()
	s.edits++
	rep.edit = s.edits
	s.mu.Unlock()
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
		r, err := s.diagnoseWrite(ctx, in, names, rep.edit)
		if errors.Is(err, errDied) && ctx.Err() == nil {
			// The server died: one retry with a restarted one.
			if in2, err2 := s.serverFor(ctx, names[0], s.opts.StartWait); err2 == nil {
				in = in2
				r, err = s.diagnoseWrite(ctx, in, names, rep.edit)
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
		rep.late = append(rep.late, r.late...)
		if note := s.uncheckedNote(ctx, in); note != "" {
			rep.text = append(rep.text, note)
		}
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
func (s *Supervisor) diagnoseWrite(ctx context.Context, in *instance, names []string, n int) (writeReport, error) {
	release := in.acquire()
	defer release()
	c, g, err := in.client()
	if err != nil {
		return writeReport{}, err
	}
	rep, err := s.syncWrite(ctx, in, c, g, names, n)
	if err != nil {
		select {
		case <-c.Done():
			return writeReport{}, fmt.Errorf("%w: %w", errDied, err)
		default:
		}
	}
	return rep, err
}

func (s *Supervisor) syncWrite(ctx context.Context, in *instance, c *lspc.Client, g *generation, names []string, n int) (writeReport, error) {
	// Gopls publishes every file with problems before it goes idle after
	// starting: a file it first publishes after a write is the write's
	// doing, not a late baseline.
	allNew := in.spec.Exact
	busy := s.settleBusy(ctx, in, c)
	// What arrived since the last write: late diagnostics of earlier
	// writes, and the baselines of files first published since.
	sets := s.present(ctx, c.AllDiagnostics())
	s.mu.Lock()
	credits := s.journalOf(in.key).account(c, sets, 0, allNew)
	s.mu.Unlock()
	seq := c.DiagnosticsSeq()
	if err := in.refresh(ctx, c, g); err != nil {
		return writeReport{}, err
	}
	want := map[string]int32{}
	var deleted []string
	for _, name := range names {
		uri := s.uriOf(name)
		_, v, err := in.open(ctx, c, name)
		if isNotExist(err) {
			deleted = append(deleted, uri) // refresh closed it and reported the deletion
			continue
		}
		if err != nil {
			return writeReport{}, err
		}
		if err := c.DidSave(ctx, uri); err != nil {
			return writeReport{}, err
		}
		want[uri] = v
	}
	s.mu.Lock()
	j := s.journalOf(in.key)
	j.mark(n, seq, maps.Clone(want))
	for _, u := range deleted {
		j.written[u] = true
	}
	s.mu.Unlock()
	late := s.settle(ctx, in, c, want)
	s.settleBusy(ctx, in, c)
	if ctx.Err() != nil {
		return writeReport{}, ctx.Err()
	}
	sets = s.present(ctx, c.AllDiagnostics())
	s.mu.Lock()
	credits = append(credits, s.journalOf(in.key).account(c, sets, n, allNew)...)
	delete(s.kept, in.key)
	s.gen++
	s.mu.Unlock()

	var rep writeReport
	var own credit
	var earlier []credit
	for _, cr := range credits {
		if cr.edit == n {
			own = cr
		} else if len(cr.news) > 0 || cr.fixed > 0 {
			earlier = append(earlier, cr)
		}
	}
	rep.fixed = own.fixed
	lines, structured := s.render(ctx, own.news, MaxWriteDiagnostics, c.PositionEncoding())
	rep.structured, rep.more = structured, len(own.news)-len(structured)
	rep.text = append(rep.text, fmt.Sprintf("diagnostics (%s): %s", in.spec.ID, summary(own, n, lines)))
	for _, u := range own.first {
		name, _ := s.nameOfURI(u)
		rep.text = append(rep.text, fmt.Sprintf("note: %s had published no diagnostics for %s before this edit, so those listed for it may predate the edit (lsp diagnostics of a file before editing it lets the write tell)", in.spec.ID, name))
	}
	if busy {
		rep.text = append(rep.text, fmt.Sprintf("note: %s was still checking the workspace after %v when this edit was sent; problems listed in files it did not write may predate it", in.spec.ID, s.opts.DiagnosticsWait))
	}
	for _, cr := range earlier {
		lines, structured := s.render(ctx, cr.news, MaxWriteDiagnostics, c.PositionEncoding())
		rep.text = append(rep.text, fmt.Sprintf("late diagnostics for edit #%d (%s, which published them after that write's result): %s", cr.edit, in.spec.ID, summary(cr, 0, lines)))
		rep.late = append(rep.late, lateDiags{Edit: cr.edit, Server: in.spec.ID, Diagnostics: nonNil(structured), Fixed: cr.fixed, More: len(cr.news) - len(structured)})
	}
	for _, u := range late {
		name, _ := s.nameOfURI(u)
		rep.text = append(rep.text, fmt.Sprintf("diagnostics: %s sent none for %s within %v; what it sends later is reported with the next write's result as late diagnostics for edit #%d, or call lsp diagnostics on it", in.spec.ID, name, s.opts.DiagnosticsWait, n))
	}
	return rep, nil
}

// summary is the text of one write's credit: its new problems (lines, as
// render wrote them) and how many it fixed, with the write's number n
// (none for 0).
func summary(cr credit, n int, lines string) string {
	edit, sep := "", ""
	if n > 0 {
		edit, sep = fmt.Sprintf(" (edit #%d)", n), fmt.Sprintf("; edit #%d", n)
	}
	switch {
	case len(cr.news) == 0 && cr.fixed > 0:
		return fmt.Sprintf("no new problems; fixed %s%s", plural(cr.fixed, "problem"), edit)
	case len(cr.news) == 0:
		return "no new problems" + edit
	case cr.fixed > 0:
		return fmt.Sprintf("%s introduced (%d fixed%s):\n%s", plural(len(cr.news), "new problem"), cr.fixed, sep, lines)
	default:
		return fmt.Sprintf("%s introduced%s:\n%s", plural(len(cr.news), "new problem"), edit, lines)
	}
}

// lateDiags are the diagnostics a server published for an earlier write
// after that write's result was given, in structuredContent.
type lateDiags struct {
	Edit        int    `json:"edit"`
	Server      string `json:"server"`
	Diagnostics []Diag `json:"diagnostics"`
	Fixed       int    `json:"fixed,omitempty"`
	More        int    `json:"more,omitempty"`
}

// journalOf returns the journal of the server k, made empty when there is
// none yet. Call with s.mu held.
func (s *Supervisor) journalOf(k key) *journal {
	j := s.journal[k]
	if j == nil {
		j = newJournal()
		s.journal[k] = j
	}
	return j
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
				sc["diagnostics_edit"] = rep.edit
				if len(rep.late) > 0 {
					sc["late_diagnostics"] = rep.late
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

// present empties the diagnostics of workspace files that no longer
// exist: a server may keep what it last published for a file deleted
// behind its back. The journal takes an emptied set of a file it has
// problems for as the deletion's (journal.account).
func (s *Supervisor) present(ctx context.Context, sets []lspc.DiagnosticSet) []lspc.DiagnosticSet {
	for i, set := range sets {
		if len(set.Diagnostics) > 0 {
			if name, ok := s.nameOfURI(set.URI); ok {
				if _, err := s.ws.Stat(ctx, name); isNotExist(err) {
					sets[i].Diagnostics = nil
				}
			}
		}
	}
	return sets
}
