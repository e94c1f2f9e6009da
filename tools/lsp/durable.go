package lsp

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"

	lspc "berth.dev/berth/lsp"
	"berth.dev/berth/tools"
)

// Across berth's restarts: a language server's stdio ends with the berth
// that started it, so a restarted berth starts its servers again (their
// indexes are rebuilt). What diagnostics on write compares against — the
// journal of what each server reported last (LSP-4) — is kept: Snapshot
// and Restore carry it over, and a server started after Restore is judged
// against it, not against a fresh baseline, as if berth had never gone.

// restartNote opens the first lsp or lsp_rename result after a Restore.
const restartNote = "note: berth restarted; the language servers start again (their indexes are rebuilt, so the first answers may take longer); the diagnostics journal was kept, so diagnostics on write still report only problems new since before the restart"

// journalEntry is one count of a journal in a snapshot: in file uri, count
// diagnostics of a key ("" uri: the total over all files).
type journalEntry struct {
	URI      string `json:"uri,omitempty"`
	Severity int    `json:"severity"`
	Code     string `json:"code,omitempty"`
	Message  string `json:"message"`
	Count    int    `json:"count"`
}

// journalSnapshot is one server's journal.
type journalSnapshot struct {
	ID      string         `json:"id"`
	Root    string         `json:"root"`
	Entries []journalEntry `json:"entries"`
}

// Generation changes whenever a journal does, so that the owner of the
// run's store rewrites the Snapshot only then.
func (s *Supervisor) Generation() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen
}

// Snapshot returns the diagnostics journals of the run's servers, for
// Restore in a restarted berth.
func (s *Supervisor) Snapshot() ([]byte, error) {
	s.mu.Lock()
	out := make([]journalSnapshot, 0, len(s.journal))
	for k, j := range s.journal {
		js := journalSnapshot{ID: k.id, Root: k.root, Entries: []journalEntry{}}
		add := func(uri string, m map[diagKey]int) {
			for dk, n := range m {
				js.Entries = append(js.Entries, journalEntry{URI: uri, Severity: int(dk.severity), Code: dk.code, Message: dk.message, Count: n})
			}
		}
		add("", j.known)
		for uri, m := range j.files {
			add(uri, m)
		}
		out = append(out, js)
	}
	s.mu.Unlock()
	sort.Slice(out, func(a, b int) bool {
		return out[a].ID+"\x00"+out[a].Root < out[b].ID+"\x00"+out[b].Root
	})
	for _, js := range out {
		sort.Slice(js.Entries, func(a, b int) bool {
			x, y := js.Entries[a], js.Entries[b]
			if x.URI != y.URI {
				return x.URI < y.URI
			}
			if x.Message != y.Message {
				return x.Message < y.Message
			}
			return x.Code < y.Code
		})
	}
	return json.Marshal(out)
}

// Restore loads a Snapshot into a supervisor before its first call; the
// first lsp or lsp_rename result after it says that berth restarted.
func (s *Supervisor) Restore(data []byte) error {
	var in []journalSnapshot
	if err := json.Unmarshal(data, &in); err != nil {
		return fmt.Errorf("lsp: the stored diagnostics journal is unreadable (%v); diagnostics on write starts from a fresh baseline", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, js := range in {
		j := newJournal()
		for _, e := range js.Entries {
			if e.Count <= 0 {
				continue
			}
			dk := diagKey{severity: lspc.DiagnosticSeverity(e.Severity), code: e.Code, message: e.Message}
			if e.URI == "" {
				j.known[dk] = e.Count
				continue
			}
			if j.files[e.URI] == nil {
				j.files[e.URI] = map[diagKey]int{}
			}
			j.files[e.URI][dk] = e.Count
			j.seen[e.URI] = true
		}
		s.journal[key{id: js.ID, root: js.Root}] = j
		s.kept[key{id: js.ID, root: js.Root}] = true
	}
	s.restarted = true
	s.gen++
	return nil
}

// noteRestart keeps n, which says a server was started again after
// berth's connection to it broke, for the next result.
func (s *Supervisor) noteRestart(n string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.restartNotes = append(s.restartNotes, n)
}

// noted prepends restartNote to the first result after a Restore, the
// note of a query that had to walk the workspace (a watch that could not
// start, overflowed or ended), why a server asked for as the run
// opened was not started (Prewarm), and which servers were started again
// after berth's connection to them broke (noteRestart).
func noted[In any](s *Supervisor, h func(context.Context, In) (*tools.Result, error)) func(context.Context, In) (*tools.Result, error) {
	return func(ctx context.Context, in In) (*tools.Result, error) {
		res, err := h(ctx, in)
		if res == nil {
			return res, err
		}
		s.mu.Lock()
		first := s.restarted
		s.restarted = false
		walked := s.walkNote
		s.walkNote = ""
		prewarmed := s.takePrewarmNotesLocked()
		restarted := s.restartNotes
		s.restartNotes = nil
		s.mu.Unlock()
		for _, n := range slices.Backward(restarted) {
			res.Content = append([]tools.Content{{Type: "text", Text: n}}, res.Content...)
		}
		for _, n := range slices.Backward(prewarmed) {
			res.Content = append([]tools.Content{{Type: "text", Text: n}}, res.Content...)
		}
		if walked != "" {
			res.Content = append([]tools.Content{{Type: "text", Text: walked}}, res.Content...)
		}
		if first {
			res.Content = append([]tools.Content{{Type: "text", Text: restartNote}}, res.Content...)
		}
		return res, err
	}
}
