package lsp

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"

	lspc "berth.dev/berth/lsp"
)

// diag is a diagnostic at line:0 with a severity, a code (JSON: a number,
// a string or empty for none) and a message.
func diag(line uint32, sev lspc.DiagnosticSeverity, code, msg string) lspc.Diagnostic {
	d := lspc.Diagnostic{Severity: sev, Message: msg}
	d.Range.Start.Line = line
	if code != "" {
		d.Code = json.RawMessage(code)
	}
	return d
}

func dset(uri string, ds ...lspc.Diagnostic) lspc.DiagnosticSet {
	return lspc.DiagnosticSet{URI: uri, Diagnostics: ds}
}

const (
	errSev  = lspc.SeverityError
	warnSev = lspc.SeverityWarning
)

// TestFresh is a table of the journal's "what is new" decisions (LSP-4):
// a diagnostic is known by severity, code and message, counted over all
// files; a key whose count grew is new that many times, the instances
// taken first from files whose count of it grew, touched files first.
func TestFresh(t *testing.T) {
	tests := []struct {
		name    string
		before  []lspc.DiagnosticSet // what the journal holds (nil: an empty journal)
		skip    []string             // URIs the journal left out (a baseline's pending files)
		after   []lspc.DiagnosticSet
		touched []string
		want    []string // uri:line severity code message, in the order fresh returns
	}{
		{
			name:  "empty journal: every error is new",
			after: []lspc.DiagnosticSet{dset("a.go", diag(3, errSev, `"E1"`, "undefined: x"))},
			want:  []string{"a.go:3 error E1 undefined: x"},
		},
		{
			name:   "same error moved lines is not new",
			before: []lspc.DiagnosticSet{dset("a.go", diag(3, errSev, `"E1"`, "undefined: x"))},
			after:  []lspc.DiagnosticSet{dset("a.go", diag(10, errSev, `"E1"`, "undefined: x"))},
		},
		{
			name:   "same error moved to another file is not new",
			before: []lspc.DiagnosticSet{dset("a.go", diag(3, errSev, `"E1"`, "undefined: x"))},
			after:  []lspc.DiagnosticSet{dset("a.go"), dset("b.go", diag(1, errSev, `"E1"`, "undefined: x"))},
		},
		{
			name:   "a second instance in the same file is new, once",
			before: []lspc.DiagnosticSet{dset("a.go", diag(3, errSev, `"E1"`, "undefined: x"))},
			after: []lspc.DiagnosticSet{dset("a.go",
				diag(3, errSev, `"E1"`, "undefined: x"),
				diag(7, errSev, `"E1"`, "undefined: x"))},
			want: []string{"a.go:3 error E1 undefined: x"},
		},
		{
			name:   "a second instance in another file: the file that gained it",
			before: []lspc.DiagnosticSet{dset("a.go", diag(3, errSev, `"E1"`, "undefined: x"))},
			after: []lspc.DiagnosticSet{
				dset("a.go", diag(3, errSev, `"E1"`, "undefined: x")),
				dset("b.go", diag(5, errSev, `"E1"`, "undefined: x")),
			},
			want: []string{"b.go:5 error E1 undefined: x"},
		},
		{
			name:   "of two files that gained one, the touched one",
			before: []lspc.DiagnosticSet{dset("a.go", diag(9, errSev, "", "cycle"))},
			after: []lspc.DiagnosticSet{
				dset("b.go", diag(1, errSev, "", "cycle")),
				dset("c.go", diag(2, errSev, "", "cycle")),
			},
			touched: []string{"c.go"},
			want:    []string{"c.go:2 error  cycle"},
		},
		{
			name:   "counts: three after one are two new",
			before: []lspc.DiagnosticSet{dset("a.go", diag(1, errSev, "", "unused"))},
			after: []lspc.DiagnosticSet{dset("a.go",
				diag(1, errSev, "", "unused"), diag(2, errSev, "", "unused"), diag(4, errSev, "", "unused"))},
			want: []string{"a.go:1 error  unused", "a.go:2 error  unused"},
		},
		{
			name: "counts: fewer than before is nothing new",
			before: []lspc.DiagnosticSet{dset("a.go",
				diag(1, errSev, "", "unused"), diag(2, errSev, "", "unused"))},
			after: []lspc.DiagnosticSet{dset("a.go", diag(8, errSev, "", "unused"))},
		},
		{
			name:   "severity is part of the key",
			before: []lspc.DiagnosticSet{dset("a.go", diag(3, warnSev, `"U"`, "x unused"))},
			after:  []lspc.DiagnosticSet{dset("a.go", diag(3, errSev, `"U"`, "x unused"))},
			want:   []string{"a.go:3 error U x unused"},
		},
		{
			name:   "code is part of the key",
			before: []lspc.DiagnosticSet{dset("a.go", diag(3, errSev, `"E1"`, "bad"))},
			after:  []lspc.DiagnosticSet{dset("a.go", diag(3, errSev, `"E2"`, "bad"))},
			want:   []string{"a.go:3 error E2 bad"},
		},
		{
			name:   "a numeric code equals the same code as a string",
			before: []lspc.DiagnosticSet{dset("a.go", diag(3, errSev, `2304`, "bad"))},
			after:  []lspc.DiagnosticSet{dset("a.go", diag(4, errSev, `"2304"`, "bad"))},
		},
		{
			name:   "message is part of the key",
			before: []lspc.DiagnosticSet{dset("a.go", diag(3, errSev, "", "undefined: x"))},
			after:  []lspc.DiagnosticSet{dset("a.go", diag(3, errSev, "", "undefined: y"))},
			want:   []string{"a.go:3 error  undefined: y"},
		},
		{
			name:   "the message's surrounding space is not",
			before: []lspc.DiagnosticSet{dset("a.go", diag(3, errSev, "", "undefined: x"))},
			after:  []lspc.DiagnosticSet{dset("a.go", diag(5, errSev, "", "  undefined: x\n"))},
		},
		{
			name: "info and hints are never new, unranked ones are",
			after: []lspc.DiagnosticSet{dset("a.go",
				diag(1, lspc.SeverityInformation, "", "consider"),
				diag(2, lspc.SeverityHint, "", "could"),
				diag(3, 0, "", "unranked"),
				diag(4, warnSev, "", "careful"))},
			want: []string{"a.go:3 unknown  unranked", "a.go:4 warning  careful"},
		},
		{
			name:   "a fixed error does not hide a new one",
			before: []lspc.DiagnosticSet{dset("a.go", diag(3, errSev, "", "old"))},
			after:  []lspc.DiagnosticSet{dset("a.go", diag(3, errSev, "", "new"))},
			want:   []string{"a.go:3 error  new"},
		},
		{
			name:   "a file the baseline left out counts as new",
			before: []lspc.DiagnosticSet{dset("a.go", diag(1, errSev, "", "old")), dset("b.go", diag(2, errSev, "", "pending"))},
			skip:   []string{"b.go"},
			after:  []lspc.DiagnosticSet{dset("a.go", diag(1, errSev, "", "old")), dset("b.go", diag(2, errSev, "", "pending"))},
			want:   []string{"b.go:2 error  pending"},
		},
		{
			name: "the written files' come first, so a cap keeps them",
			after: []lspc.DiagnosticSet{
				dset("a.go", diag(9, warnSev, "", "w")),
				dset("b.go", diag(7, errSev, "", "z"), diag(2, errSev, "", "y")),
			},
			touched: []string{"b.go"},
			want:    []string{"b.go:2 error  y", "b.go:7 error  z", "a.go:9 warning  w"},
		},
		{
			name: "new ones come by file, then line",
			after: []lspc.DiagnosticSet{
				dset("b.go", diag(7, errSev, "", "z"), diag(2, errSev, "", "y")),
				dset("a.go", diag(9, warnSev, "", "w")),
			},
			want: []string{"a.go:9 warning  w", "b.go:2 error  y", "b.go:7 error  z"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			skip := map[string]bool{}
			for _, u := range tt.skip {
				skip[u] = true
			}
			prev := snapshot(tt.before, skip)
			now := snapshot(tt.after, nil)
			touched := map[string]bool{}
			for _, u := range tt.touched {
				touched[u] = true
			}
			var got []string
			for _, l := range fresh(prev, now, tt.after, touched) {
				got = append(got, fmt.Sprintf("%s:%d %v %s %s", l.uri, l.d.Range.Start.Line, l.d.Severity, l.d.CodeString(), l.d.Message))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("fresh =\n\t%q\nwant\n\t%q", got, tt.want)
			}
		})
	}
}

// TestSnapshot checks the journal's counts: per key over all files and per
// file, reported severities only, skipped URIs left out.
func TestSnapshot(t *testing.T) {
	e1 := diag(1, errSev, `"E1"`, "bad")
	j := snapshot([]lspc.DiagnosticSet{
		dset("a.go", e1, diag(5, errSev, `"E1"`, "bad "), diag(6, lspc.SeverityHint, "", "hint")),
		dset("b.go", diag(2, errSev, `"E1"`, "bad"), diag(3, warnSev, "", "careful")),
		dset("c.go"),
		dset("d.go", e1),
	}, map[string]bool{"d.go": true})
	k1, kw := keyOf(e1), keyOf(diag(0, warnSev, "", "careful"))
	if want := map[diagKey]int{k1: 3, kw: 1}; !maps.Equal(j.known, want) {
		t.Errorf("known = %v, want %v", j.known, want)
	}
	want := map[string]map[diagKey]int{"a.go": {k1: 2}, "b.go": {k1: 1, kw: 1}}
	if len(j.files) != len(want) {
		t.Errorf("files = %v, want %v", j.files, want)
	}
	for uri, counts := range want {
		if !maps.Equal(j.files[uri], counts) {
			t.Errorf("files[%s] = %v, want %v", uri, j.files[uri], counts)
		}
	}
}

// TestFixed: a write's fixed count is how far each key's count fell; a
// diagnostic that moved is not fixed, and one that is new does not offset
// one that went away.
func TestFixed(t *testing.T) {
	undefined := diag(3, errSev, `"E1"`, "undefined: x")
	unused := diag(5, warnSev, "", "unused y")
	tests := []struct {
		name          string
		before, after []lspc.DiagnosticSet
		want          int
	}{
		{"two fixed", []lspc.DiagnosticSet{dset("a.go", undefined, undefined, unused)}, []lspc.DiagnosticSet{dset("a.go", unused)}, 2},
		{"moved is not fixed", []lspc.DiagnosticSet{dset("a.go", undefined)}, []lspc.DiagnosticSet{dset("b.go", diag(9, errSev, `"E1"`, "undefined: x"))}, 0},
		{"one fixed, one new", []lspc.DiagnosticSet{dset("a.go", undefined)}, []lspc.DiagnosticSet{dset("a.go", unused)}, 1},
		{"hints do not count", []lspc.DiagnosticSet{dset("a.go", diag(1, lspc.SeverityHint, "", "h"))}, nil, 0},
	}
	for _, tc := range tests {
		if got := fixed(snapshot(tc.before, nil), snapshot(tc.after, nil)); got != tc.want {
			t.Errorf("%s: fixed = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// pub is a publication: set with its arrival number and document version
// (-1: none).
func pub(seq uint64, version int32, set lspc.DiagnosticSet) lspc.DiagnosticSet {
	set.Seq = seq
	if version >= 0 {
		set.Version = &version
	}
	return set
}

// TestAccount is a table of which write the journal credits each
// publication to (LSP-4): a file's first publication is its baseline
// unless a write touched it; a publication carrying a write's document
// version is that write's, even when it arrives during a later one; one
// without a version is the last write's before it arrived.
func TestAccount(t *testing.T) {
	c := new(lspc.Client)
	old := diag(1, warnSev, "", "old warning")
	broken := diag(4, errSev, "", "argument missing")
	type step struct {
		sets    []lspc.DiagnosticSet // the connection's latest publications
		cur     int                  // the write being diagnosed (0: before its changes)
		mark    map[string]int32     // then write cur sends these versions, after the publications so far
		want    []string             // "edit: uri:line message" of what is credited, "edit: fixed N"
		allNew  bool
		pending []string // written while the server started
	}
	tests := []struct {
		name  string
		base  []lspc.DiagnosticSet
		steps []step
	}{
		{
			name: "a file first published after a write is its baseline",
			base: []lspc.DiagnosticSet{pub(1, 1, dset("a.py"))},
			steps: []step{
				{cur: 0},
				{cur: 1, mark: map[string]int32{"a.py": 2}, sets: []lspc.DiagnosticSet{
					pub(2, 2, dset("a.py", broken)), pub(3, -1, dset("b.py", old))},
					want: []string{"1: a.py:4 argument missing"}},
			},
		},
		{
			name: "unless the server publishes every file before it idles",
			base: []lspc.DiagnosticSet{pub(1, 1, dset("a.py"))},
			steps: []step{
				{cur: 1, allNew: true, mark: map[string]int32{"a.py": 2}, sets: []lspc.DiagnosticSet{
					pub(2, 2, dset("a.py")), pub(3, -1, dset("b.py", broken))},
					want: []string{"1: b.py:4 argument missing"}},
			},
		},
		{
			name: "a late publication with a write's version is that write's",
			base: []lspc.DiagnosticSet{pub(1, 1, dset("a.py", old))},
			steps: []step{
				{cur: 1, mark: map[string]int32{"a.py": 2}, sets: []lspc.DiagnosticSet{pub(1, 1, dset("a.py", old))}},
				// Write 2 touches c.py; a.py's diagnostics for write 1 arrive.
				{cur: 0, sets: []lspc.DiagnosticSet{pub(4, 2, dset("a.py", old, broken))},
					want: []string{"1: a.py:4 argument missing"}},
				{cur: 2, mark: map[string]int32{"c.py": 2}, sets: []lspc.DiagnosticSet{pub(4, 2, dset("a.py", old, broken)), pub(5, 2, dset("c.py"))}},
			},
		},
		{
			name: "even when it arrives after the next write was sent",
			base: []lspc.DiagnosticSet{pub(1, 1, dset("a.py", old)), pub(2, 1, dset("c.py"))},
			steps: []step{
				{cur: 1, mark: map[string]int32{"a.py": 2}},
				{cur: 2, mark: map[string]int32{"c.py": 2}, sets: []lspc.DiagnosticSet{
					pub(3, 2, dset("c.py")), pub(4, 2, dset("a.py", old, broken))},
					want: []string{"1: a.py:4 argument missing"}},
			},
		},
		{
			name: "a version published again is the last write's, not the one that sent it",
			base: []lspc.DiagnosticSet{pub(1, 1, dset("a.go", broken)), pub(2, 1, dset("b.go"))},
			steps: []step{
				{cur: 1, mark: map[string]int32{"a.go": 2}, sets: []lspc.DiagnosticSet{pub(3, 2, dset("a.go", broken)), pub(2, 1, dset("b.go"))}},
				// Write 2 fixes b.go's callee: gopls re-checks a.go at the
				// version write 1 sent.
				{cur: 2, mark: map[string]int32{"b.go": 2}, sets: []lspc.DiagnosticSet{pub(5, 2, dset("a.go")), pub(4, 2, dset("b.go"))},
					want: []string{"2: fixed 1"}},
			},
		},
		{
			name: "a deleted file's problems are fixed by the write that deletes it",
			base: []lspc.DiagnosticSet{pub(1, 1, dset("a.go", broken)), pub(2, 1, dset("b.go"))},
			steps: []step{
				// present emptied a.go's set: the file is gone.
				{cur: 0, sets: []lspc.DiagnosticSet{pub(1, 1, dset("a.go")), pub(2, 1, dset("b.go"))}},
				{cur: 1, mark: map[string]int32{"b.go": 2}, sets: []lspc.DiagnosticSet{pub(1, 1, dset("a.go")), pub(3, 2, dset("b.go"))},
					want: []string{"1: fixed 1"}},
			},
		},
		{
			name: "a versionless publication is the last write's before it arrived",
			base: []lspc.DiagnosticSet{pub(1, 1, dset("a.py")), pub(2, -1, dset("b.py", old))},
			steps: []step{
				{cur: 1, mark: map[string]int32{"a.py": 2}, sets: []lspc.DiagnosticSet{pub(3, 2, dset("a.py"))}},
				{cur: 0, sets: []lspc.DiagnosticSet{pub(3, 2, dset("a.py")), pub(4, -1, dset("b.py", old, broken))},
					want: []string{"1: b.py:4 argument missing"}},
				{cur: 2, mark: map[string]int32{"a.py": 3}, sets: []lspc.DiagnosticSet{pub(5, 3, dset("a.py")), pub(6, -1, dset("b.py", old))},
					want: []string{"2: fixed 1"}},
			},
		},
		{
			name: "a publication before any write is taken in silently",
			base: []lspc.DiagnosticSet{pub(1, -1, dset("b.py"))},
			steps: []step{
				{cur: 0, sets: []lspc.DiagnosticSet{pub(2, -1, dset("b.py", old))}},
				{cur: 1, mark: map[string]int32{"a.py": 1}, sets: []lspc.DiagnosticSet{pub(2, -1, dset("b.py", old)), pub(3, 1, dset("a.py"))}},
			},
		},
		{
			name:  "a file written while the server started is the next write's",
			base:  []lspc.DiagnosticSet{pub(1, -1, dset("p.py", broken))},
			steps: []step{{cur: 0, pending: []string{"p.py"}}, {cur: 1, mark: map[string]int32{"a.py": 1}, sets: []lspc.DiagnosticSet{pub(1, -1, dset("p.py", broken)), pub(2, 1, dset("a.py"))}, want: []string{"1: p.py:4 argument missing"}}},
		},
		{
			name: "a touched file never published before is the write's, and said so",
			base: []lspc.DiagnosticSet{pub(1, -1, dset("b.py"))},
			steps: []step{{cur: 1, mark: map[string]int32{"n.py": 2}, sets: []lspc.DiagnosticSet{pub(2, 2, dset("n.py", old))},
				want: []string{"1: n.py:1 old warning", "1: first n.py"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var skip map[string]bool
			for _, st := range tt.steps {
				for _, u := range st.pending {
					skip = map[string]bool{u: true}
				}
			}
			j := snapshot(tt.base, skip)
			j.client = c
			var got []string
			sets := tt.base
			for _, st := range tt.steps {
				if st.sets != nil {
					sets = st.sets
				}
				if st.mark != nil {
					// The write's changes go out after the publications
					// accounted for so far.
					j.mark(st.cur, j.seq, st.mark)
				}
				for _, cr := range j.account(c, sets, st.cur, st.allNew) {
					for _, l := range cr.news {
						got = append(got, fmt.Sprintf("%d: %s:%d %s", cr.edit, l.uri, l.d.Range.Start.Line, l.d.Message))
					}
					if cr.fixed > 0 {
						got = append(got, fmt.Sprintf("%d: fixed %d", cr.edit, cr.fixed))
					}
					for _, u := range cr.first {
						got = append(got, fmt.Sprintf("%d: first %s", cr.edit, u))
					}
				}
			}
			var want []string
			for _, st := range tt.steps {
				want = append(want, st.want...)
			}
			if !slices.Equal(got, want) {
				t.Errorf("credited\n\t%q\nwant\n\t%q", got, want)
			}
		})
	}
}

// TestSummary: a write's own result names its number; a late one's line
// names it before, once.
func TestSummary(t *testing.T) {
	one := []located{{uri: "a.py", d: diag(1, errSev, "", "x")}}
	for _, tc := range []struct {
		cr   credit
		n    int
		want string
	}{
		{credit{}, 3, "no new problems (edit #3)"},
		{credit{fixed: 2}, 3, "no new problems; fixed 2 problems (edit #3)"},
		{credit{news: one}, 3, "1 new problem introduced (edit #3):\nL"},
		{credit{news: one, fixed: 1}, 3, "1 new problem introduced (1 fixed; edit #3):\nL"},
		{credit{fixed: 2}, 0, "no new problems; fixed 2 problems"},
		{credit{news: one}, 0, "1 new problem introduced:\nL"},
	} {
		if got := summary(tc.cr, tc.n, "L"); got != tc.want {
			t.Errorf("summary(%+v, %d) = %q, want %q", tc.cr, tc.n, got, tc.want)
		}
	}
}
