package structural

import (
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/workspace"
	"bytes"
	"container/heap"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/syntax"
	"berth.dev/berth/syntax/grammars"
)

// target is a prepared search: the compiled pattern and where to look.
type target struct {
	lang   *syntax.Language
	pat    *syntax.Pattern
	name   string // FS name of the file or directory
	isFile bool
	// fresh reads every file, never trusting a cache entry on size and
	// modification time alone (ast_edit captures what is on disk).
	fresh bool
	// prefilter, when set, replaces the pattern's literals as the test
	// of which files to parse: a file is parsed when it contains every
	// literal of one of the sets (ast_edit's rules, any of which may
	// match).
	prefilter [][][]byte
}

// keep reports whether data may hold a match: it contains every literal of
// one of sets.
func keep(data []byte, sets [][][]byte) bool {
	for _, lits := range sets {
		if containsAll(data, lits) {
			return true
		}
	}
	return false
}

// fileResult is one searched file: its bytes and matches, or a skip reason.
// tree is the file's parse while the scan's visit runs (a worker without a
// cache parses the next file into the same memory afterwards); enclosing
// holds the enclosing symbols of the first of matches, for those shown.
type fileResult struct {
	seq       int // place in the walk's order
	name      string
	data      []byte
	info      fs.FileInfo
	tree      *syntax.Tree
	matches   []syntax.Match
	enclosing []string
	skip      string
	// emit, set by an ordered scan's visit, runs once every file walked
	// before this one is done (see sequencer).
	emit func()
}

// scanStats counts files of a scan.
type scanStats struct {
	searched int
	skipped  map[string]int
}

// rel maps a path given by the model to a name of fsys: relative to the
// workspace, or absolute under its root; empty means the whole workspace.
func rel(fsys sandbox.FS, p string) (string, error) {
	if p == "" || p == "." {
		return ".", nil
	}
	return workspace.Name(fsys.Root(), p)
}

// fsError explains an error of the workspace FS for name.
func fsError(fsys sandbox.FS, name string, err error) error {
	return workspace.Explain(fsys.Root(), name, err)
}

// languageList is the list of language ids for error messages.
func languageList() string { return strings.Join(syntax.IDs(), ", ") }

// prepare resolves the path and the language and compiles the pattern.
func (e *Engine) prepare(ctx context.Context, fsys sandbox.FS, pattern, language, p string) (*target, error) {
	if strings.TrimSpace(pattern) == "" {
		return nil, tools.Fail("the pattern is empty: give a code fragment such as foo($A)")
	}
	name, err := rel(fsys, p)
	if err != nil {
		return nil, err
	}
	fi, err := fsys.Stat(ctx, name)
	if err != nil {
		return nil, fsError(fsys, name, err)
	}
	t := &target{name: name, isFile: !fi.IsDir()}
	if t.isFile && !fi.Mode().IsRegular() {
		return nil, tools.Fail("%s is not a regular file (%s): give a source file or a directory", name, fi.Mode().Type())
	}
	switch {
	case language != "":
		l, err := syntax.Lookup(language)
		if err != nil {
			if hint := grammars.Hint(language); hint != "" {
				return nil, tools.Fail("unknown language %q: %s (installed now: %s)", language, hint, languageList())
			}
			return nil, tools.Fail("unknown language %q: use one of %s", language, languageList())
		}
		t.lang = l
	case t.isFile:
		t.lang = syntax.LanguageForPath(name)
		if t.lang == nil {
			return nil, tools.Fail("cannot tell the language of %s from its name: pass language, one of %s", name, languageList())
		}
	default:
		return nil, tools.Fail("%s is a directory, so the language cannot be inferred: pass language, one of %s", shownDir(name), languageList())
	}
	t.pat, err = syntax.Compile(t.lang, pattern)
	if err != nil {
		return nil, tools.Fail("%s", strings.TrimPrefix(err.Error(), "syntax: "))
	}
	return t, nil
}

func shownDir(name string) string {
	if name == "." {
		return "the workspace root"
	}
	return name
}

// scan walks t and calls visit for every file of t's language that was
// searched, from several goroutines at once (visit synchronises itself).
// Skipped files are counted by reason, not visited. Unless keepData is set,
// visit must not keep f.data: without a cache a worker reads every file
// into the same buffer. With ordered set, the emit a visit leaves in
// f.emit runs in walk order, one at a time (see sequencer), and files are
// searched in walk order so that few wait for an earlier one.
func (e *Engine) scan(ctx context.Context, fsys sandbox.FS, t *target, keepData, ordered bool, visit func(*fileResult)) (scanStats, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	e.cache.begin()

	st := scanStats{skipped: map[string]int{}}
	var mu sync.Mutex // guards st
	count := func(reason string) {
		mu.Lock()
		st.skipped[reason]++
		mu.Unlock()
	}

	// Largest first keeps a worker from being left alone with a big file
	// at the end; an ordered scan takes files in walk order instead, or a
	// small early file passed over again and again would hold back every
	// later file's output.
	jobs := newQueue(walkAhead, !e.cache.enabled() && !ordered)
	var seq sequencer
	finish := func(f *fileResult) {
		if ordered {
			seq.done(f.seq, f.emit)
		}
	}
	var wg sync.WaitGroup
	sets := t.prefilter
	if sets == nil {
		var lits [][]byte
		for _, l := range t.pat.Literals() {
			lits = append(lits, []byte(l))
		}
		sets = [][][]byte{lits}
	}
	for range e.opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Without a cache no tree outlives its file, so each worker
			// parses into the same memory file after file, and reads
			// into the same buffer when visit keeps no file's data.
			w := &worker{}
			if !e.cache.enabled() {
				w.ps = new(syntax.Parser)
				defer w.ps.Close()
				if br, ok := fsys.(sandbox.BufferReader); ok && !keepData {
					w.read = br
				}
				// One thread per worker keeps its parses on one thread,
				// with its parse region and the grammar's tables warm in
				// that CPU's caches, instead of moving after every C call
				// (measured: a tenth less CPU in a one-shot search).
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
			}
			for {
				f := jobs.pop()
				if f == nil {
					return
				}
				err := e.process(ctx, fsys, t, sets, w, f)
				switch {
				case err != nil:
					cancel(err)
				case f.skip != "":
					count(f.skip)
				default:
					mu.Lock()
					st.searched++
					mu.Unlock()
					visit(f)
					f.tree = nil
				}
				finish(f)
			}
		}()
	}
	walkErr := e.walk(ctx, fsys, t, jobs, count)
	jobs.close()
	wg.Wait()
	if err := context.Cause(ctx); err != nil && ctx.Err() != nil {
		if errors.Is(err, context.Canceled) && walkErr != nil {
			err = walkErr
		}
		return st, err
	}
	return st, walkErr
}

// walk queues every file to search in jobs.
func (e *Engine) walk(ctx context.Context, fsys sandbox.FS, t *target, jobs *queue, count func(string)) error {
	n := 0
	send := func(f *fileResult) error {
		f.seq = n
		n++
		if !jobs.push(ctx, f) {
			return context.Cause(ctx)
		}
		return nil
	}
	if t.isFile {
		fi, err := fsys.Stat(ctx, t.name)
		if err != nil {
			return fsError(fsys, t.name, err)
		}
		if fi.Size() > e.opts.MaxFileSize {
			count(SkipTooLarge)
			return nil
		}
		return send(&fileResult{name: t.name, info: fi})
	}
	if ls, ok := e.listed(ctx, fsys, t); ok {
		// The files of the last walk, kept current by the watch.
		for reason, n := range ls.skipped {
			for range n {
				count(reason)
			}
		}
		for _, name := range ls.order {
			if err := send(&fileResult{name: name, info: ls.files[name]}); err != nil {
				return err
			}
		}
		return nil
	}
	rec := &listing{files: map[string]fs.FileInfo{}, skipped: map[string]int{}}
	// Stamped before the walk reads it: a change while it walks makes the
	// next search walk again.
	stamp, stamped := stampOf(ctx, fsys, excludePath)
	rec.exclude = stamp
	skip := func(reason string) {
		count(reason)
		rec.skipped[reason]++
	}
	ig := newIgnoreStack()
	if err := ig.loadAncestors(ctx, fsys, t.name); err != nil {
		return err
	}
	err := fsys.Walk(ctx, t.name, sandbox.WalkOptions{SkipDirs: []string{".git"}}, func(name string, fi fs.FileInfo) error {
		isDir := fi.IsDir()
		if name != t.name {
			if isDir && fi.Name() == ".git" {
				return fs.SkipDir
			}
			if ig.ignored(name, isDir) {
				skip(SkipIgnored)
				if isDir {
					return fs.SkipDir
				}
				return nil
			}
		}
		if isDir {
			return ig.enter(ctx, fsys, name)
		}
		if !fi.Mode().IsRegular() || syntax.LanguageForPath(name) != t.lang {
			return nil
		}
		if fi.Size() > e.opts.MaxFileSize {
			skip(SkipTooLarge)
			return nil
		}
		rec.files[name] = fi
		rec.order = append(rec.order, name)
		return send(&fileResult{name: name, info: fi})
	})
	if err != nil {
		return fsError(fsys, t.name, err)
	}
	if stamped {
		e.keep(t, rec)
	}
	return nil
}

// queue holds the files the walk found and the workers have not taken, at
// most limit of them. With largest set it hands out the largest first: big
// files are searched while the walk still feeds the workers, and a scan ends
// on small ones, so no worker is left alone with a big file at the end.
// Otherwise files go in walk order, which a parse cache too small for the
// workspace relies on to keep the same files from one search to the next.
type queue struct {
	mu       sync.Mutex
	notEmpty sync.Cond // a file was pushed, or the queue closed
	notFull  sync.Cond // a file was taken, or a pusher's ctx ended
	files    []*fileResult
	largest  bool
	limit    int
	closed   bool
}

func newQueue(limit int, largest bool) *queue {
	q := &queue{limit: limit, largest: largest}
	q.notEmpty.L = &q.mu
	q.notFull.L = &q.mu
	return q
}

// push adds f, waiting while the queue is full; it reports false when ctx
// ended first.
func (q *queue) push(ctx context.Context, f *fileResult) bool {
	q.mu.Lock()
	if len(q.files) >= q.limit {
		stop := context.AfterFunc(ctx, func() {
			q.mu.Lock()
			q.notFull.Broadcast()
			q.mu.Unlock()
		})
		for len(q.files) >= q.limit && ctx.Err() == nil {
			q.notFull.Wait()
		}
		stop() // does not wait for the callback, which may still broadcast: harmless
		if ctx.Err() != nil {
			q.mu.Unlock()
			return false
		}
	}
	if q.largest {
		heap.Push((*bySize)(&q.files), f)
	} else {
		q.files = append(q.files, f)
	}
	q.notEmpty.Signal()
	q.mu.Unlock()
	return true
}

// pop takes the largest file, waiting for one; nil when the queue is
// closed and empty.
func (q *queue) pop() *fileResult {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.files) == 0 {
		if q.closed {
			return nil
		}
		q.notEmpty.Wait()
	}
	var f *fileResult
	if q.largest {
		f = heap.Pop((*bySize)(&q.files)).(*fileResult)
	} else {
		f = q.files[0]
		q.files[0] = nil
		q.files = q.files[1:]
	}
	q.notFull.Signal()
	return f
}

// close ends the queue: pop returns nil once it is empty.
func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.notEmpty.Broadcast()
	q.mu.Unlock()
}

// bySize is a max-heap of files by size, then name.
type bySize []*fileResult

func (h bySize) Len() int { return len(h) }
func (h bySize) Less(i, j int) bool {
	a, b := h[i].info.Size(), h[j].info.Size()
	return a > b || (a == b && h[i].name < h[j].name)
}
func (h bySize) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *bySize) Push(x any)   { *h = append(*h, x.(*fileResult)) }
func (h *bySize) Pop() any {
	old := *h
	f := old[len(old)-1]
	*h = old[:len(old)-1]
	return f
}

// worker is what a scan worker reuses from file to file when there is no
// cache: a parser, and a read buffer when read is set.
type worker struct {
	ps   *syntax.Parser
	read sandbox.BufferReader
	buf  []byte
}

// readFile reads a file, into the worker's buffer when it has one.
func (w *worker) readFile(ctx context.Context, fsys sandbox.FS, name string) ([]byte, error) {
	if w.read == nil {
		return fsys.ReadFile(ctx, name)
	}
	data, err := w.read.ReadFileBuffer(ctx, name, w.buf)
	if cap(data) > cap(w.buf) && cap(data) <= maxReadBuffer {
		w.buf = data[:0]
	}
	return data, err
}

// maxReadBuffer bounds the read buffer a scan worker keeps.
const maxReadBuffer = 4 << 20

// process reads, prefilters, parses (or takes from the cache) and matches
// one file, parsing with w's parser when it has one (the cache is off). A
// returned error ends the scan; a skip is set in f.skip.
func (e *Engine) process(ctx context.Context, fsys sandbox.FS, t *target, sets [][][]byte, w *worker, f *fileResult) error {
	if workspace.HardLinks(f.info) > 1 {
		// Another name for it may lie outside the workspace: read
		// refuses it, and so does a search.
		f.skip = SkipHardLinks
		return nil
	}
	key := cacheKey(t.lang.ID, f.name)
	size, mtime := f.info.Size(), f.info.ModTime()
	caching := e.cache.enabled()
	var c cached
	hit := false
	if !t.fresh && caching {
		c, hit = e.cache.trusted(key, size, mtime)
	}
	if !hit {
		readAt := time.Now()
		data, err := w.readFile(ctx, fsys, f.name)
		e.reads.Add(1)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return context.Cause(ctx)
		case errors.Is(err, sandbox.ErrTooLarge):
			f.skip = SkipTooLarge
			return nil
		case errors.Is(err, sandbox.ErrGone):
			return fsError(fsys, f.name, err)
		default:
			f.skip = SkipUnreadable
			return nil
		}
		switch {
		case int64(len(data)) > e.opts.MaxFileSize:
			f.skip = SkipTooLarge
			return nil
		case bytes.IndexByte(data[:min(len(data), binarySniff)], 0) >= 0:
			f.skip = SkipBinary
			return nil
		}
		size = int64(len(data))
		c = cached{src: data}
		if caching {
			c.hash = sha256.Sum256(data)
			c.tree = e.cache.get(key, size, mtime, c.hash)
			if c.tree == nil && !keep(data, sets) {
				e.cache.put(key, size, mtime, c.hash, data, nil, readAt)
			}
			defer func() {
				if c.tree != nil {
					e.cache.put(key, size, mtime, c.hash, data, c.tree, readAt)
				}
			}()
		}
	}
	f.data = c.src
	if !keep(c.src, sets) {
		e.prefiltered.Add(1)
		return nil
	}
	if c.tree != nil {
		e.cacheHits.Add(1)
	} else {
		pctx, cancel := context.WithTimeout(ctx, e.opts.ParseBudget)
		var tree *syntax.Tree
		var err error
		mode := syntax.ParsedWhole
		switch {
		case w.ps != nil && t.prefilter == nil && t.pat.PartialTokens() != nil:
			// No cache, so no later search reuses the tree: parse only
			// the declarations that may hold a match.
			tree, mode, err = w.ps.ParseFor(pctx, t.pat, c.src)
		case w.ps != nil:
			tree, err = w.ps.Parse(pctx, t.lang, c.src)
		default:
			tree, err = syntax.Parse(pctx, t.lang, c.src)
		}
		cancel()
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return context.Cause(ctx)
		case errors.Is(err, syntax.ErrTooLarge):
			f.skip = SkipTooLarge
			return nil
		default: // ErrParseBudget, or the per-file deadline
			f.skip = SkipParseBudget
			return nil
		}
		switch mode {
		case syntax.ParsedNone:
			e.noDecl.Add(1)
			return nil
		case syntax.ParsedPartial:
			e.partial.Add(1)
		case syntax.ParsedFallback:
			e.fallbacks.Add(1)
		}
		e.parses.Add(1)
		switch {
		case !caching: // the tree lives in ps until the next file
		case hit:
			e.cache.put(key, size, mtime, c.hash, c.src, tree, c.cachedAt)
		default:
			c.tree = tree // cached by the deferred put above
		}
		return e.match(ctx, t, f, tree)
	}
	return e.match(ctx, t, f, c.tree)
}

// sequencer runs the emits of a scan's files in walk order, one at a time:
// each as soon as every file walked before it is done, by the worker that
// finished the last of those.
type sequencer struct {
	mu       sync.Mutex
	next     int            // the earliest file not yet done
	ready    map[int]func() // done files after next, by place; nil emits too
	draining bool           // a worker is running emits
}

// done records that the file at place seq is done, with emit (nil for a
// file with nothing to emit), and runs what is now in order unless another
// worker already does.
func (s *sequencer) done(seq int, emit func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ready == nil {
		s.ready = map[int]func(){}
	}
	s.ready[seq] = emit
	if s.draining {
		return
	}
	s.draining = true
	for {
		fn, ok := s.ready[s.next]
		if !ok {
			break
		}
		delete(s.ready, s.next)
		s.next++
		if fn != nil {
			s.mu.Unlock()
			fn()
			s.mu.Lock()
		}
	}
	s.draining = false
}

// walkCompare orders slash-separated paths as a walk visits them: by their
// first differing component, so "a/x.go" comes before "a-b.go" and
// "a.go" (a plain string comparison puts it after them, '/' being above
// '-' and '.').
func walkCompare(a, b string) int {
	for {
		ac, arest, amore := strings.Cut(a, "/")
		bc, brest, bmore := strings.Cut(b, "/")
		if c := strings.Compare(ac, bc); c != 0 {
			return c
		}
		switch {
		case !amore && !bmore:
			return 0
		case !amore:
			return -1
		case !bmore:
			return 1
		}
		a, b = arest, brest
	}
}

// containsAll reports whether data contains every literal (the pattern's
// texts that every match contains verbatim).
func containsAll(data []byte, lits [][]byte) bool {
	for _, l := range lits {
		if !bytes.Contains(data, l) {
			return false
		}
	}
	return true
}

// match sets f.matches to the matches of t's pattern in tree, by position.
func (e *Engine) match(ctx context.Context, t *target, f *fileResult, tree *syntax.Tree) error {
	ms, err := t.pat.Match(ctx, tree)
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return fmt.Errorf("structural: matching %s: %w", f.name, err)
	}
	sort.SliceStable(ms, func(i, j int) bool {
		if ms[i].StartByte != ms[j].StartByte {
			return ms[i].StartByte < ms[j].StartByte
		}
		return ms[i].EndByte > ms[j].EndByte
	})
	f.tree, f.matches = tree, ms
	return nil
}

// enclosingOf returns the enclosing symbol of each match (see
// syntax.Tree.Enclosing); nil without a tree.
func enclosingOf(tree *syntax.Tree, ms []syntax.Match) []string {
	if tree == nil || len(ms) == 0 {
		return nil
	}
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = tree.Enclosing(m.StartByte, m.EndByte)
	}
	return out
}

// Search finds the matches of req.Pattern under req.Path. Errors the caller
// should show a model are *tools.Error; ctx's error is returned as is.
func (e *Engine) Search(ctx context.Context, fsys sandbox.FS, req SearchRequest) (*SearchResult, error) {
	limit := req.MaxResults
	if limit == 0 {
		limit = DefaultMaxResults
	}
	// kept holds the files with matches in path order; files beyond the
	// first limit matches are dropped as soon as they cannot be shown, so
	// memory stays bounded however many matches there are.
	var (
		mu   sync.Mutex
		kept []*fileResult
	)
	res, err := e.search(ctx, fsys, req, false, func(f *fileResult) {
		if limit > 0 && len(f.matches) > limit {
			f.matches = f.matches[:limit]
		}
		mu.Lock()
		i := sort.Search(len(kept), func(i int) bool { return walkCompare(kept[i].name, f.name) >= 0 })
		kept = append(kept, nil)
		copy(kept[i+1:], kept[i:])
		kept[i] = f
		shown := len(f.matches) // how many of f's matches are among the first limit, as of now
		if limit > 0 {
			n := 0
			for j, k := range kept {
				if n >= limit {
					kept = kept[:j]
					break
				}
				if k == f {
					shown = min(shown, limit-n)
				}
				n += len(k.matches)
			}
			if len(kept) <= i || kept[i] != f {
				shown = 0
			}
		}
		mu.Unlock()
		// Enclosing symbols only for matches that may be shown: a file
		// that a later one pushes out of the first limit matches has paid
		// for a few, a file past them for none.
		if req.Enclosing {
			f.enclosing = enclosingOf(f.tree, f.matches[:shown])
		}
	})
	if err != nil {
		return nil, err
	}
	for _, f := range kept {
		for i, m := range f.matches {
			if limit > 0 && len(res.Matches) >= limit {
				break
			}
			res.Matches = append(res.Matches, fileMatch(f.name, m, at(f.enclosing, i)))
		}
	}
	res.Truncated = len(res.Matches) < res.Total
	return res, nil
}

// SearchEach is Search for a caller that takes every match as it is found
// (the CLI), without the engine holding them: each gets a file's matches
// in position order (syntax matches, which FillMatch turns into a
// FileMatch, so that a caller formatting them can reuse one), with their
// enclosing symbols when req.Enclosing is set (else nil), from the
// search's workers in parallel, so that the caller's own work on them
// runs beside the search; the function it returns (nil for none) is called
// in walk order (directory by directory, names sorted: the order of
// Search's matches), one at a time, as soon as every file before it is
// done. Only the files between the earliest one still being searched and
// the latest one searched wait, so memory does not grow with the number of
// matches. req.MaxResults is ignored; the result has the counts and no
// Matches.
func (e *Engine) SearchEach(ctx context.Context, fsys sandbox.FS, req SearchRequest, each func(file string, ms []syntax.Match, enclosing []string) func()) (*SearchResult, error) {
	return e.search(ctx, fsys, req, true, func(f *fileResult) {
		var enc []string
		if req.Enclosing {
			enc = enclosingOf(f.tree, f.matches)
		}
		f.emit = each(f.name, f.matches, enc)
	})
}

// search scans for req and calls visit, from several goroutines at once,
// with each file that has matches (its data already dropped); the result
// has the counts. ordered is scan's.
func (e *Engine) search(ctx context.Context, fsys sandbox.FS, req SearchRequest, ordered bool, visit func(*fileResult)) (*SearchResult, error) {
	t, err := e.prepare(ctx, fsys, req.Pattern, req.Language, req.Path)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	res := &SearchResult{Language: t.lang.ID}
	st, err := e.scan(ctx, fsys, t, false, ordered, func(f *fileResult) {
		if len(f.matches) == 0 {
			return
		}
		f.data = nil
		mu.Lock()
		res.Total += len(f.matches)
		res.Files++
		mu.Unlock()
		visit(f)
	})
	if err != nil {
		return nil, err
	}
	res.FilesSearched, res.Skipped = st.searched, st.skipped
	if res.Total == 0 {
		res.Hint = inertHint(t.pat)
	}
	for _, n := range st.skipped {
		res.FilesSkipped += n
	}
	res.FilesSkipped -= st.skipped[SkipIgnored]
	return res, nil
}

// inertHint explains why a pattern with metavariables written inside a
// string literal or a name may match nothing; "" for other patterns.
func inertHint(p *syntax.Pattern) string {
	in := p.Inert()
	if len(in) == 0 {
		return ""
	}
	v := in[0]
	if !v.InString {
		return fmt.Sprintf("%s is part of %s in the pattern, where a metavariable is plain text and binds nothing (a metavariable stands for a whole node); use one metavariable for the whole name", v.Var, v.Leaf)
	}
	hint := fmt.Sprintf("%s is inside the string literal %q of the pattern, and metavariables do not bind inside string literals (a metavariable stands for a whole node, and a string is one node): match the whole string with a metavariable", v.Var, v.Leaf)
	if whole := wholeString(p.String(), v); whole != "" {
		hint += ", as in " + whole
	}
	return hint + `, and in ast_edit change its text with a transform: "transform": {"NEW": {"source": "` + v.Var + `", "replace": "<regexp>", "by": "<text>"}}, then $NEW in the rewrite`
}

// wholeString rewrites the pattern source with the string literal around
// v replaced by v's variable, or returns "" when the literal's quotes are
// not plain ones around exactly that text.
func wholeString(src string, v syntax.InertVar) string {
	i := strings.Index(src, v.Leaf)
	j := i + len(v.Leaf)
	if i < 1 || j >= len(src) || src[i-1] != src[j] || !strings.ContainsRune("\"'`", rune(src[j])) {
		return ""
	}
	if i >= 2 && (isLetter(src[i-2])) {
		return "" // a prefixed literal (f"…", r'…')
	}
	return src[:i-1] + v.Var + src[j+1:]
}

func isLetter(c byte) bool { return c == '_' || (c|0x20 >= 'a' && c|0x20 <= 'z') }

// fileMatch converts a syntax match found in file name inside the
// declarations enclosing.
func fileMatch(name string, m syntax.Match, enclosing string) FileMatch {
	fm := FileMatch{Captures: make(map[string]string, len(m.Captures))}
	FillMatch(&fm, name, m, enclosing)
	return fm
}

// FillMatch sets dst to the match m found in file inside the declarations
// enclosing (see SearchEach), reusing dst.Captures: it is cleared, or made
// when nil.
func FillMatch(dst *FileMatch, file string, m syntax.Match, enclosing string) {
	caps := dst.Captures
	if caps == nil {
		caps = make(map[string]string, len(m.Captures))
	}
	clear(caps)
	for k, c := range m.Captures {
		caps[k] = c.Text
	}
	*dst = FileMatch{
		File:      file,
		StartLine: m.Start.Line + 1, StartCol: m.Start.Column,
		EndLine: m.End.Line + 1, EndCol: m.End.Column,
		Enclosing: enclosing,
		Text:      m.Text,
		Captures:  caps,
	}
}

// at returns s[i], or "" past its end.
func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return ""
}
