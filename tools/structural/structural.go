// Package structural provides the structural code tools of a run: ast_grep
// (read), a search by syntax-tree shape; ast_edit (write), a rewrite that is
// staged, never written; and resolve (write), which accepts or discards a
// staged rewrite (docs/tools.md §4–6, AST-1…6).
//
// An [Engine] holds one run's state: a parse cache keyed on file identity
// (path, size, modification time, SHA-256 of the content) and the staged
// edits. [Engine.Search], [Engine.Stage] and [Engine.Resolve] are the API the
// tools (and the berth ast-grep / ast-edit commands) are built on; [Register]
// binds the tools to a run's workspace. [Engine.Snapshot] and
// [Engine.Restore] carry the staged edits across a berth restart.
//
// A search walks the workspace through the sandbox FS, honours .gitignore
// files (nested, with negation), skips .git, symbolic links, binary files,
// files over the size cap and files whose parse runs over the per-file budget
// (each counted by reason, never an error), and reads, prefilters, parses and
// matches files in parallel. The tree-sitter work itself is in package
// syntax.
package structural

import (
	"container/list"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"berth.dev/berth/syntax"
)

// Defaults and caps.
const (
	// DefaultMaxFileSize is the largest file a search parses when
	// Options.MaxFileSize is zero; larger files are skipped as too_large.
	DefaultMaxFileSize = syntax.MaxSourceBytes
	// DefaultCacheBytes bounds the parse cache when Options.CacheBytes is zero.
	DefaultCacheBytes = 1 << 30
	// DefaultParseBudget is the per-file parse time when Options.ParseBudget
	// is zero.
	DefaultParseBudget = syntax.ParseTimeout
	// DefaultMaxResults is how many matches ast_grep returns when
	// max_results is not given.
	DefaultMaxResults = 50
	// MaxMaxResults is the largest max_results accepted.
	MaxMaxResults = 1000
	// binarySniff is how many leading bytes are searched for a NUL byte.
	binarySniff = 8 << 10
	// walkAhead is how many files the walk may list ahead of the workers;
	// the workers take the largest of them first.
	walkAhead = 4096
)

// Skip reasons, the keys of SearchResult.Skipped.
const (
	SkipTooLarge    = "too_large"    // over the size cap
	SkipBinary      = "binary"       // a NUL byte in the first 8 KiB
	SkipParseBudget = "parse_budget" // the parse ran over the per-file budget
	SkipIgnored     = "ignored"      // excluded by a .gitignore (files and directories)
	SkipUnreadable  = "unreadable"   // vanished or not readable while searching
	SkipHardLinks   = "hard_links"   // a file with several hard links (another name may lie outside the workspace) is neither searched nor rewritten
)

// Options tune an Engine. The zero value means the defaults.
type Options struct {
	// MaxFileSize is the largest file searched, in bytes; 0 means
	// DefaultMaxFileSize. It is capped at syntax.MaxSourceBytes.
	MaxFileSize int64
	// Workers is how many files are read and parsed at once; 0 means
	// GOMAXPROCS.
	Workers int
	// CacheBytes bounds the parse cache (an estimate of the trees' memory);
	// 0 means DefaultCacheBytes, negative disables the cache.
	CacheBytes int64
	// ParseBudget bounds the parse of one file; 0 means DefaultParseBudget.
	// A file over budget is skipped and counted as parse_budget.
	ParseBudget time.Duration
}

// Engine is one run's structural engine: it holds the parse cache and the
// staged edits. It is safe for concurrent use.
type Engine struct {
	opts  Options
	cache *parseCache

	mu      sync.Mutex
	nextID  int
	pending map[string]*Proposal
	// resolving are the edits being resolved, out of pending; a snapshot
	// keeps them as pending (a restored accept checks them again).
	resolving map[string]*Proposal
	done      map[string]string // id → "accepted", "discarded", "being resolved"
	// gen counts the changes Snapshot reflects (Generation).
	gen uint64
	// lostFrom ≤ n ≤ lostTo are the edit numbers skipped at a restore
	// (RestoreIDSkip).
	lostFrom, lostTo int

	applyMu sync.Mutex // one accept at a time, so two accepts never interleave
	// written is read under applyMu and changed under applyMu and mu, so
	// that Snapshot reads it under mu alone.
	written map[string][]writeStep

	parses, cacheHits, prefiltered, reads atomic.Int64
	partial, noDecl, fallbacks            atomic.Int64

	// list keeps the walks of warm searches current (listing.go).
	list listings
}

// NewEngine returns an Engine with opts.
func NewEngine(opts Options) *Engine {
	if opts.MaxFileSize <= 0 || opts.MaxFileSize > syntax.MaxSourceBytes {
		opts.MaxFileSize = DefaultMaxFileSize
	}
	if opts.Workers <= 0 {
		opts.Workers = runtime.GOMAXPROCS(0)
	}
	if opts.CacheBytes == 0 {
		opts.CacheBytes = DefaultCacheBytes
	}
	if opts.ParseBudget <= 0 {
		opts.ParseBudget = DefaultParseBudget
	}
	return &Engine{
		opts:      opts,
		cache:     newParseCache(opts.CacheBytes),
		pending:   map[string]*Proposal{},
		resolving: map[string]*Proposal{},
		done:      map[string]string{},
		written:   map[string][]writeStep{},
	}
}

// Stats counts an Engine's work since it was made.
type Stats struct {
	// Parses is how many files were parsed (cache misses).
	Parses int64
	// CacheHits is how many files were served from the parse cache.
	CacheHits int64
	// Prefiltered is how many files were skipped without parsing because
	// they lack the pattern's literal text.
	Prefiltered int64
	// PartialParses is how many of Parses read only the top-level
	// declarations that hold the pattern's tokens (syntax.ParseFor; only
	// without a parse cache).
	PartialParses int64
	// NoDeclaration is how many files passed the prefilter but were not
	// parsed, because none of their top-level declarations holds all of
	// the pattern's tokens.
	NoDeclaration int64
	// Fallbacks is how many partial parses had an error node, so the whole
	// file was parsed instead.
	Fallbacks int64
	// Reads is how many files were read; a file whose size and
	// modification time match its cache entry (and are not racily clean)
	// is not read again.
	Reads int64
	// CachedTrees and CachedBytes describe the parse cache now.
	CachedTrees int
	CachedBytes int64
}

// Stats returns the Engine's counters.
func (e *Engine) Stats() Stats {
	n, b := e.cache.size()
	return Stats{
		Parses:        e.parses.Load(),
		CacheHits:     e.cacheHits.Load(),
		Prefiltered:   e.prefiltered.Load(),
		Reads:         e.reads.Load(),
		PartialParses: e.partial.Load(),
		NoDeclaration: e.noDecl.Load(),
		Fallbacks:     e.fallbacks.Load(),
		CachedTrees:   n,
		CachedBytes:   b,
	}
}

// SearchRequest is a structural search. Path is a file or directory,
// relative to the workspace or absolute under it; empty means the whole
// workspace. Language is a language id or alias; it may be empty when Path
// is a file. MaxResults 0 means DefaultMaxResults; negative means no limit.
// Enclosing asks for each returned match's enclosing symbol
// (FileMatch.Enclosing); it costs a walk up the syntax tree per match, so
// Search computes it only for the matches it returns.
type SearchRequest struct {
	Pattern, Language, Path string
	MaxResults              int
	Enclosing               bool
}

// FileMatch is one match. File is workspace-relative and slash-separated;
// lines are 1-based, columns 0-based byte offsets; EndCol is exclusive.
// Enclosing names the declarations around the match, outermost first,
// joined with "." ("HTTPConnection.putheader", "(*Server).Serve"; see
// syntax.Tree.Enclosing), "" at the top level or when not asked for.
// Captures maps metavariable names (without "$") to the captured text.
type FileMatch struct {
	File      string            `json:"file"`
	StartLine int               `json:"start_line"`
	StartCol  int               `json:"start_col"`
	EndLine   int               `json:"end_line"`
	EndCol    int               `json:"end_col"`
	Text      string            `json:"text"`
	Enclosing string            `json:"enclosing,omitempty"`
	Captures  map[string]string `json:"captures"`
}

// SearchResult is a search's answer: the first MaxResults matches by file,
// in the order a walk visits them (walkCompare), then by position, the total count, and what was searched and skipped.
type SearchResult struct {
	Matches   []FileMatch
	Total     int
	Truncated bool
	// Files is how many files had at least one match.
	Files int
	// FilesSearched counts files of the language that were examined
	// (prefiltered ones included); FilesSkipped counts the skipped ones.
	FilesSearched, FilesSkipped int
	// Skipped counts skips by reason (SkipTooLarge, SkipBinary, …).
	Skipped map[string]int
	// Language is the id of the language searched.
	Language string
	// Hint, when nothing matched, says why the pattern may not match what
	// it seems to: a metavariable written inside a string literal or a
	// name binds nothing.
	Hint string
}

// EditRequest is a structural rewrite: matches of Pattern under Path are
// replaced with Rewrite, its metavariables substituted, with the variables
// Transform derives. Rules, instead of Pattern, Rewrite and Transform,
// gives several such rewrites, applied in order to each file (see Stage).
//
// RefuseSyntaxErrors refuses an edit whose rewrite brings syntax errors
// into a file (ast_edit sets it), instead of staging it with
// FileEdit.SyntaxWarnings.
type EditRequest struct {
	Pattern, Rewrite   string
	Transform          map[string]Transform
	Rules              []Rule
	Language, Path     string
	RefuseSyntaxErrors bool
}

// Rule is one rewrite of an edit: every match of Pattern becomes Rewrite,
// its $NAME and $$$NAME replaced by what they captured or by what a
// Transform made of it. It is also ast_edit's input for one rule.
type Rule struct {
	Pattern   string               `json:"pattern" jsonschema:"what to match, as for ast_grep"`
	Rewrite   string               `json:"rewrite" jsonschema:"what goes there instead, with $NAME and $$$NAME replaced by what they captured (or by a transform's result); \"\" deletes the match"`
	Transform map[string]Transform `json:"transform,omitempty" jsonschema:"new variables for the rewrite, by name (NEW, used as $NEW): each a regexp replacement in the text of a variable the pattern binds"`
}

// Transform derives a variable from another by a regular-expression
// replacement, as ast-grep's transform.replace: every match of Replace in
// the text of Source becomes By. It is also ast_edit's input.
type Transform struct {
	Source  string `json:"source" jsonschema:"the variable to change, $NAME or $$$NAME as the pattern binds it (or another transform's)"`
	Replace string `json:"replace" jsonschema:"a regular expression (Go RE2 syntax) to find in its text; every match is replaced"`
	By      string `json:"by,omitempty" jsonschema:"what replaces each match; $1, ${1} or ${name} insert the regexp's groups (write ${1}x before a letter or digit); default empty"`
}

// FileEdit is one file of a staged edit: its content when the edit was
// staged (Old, with its SHA-256), the content accept writes (New), and the
// replacements that make one from the other (Edits, byte ranges of Old).
// SyntaxWarnings are syntax errors the rewrite brings into the file.
type FileEdit struct {
	Path           string
	Old, New       []byte
	OldHash        [sha256.Size]byte
	Mode           fs.FileMode
	Replacements   int
	Edits          []syntax.Edit
	SyntaxWarnings []SyntaxWarning
}

// SyntaxWarning is a syntax error in a file's rewritten content that its
// old content did not have there: Line (1-based, in the new content) and
// what is wrong ("missing \")\"", "cannot parse `foo(,`").
type SyntaxWarning struct {
	Line int
	What string
}

// Proposal is a staged edit. Diff is the unified diff of all its files.
type Proposal struct {
	ID       string
	Language string
	// Pattern and Rewrite are the first rule's; Rules are all of them.
	Pattern      string
	Rewrite      string
	Rules        []Rule
	Files        []FileEdit
	Replacements int
	// Unchanged counts the matches whose rewrite is the text they have:
	// they are not replacements.
	Unchanged int
	Diff      string
	// Skipped counts files that were not searched or not rewritten, by
	// reason, as in SearchResult.
	Skipped map[string]int
	// Hint, when nothing matched, is as SearchResult.Hint.
	Hint string

	lang  *syntax.Language
	rules []*rule // compiled, to say what the edit would do to changed files
	// rulesErr says why rules are nil: they did not compile again when
	// the edit was restored.
	rulesErr error
}

// Actions of Resolve.
const (
	ActionAccept  = "accept"
	ActionDiscard = "discard"
)

// AppliedFile is one file a resolve wrote. MergedOver names the edits
// accepted since this one was staged that changed the file too: its
// replacements were carried over theirs.
type AppliedFile struct {
	Path         string
	Replacements int
	MergedOver   []string
}

// Applied is what Resolve did: Action is ActionAccept or ActionDiscard;
// Files are the files written (none for a discard). Warnings name files
// another writer changed again while resolve ran, after it wrote them (their
// content is the other writer's, not overwritten).
type Applied struct {
	ID           string
	Action       string
	Files        []AppliedFile
	Replacements int
	Warnings     []string
}

// Paths returns the workspace-relative paths of the files written.
func (a *Applied) Paths() []string {
	out := make([]string, len(a.Files))
	for i, f := range a.Files {
		out[i] = f.Path
	}
	return out
}

// skipSummary writes skip counts as "2 binary, 1 too_large" in a fixed order.
func skipSummary(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k, n := range m {
		if n > 0 {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", m[k], k)
	}
	return strings.Join(parts, ", ")
}

// parseCache is an LRU of file contents and their parsed trees, bounded by
// an estimate of their memory.
type parseCache struct {
	limit int64

	mu    sync.Mutex
	bytes int64
	lru   *list.List // of *cacheEntry, most recent first
	byKey map[string]*list.Element
	gen   uint64 // the current search; its entries are not evicted for each other
}

// cacheEntry is one file as last read: its identity, its bytes and, once
// parsed, its tree (nil for a file the prefilter ruled out).
type cacheEntry struct {
	key      string // language id NUL path
	size     int64
	mtime    time.Time
	hash     [sha256.Size]byte
	src      []byte
	tree     *syntax.Tree
	cost     int64
	gen      uint64    // the last search that used it
	cachedAt time.Time // when the bytes were read
}

// Cost estimates.
const (
	// nodeCost is the memory of one syntax node of a cached tree (package
	// syntax stores 24 bytes per node).
	nodeCost = 24
	// entryCost is the fixed overhead of an entry.
	entryCost = 256
	// racyWindow: an entry is trusted on its size and modification time
	// alone only when the file was last modified this long before it was
	// read, so a change within the file system's timestamp granularity
	// cannot hide behind an unchanged mtime (git's "racily clean" rule).
	racyWindow = 2 * time.Second
)

func newParseCache(limit int64) *parseCache {
	return &parseCache{limit: limit, lru: list.New(), byKey: map[string]*list.Element{}}
}

func cacheKey(lang, name string) string { return lang + "\x00" + name }

// cached is what a lookup returns (a copy: entries change under the lock).
type cached struct {
	src      []byte
	tree     *syntax.Tree
	hash     [sha256.Size]byte
	cachedAt time.Time
}

// trusted returns the entry of key when the file's size and modification
// time are those it was read with and it is not racily clean, without
// reading the file.
func (c *parseCache) trusted(key string, size int64, mtime time.Time) (cached, bool) {
	if c.limit < 0 {
		return cached{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[key]
	if !ok {
		return cached{}, false
	}
	ce := el.Value.(*cacheEntry)
	if ce.size != size || !ce.mtime.Equal(mtime) || !mtime.Before(ce.cachedAt.Add(-racyWindow)) {
		return cached{}, false
	}
	c.lru.MoveToFront(el)
	ce.gen = c.gen
	return cached{src: ce.src, tree: ce.tree, hash: ce.hash, cachedAt: ce.cachedAt}, true
}

// get returns the cached tree of key when the file's identity, content
// hash included, is unchanged.
func (c *parseCache) get(key string, size int64, mtime time.Time, hash [sha256.Size]byte) *syntax.Tree {
	if c.limit < 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[key]
	if !ok {
		return nil
	}
	ce := el.Value.(*cacheEntry)
	if ce.size != size || !ce.mtime.Equal(mtime) || ce.hash != hash || ce.tree == nil {
		return nil
	}
	c.lru.MoveToFront(el)
	ce.gen = c.gen
	return ce.tree
}

// begin starts a search: entries it uses are kept over older ones.
func (c *parseCache) begin() {
	c.mu.Lock()
	c.gen++
	c.mu.Unlock()
}

// put caches a file's bytes and tree (nil when not parsed), evicting the
// least recently used entries over the limit. Entries the current search
// used are not evicted: when only they are left, the file is not cached, so
// a search over more than fits keeps the part that fits instead of evicting
// every entry before the next search reaches it.
func (c *parseCache) put(key string, size int64, mtime time.Time, hash [sha256.Size]byte, src []byte, tree *syntax.Tree, readAt time.Time) {
	if c.limit < 0 {
		return
	}
	cost := int64(len(src)) + entryCost
	if tree != nil {
		cost += int64(tree.NodeCount()) * nodeCost
	}
	if cost > c.limit {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[key]; ok {
		c.bytes -= el.Value.(*cacheEntry).cost
		c.lru.Remove(el)
		delete(c.byKey, key)
	}
	for c.bytes+cost > c.limit {
		el := c.lru.Back()
		if el == nil || el.Value.(*cacheEntry).gen == c.gen {
			return
		}
		ce := el.Value.(*cacheEntry)
		c.lru.Remove(el)
		delete(c.byKey, ce.key)
		c.bytes -= ce.cost
	}
	c.byKey[key] = c.lru.PushFront(&cacheEntry{key: key, size: size, mtime: mtime, hash: hash, src: src, tree: tree, cost: cost, gen: c.gen, cachedAt: readAt})
	c.bytes += cost
}

// enabled reports whether the cache keeps anything (Options.CacheBytes is
// not negative).
func (c *parseCache) enabled() bool { return c.limit >= 0 }

// size returns how many trees are cached and the estimated bytes of all
// entries.
func (c *parseCache) size() (int, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for el := c.lru.Front(); el != nil; el = el.Next() {
		if el.Value.(*cacheEntry).tree != nil {
			n++
		}
	}
	return n, c.bytes
}
