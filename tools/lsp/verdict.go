package lsp

import (
	"bytes"
	"context"
	"fmt"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"berth.dev/berth/sandbox"
)

// The completeness verdict. A language server's cross-file answer is a
// claim: a server that links only the files it has open (clangd without a
// compilation database, tsserver's inferred project), resolves a module to
// a stub that shadows the workspace's own (pyright, where berth could not
// give it a typeshed without that stub: typeshed.go), or infers names
// (pylsp) answers "1 location" where a text search finds fourteen, and
// says nothing. Before such an answer is given, berth counts the
// identifier's whole-word occurrences in the files of the server's
// languages under its root (the files the sync already tracks, so the list
// is a lookup) and names the files the answer does not cover. Each file's
// identifiers are kept as a filter, built in the background when the
// server becomes ready (warmLater), so that a check reads only the files
// that may hold its name.

const (
	// VerdictBudget bounds the text scan behind one verdict; a scan cut
	// short says how many files it did not look at.
	VerdictBudget = 2 * time.Second
	// MaxVerdictFiles is how many uncovered files a note names.
	MaxVerdictFiles = 8
	// wordFilterBits is the size of a file's identifier filter: with two
	// hashes it answers "maybe" for about 5 % of absent identifiers in a
	// file of 500 distinct ones.
	wordFilterBits = 4096
)

// cHeaders are the extensions of C and C++ headers.
var cHeaders = map[string]bool{".h": true, ".hh": true, ".hpp": true, ".hxx": true}

// verdictActions are the actions whose answers are checked against the
// text: who uses, who calls, and where it is defined.
var verdictActions = map[string]bool{"references": true, "incoming_calls": true, "definition": true}

// wordFilter is a Bloom filter of a file's identifiers at one stamp.
type wordFilter struct {
	st   stamp
	bits [wordFilterBits / 64]uint64
}

func wordHashes(w []byte) (uint32, uint32) {
	// FNV-1a, split into two indexes.
	h := uint64(14695981039346656037)
	for _, c := range w {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return uint32(h) % wordFilterBits, uint32(h>>32) % wordFilterBits
}

func (f *wordFilter) add(w []byte) {
	a, b := wordHashes(w)
	f.bits[a/64] |= 1 << (a % 64)
	f.bits[b/64] |= 1 << (b % 64)
}

// may reports whether the identifier whose wordHashes are a and b may be
// among f's.
func (f *wordFilter) may(a, b uint32) bool {
	return f.bits[a/64]&(1<<(a%64)) != 0 && f.bits[b/64]&(1<<(b%64)) != 0
}

// wordIndex keeps the identifier filters of one server generation's files,
// so a later verdict reads only the files that may hold its identifier,
// and its list of the files of the server's languages, made again only
// when the sync's stamps changed (generation.stampsVer), so that a warm
// check walks a slice, not the stamps map. Lock order: generation.syncMu,
// then mu.
type wordIndex struct {
	mu      sync.Mutex
	entries map[string]*wordEntry
	list    []*wordEntry
	ver     uint64 // the stampsVer list was made from
	built   bool
}

// wordEntry is one file: its stamp as the sync saw it, and its filter
// (nil until read; stale when its stamp differs).
type wordEntry struct {
	name string
	st   stamp
	f    *wordFilter
}

// refreshLocked makes the list current with g's stamps; g.syncMu and
// w.mu are held.
func (w *wordIndex) refreshLocked(g *generation, langs map[string]string) {
	if w.built && w.ver == g.stampsVer {
		return
	}
	if w.entries == nil {
		w.entries = map[string]*wordEntry{}
	}
	list := w.list[:0]
	for name, st := range g.stamps {
		if _, ok := langs[path.Ext(name)]; !ok {
			continue
		}
		e := w.entries[name]
		if e == nil {
			e = &wordEntry{name: name}
			w.entries[name] = e
		}
		e.st = st
		list = append(list, e)
	}
	if len(list) < len(w.entries) {
		keep := make(map[string]*wordEntry, len(list))
		for _, e := range list {
			keep[e.name] = e
		}
		w.entries = keep
	}
	w.list, w.ver, w.built = list, g.stampsVer, true
}

// identByte reports whether c may be part of an identifier: letters,
// digits, '_', any byte of a multi-byte UTF-8 sequence, and '$' where
// dollar is set.
func identByte(c byte, dollar bool) bool {
	return c == '_' || c >= utf8.RuneSelf || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9') || (dollar && c == '$')
}

// scanWords returns the filter of data's identifiers and the whole-word
// occurrences of ident in it.
func scanWords(data []byte, ident []byte, dollar bool) (*wordFilter, int) {
	f := &wordFilter{}
	n := 0
	for i := 0; i < len(data); {
		if !identByte(data[i], dollar) {
			i++
			continue
		}
		j := i + 1
		for j < len(data) && identByte(data[j], dollar) {
			j++
		}
		w := data[i:j]
		if r, _ := utf8.DecodeRune(w); !unicode.IsDigit(r) {
			f.add(w)
			if bytes.Equal(w, ident) {
				n++
			}
		}
		i = j
	}
	return f, n
}

// occurrences is what the text says of an identifier under a server's
// root: whole-word occurrences by workspace file, and how many files the
// scan did not look at before its budget ran out.
type occurrences struct {
	files   map[string]int
	unread  int
	scanned int
}

// textOccurrences counts ident's whole-word occurrences in the files of
// q's server's languages under its root, within VerdictBudget. The files
// whose identifier filter, kept since their stamp, says ident is absent
// are passed over without a read: a warm check reads only candidates.
func (q *query) textOccurrences(ctx context.Context, ident string) occurrences {
	in, g := q.in, q.g
	w := []byte(ident)
	ha, hb := wordHashes(w)
	out := occurrences{files: map[string]int{}}
	var cands []*wordEntry
	g.syncMu.Lock()
	g.words.mu.Lock()
	g.words.refreshLocked(g, in.spec.Languages)
	for _, e := range g.words.list {
		if e.f != nil && e.f.st == e.st && !e.f.may(ha, hb) {
			out.scanned++
			continue
		}
		cands = append(cands, e)
	}
	g.words.mu.Unlock()
	g.syncMu.Unlock()
	// In name order, so that a scan cut short is cut the same way.
	slices.SortFunc(cands, func(a, b *wordEntry) int { return strings.Compare(a.name, b.name) })

	deadline := time.Now().Add(VerdictBudget)
	for i, e := range cands {
		if ctx.Err() != nil || time.Now().After(deadline) {
			out.unread = len(cands) - i
			break
		}
		n, ok := g.words.read(ctx, in.s.ws, e, w)
		if !ok {
			continue // gone or unreadable since the sync saw it
		}
		out.scanned++
		if n > 0 {
			out.files[e.name] = n
		}
	}
	return out
}

// read reads e's file, keeps its identifier filter at the stamp the sync
// saw before the read, and returns ident's whole-word occurrences in it;
// ok is false when the file could not be read.
func (w *wordIndex) read(ctx context.Context, ws sandbox.FS, e *wordEntry, ident []byte) (n int, ok bool) {
	w.mu.Lock()
	st := e.st
	w.mu.Unlock()
	data, err := ws.ReadFile(ctx, e.name)
	if err != nil {
		return 0, false
	}
	f, n := scanWords(data, ident, dollarIdents[path.Ext(e.name)])
	f.st = st
	w.mu.Lock()
	e.f = f
	w.mu.Unlock()
	return n, true
}

// warmWords reads, in name order, the files of g's languages that have no
// current identifier filter, so that the first verdict on g reads only
// the files that may hold its name instead of every file (0.6–1.2 s on
// MaxWatchedFiles files). It yields the processor after each file, stops
// when ctx ends, and returns how many files it read.
func (g *generation) warmWords(ctx context.Context, ws sandbox.FS, langs map[string]string) int {
	var todo []*wordEntry
	g.syncMu.Lock()
	g.words.mu.Lock()
	g.words.refreshLocked(g, langs)
	for _, e := range g.words.list {
		if e.f == nil || e.f.st != e.st {
			todo = append(todo, e)
		}
	}
	g.words.mu.Unlock()
	g.syncMu.Unlock()
	slices.SortFunc(todo, func(a, b *wordEntry) int { return strings.Compare(a.name, b.name) })
	read := 0
	for _, e := range todo {
		if ctx.Err() != nil {
			break
		}
		g.words.mu.Lock()
		current := e.f != nil && e.f.st == e.st // a verdict read it meanwhile
		g.words.mu.Unlock()
		if current {
			continue
		}
		if _, ok := g.words.read(ctx, ws, e, nil); ok {
			read++
		}
		runtime.Gosched()
	}
	return read
}

// warmJob is a ready generation whose word index is to be warmed.
type warmJob struct {
	in *instance
	g  *generation
}

// warmLater queues g, a generation of in that just became ready, for the
// supervisor's word warmer, unless in's answers are not checked
// (Server.Exact) or the supervisor closed. The warmer is one goroutine,
// started when the queue fills and ended when it empties; Close stops it
// and waits for it.
func (s *Supervisor) warmLater(in *instance, g *generation) {
	if in.spec.Exact {
		return
	}
	s.warmMu.Lock()
	defer s.warmMu.Unlock()
	if s.warmClosed {
		return
	}
	s.warmQ = append(s.warmQ, warmJob{in, g})
	if s.warming {
		return
	}
	s.warming = true
	s.warmers.Add(1)
	go s.warmLoop()
}

// warmLoop warms the queued generations one at a time, each until its
// process ends or the supervisor closes.
func (s *Supervisor) warmLoop() {
	defer s.warmers.Done()
	for {
		s.warmMu.Lock()
		if len(s.warmQ) == 0 || s.warmClosed {
			s.warmQ, s.warming = nil, false
			s.warmMu.Unlock()
			return
		}
		j := s.warmQ[0]
		s.warmQ = s.warmQ[1:]
		s.warmMu.Unlock()
		ctx, cancel := context.WithCancel(s.warmCtx)
		stop := context.AfterFunc(j.g.ctx, cancel)
		j.g.warmWords(ctx, s.ws, j.in.spec.Languages)
		stop()
		cancel()
	}
}

// stopWarm ends the word warmer and waits for it.
func (s *Supervisor) stopWarm() {
	s.warmMu.Lock()
	s.warmClosed = true
	s.warmMu.Unlock()
	s.warmStop()
	s.warmers.Wait()
}

// verdict checks a cross-file answer against the text: covered are the
// workspace files the answer names, self the files where one occurrence
// is what was asked about (the asked file, the function a call hierarchy
// prepared), and defInWorkspace says the answer (a definition) found one
// in the workspace. It returns the note for the result ("" when the text
// agrees) and the verdict for structuredContent, nil when the server's
// answers are not checked.
func (s *Supervisor) verdict(ctx context.Context, q *query, at spot, covered, self map[string]bool, defInWorkspace bool) (string, map[string]any) {
	if !verdictActions[at.action] || q.in.spec.Exact {
		return "", nil
	}
	occ := q.textOccurrences(ctx, at.t.ident)
	uncovered := map[string]int{} // file -> occurrences the answer leaves out
	for name, n := range occ.files {
		if self[name] {
			n--
		}
		if !covered[name] && n > 0 {
			uncovered[name] = n
		}
	}
	if at.action == "incoming_calls" && len(uncovered) > 0 && q.c != nil && q.c.Supports("textDocument/definition") {
		// The function's definition names it once without calling it,
		// and the prepared item is often its declaration in a header:
		// the definition's file holds the function itself.
		if locs, err := q.c.Locations(ctx, "textDocument/definition", at.uri, at.pos); err == nil {
			for _, l := range locs {
				if name, ok := s.nameOfURI(l.URI); ok && !self[name] && uncovered[name] > 0 {
					self[name] = true
					if uncovered[name]--; uncovered[name] == 0 {
						delete(uncovered, name)
					}
				}
			}
		}
	}
	headerOnly := false
	if at.action == "definition" && defInWorkspace {
		// A definition was found where the text also has the name: the
		// other files hold its uses, not a second answer — unless every
		// place found is a header, where C and C++ declare what a source
		// file defines.
		headerOnly = true
		for name := range covered {
			headerOnly = headerOnly && cHeaders[path.Ext(name)]
		}
		for name := range uncovered {
			if !headerOnly || cHeaders[path.Ext(name)] {
				delete(uncovered, name)
			}
		}
	}
	extra := 0
	for _, n := range uncovered {
		extra += n
	}
	v := map[string]any{"checked_files": occ.scanned, "uncovered_files": len(uncovered)}
	if occ.unread > 0 {
		v["unchecked_files"] = occ.unread
	}
	var notes []string
	if len(uncovered) > 0 {
		what := "the answer may be incomplete"
		switch {
		case headerOnly:
			what = "the answer may be a declaration in a header, not the definition"
		case at.action == "definition":
			what = "the server found no definition in the workspace"
		}
		notes = append(notes, fmt.Sprintf("note: %s: %q occurs as a whole word %s in %s the answer does not cover: %s%s. They may hold other symbols of the same name; ast_grep with the pattern '%s($$$A)' finds its calls, and a text search every use",
			what, at.t.ident, plural(extra, "more time"), plural(len(uncovered), "file"), listCounts(uncovered), q.likelyCause(ctx, at.t.name, uncovered), at.t.ident))
	}
	if occ.unread > 0 {
		notes = append(notes, fmt.Sprintf("note: berth checked this answer against the text of %d files and ran out of time before the other %d; a text search covers them", occ.scanned, occ.unread))
	}
	if at.action == "references" && q.in.spec.ByName {
		notes = append(notes, fmt.Sprintf("note: %s links references by name inference, not by type: uses of other symbols named %q may be listed, and uses it cannot infer may be missing", q.in.spec.ID, at.t.ident))
	}
	return strings.Join(notes, "\n"), v
}

// byCount returns the files of counts, the most first, then by name.
func byCount(counts map[string]int) []string {
	names := make([]string, 0, len(counts))
	for name := range counts {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int {
		if counts[a] != counts[b] {
			return counts[b] - counts[a]
		}
		return strings.Compare(a, b)
	})
	return names
}

// listCounts shows files with their counts, the most first, at most
// MaxVerdictFiles of them: "a.js (3), b.js (1) and 4 more".
func listCounts(counts map[string]int) string {
	names := byCount(counts)
	shown := names[:min(len(names), MaxVerdictFiles)]
	list := make([]string, len(shown))
	for i, name := range shown {
		list[i] = fmt.Sprintf("%s (%d)", name, counts[name])
	}
	out := strings.Join(list, ", ")
	if len(names) > len(shown) {
		out += fmt.Sprintf(" and %d more", len(names)-len(shown))
	}
	return out
}

// MaxOccurrenceOpens caps the files opened for answers of a server that
// links only the files it has open (Server.LinksOpenFiles), over a server
// process's life: clangd keeps each open file's AST in memory, so the
// files opened this way are not unbounded; past the cap the verdict names
// what the answers leave out.
const MaxOccurrenceOpens = 100

// openOccurrences makes a server that links only the files it has open
// (Server.LinksOpenFiles: clangd without a compilation database, tsserver's
// inferred project) see the files where ident occurs before it answers
// across files: it opens them (those with the most occurrences first; at
// most MaxOccurrenceOpens in the server's life) and waits, bounded by
// DiagnosticsWait in all, for the server to publish the diagnostics of
// what it opened — its sign that it analyzed them.
func (q *query) openOccurrences(ctx context.Context, ident string) error {
	if !q.in.spec.LinksOpenFiles {
		return nil
	}
	occ := q.textOccurrences(ctx, ident)
	want := map[string]int32{}
	for _, name := range byCount(occ.files) {
		uri := q.in.s.uriOf(name)
		if _, open := q.c.Document(uri); open {
			continue
		}
		if q.g.occOpened.Add(1) > MaxOccurrenceOpens {
			break
		}
		_, v, err := q.in.open(ctx, q.c, name)
		if err != nil {
			if isNotExist(err) {
				continue
			}
			return err
		}
		want[uri] = v
	}
	if len(want) == 0 {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, q.in.s.opts.DiagnosticsWait)
	defer cancel()
	for uri, v := range want {
		if _, err := q.c.WaitDiagnostics(wctx, uri, v); err != nil {
			break // answer with what it has analyzed; the verdict says what it missed
		}
	}
	return ctx.Err()
}

// likelyCause names, when berth can see it, why q's server may not have
// linked files where the name occurs ("" when it cannot tell): asked is
// the file asked about, uncovered the files the answer left out.
func (q *query) likelyCause(ctx context.Context, asked string, uncovered map[string]int) string {
	in := q.in
	has := func(names ...string) bool {
		for _, n := range names {
			if _, err := in.s.ws.Stat(ctx, path.Join(in.key.root, n)); err == nil {
				return true
			}
		}
		return false
	}
	if in.spec.CompileCommandsDir != "" {
		// The database the server started with, found as the start
		// found it (compdb.go).
		return q.compDBCause(ctx)
	}
	switch in.spec.ID {
	case "typescript-language-server":
		if !has("tsconfig.json", "jsconfig.json") {
			return "; without a tsconfig.json or jsconfig.json tsserver's inferred project holds only the open files, so a CommonJS require is not followed to its callers"
		}
	case "pyright":
		files := []string{asked}
		for name := range uncovered {
			files = append(files, name)
		}
		return q.stubCause(ctx, files)
	case "pylsp":
		return "; pylsp (jedi) links names by inference, and misses uses it cannot infer"
	}
	return ""
}
