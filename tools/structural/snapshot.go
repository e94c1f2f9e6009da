package structural

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"strconv"
	"strings"

	"berth.dev/berth/sealed"
	"berth.dev/berth/syntax"
)

// Caps and skips of an Engine's snapshot.
const (
	// MaxSnapshotBytes bounds the staged edits a snapshot keeps, as
	// encoded (an edit holds every file's content as staged, base64):
	// the newest edits that fit, then what accepts wrote to their files.
	// An edit left out is resolved after a restart as dropped, with a
	// message saying to stage it again.
	MaxSnapshotBytes = 32 << 20
	// RestoreIDSkip is how far edit ids jump at a restore, so that no id
	// the old berth process gave out after its last snapshot is given to
	// another edit: resolve of such an id says it was lost instead of
	// writing something else.
	RestoreIDSkip = 100
	// maxDoneKept bounds the resolved ids a snapshot remembers (newest
	// first), for resolve's "was already accepted" messages.
	maxDoneKept = 1024
	// maxSnapshotID bounds a snapshot's ids, far above any real run.
	maxSnapshotID = 1 << 40
)

// snapshotBytes is MaxSnapshotBytes, lowered by tests.
var snapshotBytes = MaxSnapshotBytes

// snapshotFormat names the snapshot's encoding; Restore refuses others.
const snapshotFormat = "berth.structural.v1"

// droppedState is the resolved state of a staged edit a snapshot had no
// room for.
var droppedState = fmt.Sprintf("dropped when berth restarted: the staged edits were larger than the %d MiB kept across a restart, so nothing of it was written; stage it again with ast_edit", MaxSnapshotBytes>>20)

// engineState is what a snapshot holds.
type engineState struct {
	NextID  int               `json:"next_id"`
	Pending []json.RawMessage `json:"pending"` // stagedEdit, oldest first
	Done    map[string]string `json:"done"`
	Written []writtenFile     `json:"written"`
}

// stagedEdit is a Proposal in a snapshot. Each file's new content is not
// kept: it is its old content with the edits applied, checked against
// NewHash.
type stagedEdit struct {
	ID           string         `json:"id"`
	Language     string         `json:"language"`
	Rules        []Rule         `json:"rules"`
	Replacements int            `json:"replacements"`
	Skipped      map[string]int `json:"skipped,omitempty"`
	Files        []stagedFile   `json:"files"`
}

type stagedFile struct {
	Path           string          `json:"path"`
	Old            []byte          `json:"old"`
	OldHash        string          `json:"old_sha256"`
	NewHash        string          `json:"new_sha256"`
	Mode           fs.FileMode     `json:"mode"`
	Replacements   int             `json:"replacements"`
	Edits          []syntax.Edit   `json:"edits"`
	SyntaxWarnings []SyntaxWarning `json:"syntax_warnings,omitempty"`
}

// writtenFile is one file's writeSteps.
type writtenFile struct {
	Path  string        `json:"path"`
	Steps []writtenStep `json:"steps"`
}

type writtenStep struct {
	ID    string        `json:"id"`
	From  string        `json:"from"`
	To    string        `json:"to"`
	Edits []syntax.Edit `json:"edits"`
}

// Generation counts the changes of the Engine's state that
// [Engine.Snapshot] reflects: staging an edit, resolving one, and what an
// accept records to carry later edits over it. Searches, refused
// arguments and reads do not change it. It is per Engine: compare it only
// with values from the same Engine.
func (e *Engine) Generation() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.gen
}

// Snapshot returns the Engine's staged edits for [Engine.Restore] on the
// Engine of a restarted berth: the id counter, each pending edit (an edit
// being resolved counts as pending: a restored accept checks it again)
// with its files' content as staged, the ids already resolved (the newest
// maxDoneKept), and what accepts wrote to the files of pending edits, so
// that they are still carried over those accepts. Staged edits over
// MaxSnapshotBytes are left out, oldest first, and resolve after a
// restore says they were dropped. The parse cache is not kept.
func (e *Engine) Snapshot() ([]byte, error) {
	e.mu.Lock()
	st := engineState{NextID: e.nextID, Done: map[string]string{}}
	var props []*Proposal
	for _, m := range []map[string]*Proposal{e.pending, e.resolving} {
		for _, p := range m {
			props = append(props, p)
		}
	}
	sort.Slice(props, func(i, j int) bool { return editNumber(props[i].ID) > editNumber(props[j].ID) }) // newest first
	written := map[string][]writeStep{}
	for _, p := range props {
		for _, f := range p.Files {
			if steps := e.written[f.Path]; len(steps) > 0 {
				written[f.Path] = slices.Clone(steps)
			}
		}
	}
	done := make([]string, 0, len(e.done))
	for id, state := range e.done {
		if _, resolving := e.resolving[id]; !resolving {
			done = append(done, id)
			st.Done[id] = state
		}
	}
	e.mu.Unlock()

	sort.Slice(done, func(i, j int) bool { return editNumber(done[i]) > editNumber(done[j]) })
	for _, id := range done[min(len(done), maxDoneKept):] {
		delete(st.Done, id)
	}
	// The newest edits first, then what was written to their files: an
	// edit whose file's record is left out is refused after a restart
	// when an accept changed the file, instead of carried over it.
	size := 0
	var paths []string
	for _, p := range props {
		b, err := json.Marshal(encodeProposal(p))
		if err != nil {
			return nil, fmt.Errorf("structural: snapshot of %s: %w", p.ID, err)
		}
		if size+len(b) > snapshotBytes {
			st.Done[p.ID] = droppedState
			continue
		}
		size += len(b)
		st.Pending = append(st.Pending, b)
		for _, f := range p.Files {
			if written[f.Path] != nil && !slices.Contains(paths, f.Path) {
				paths = append(paths, f.Path)
			}
		}
	}
	slices.Reverse(st.Pending) // oldest first
	slices.Sort(paths)
	for _, path := range paths {
		wf := writtenFile{Path: path, Steps: encodeSteps(written[path])}
		b, err := json.Marshal(wf)
		if err != nil {
			return nil, fmt.Errorf("structural: snapshot of %s: %w", path, err)
		}
		if size+len(b) > snapshotBytes {
			continue
		}
		size += len(b)
		st.Written = append(st.Written, wf)
	}
	b, err := sealed.Marshal(snapshotFormat, st)
	if err != nil {
		return nil, fmt.Errorf("structural: snapshot: %w", err)
	}
	return b, nil
}

// editNumber is the number of an id edit_N (0 for another string).
func editNumber(id string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(id, "edit_"))
	return n
}

func encodeProposal(p *Proposal) stagedEdit {
	se := stagedEdit{ID: p.ID, Language: p.Language, Rules: p.Rules, Replacements: p.Replacements, Skipped: p.Skipped}
	for _, f := range p.Files {
		nh := sha256.Sum256(f.New)
		se.Files = append(se.Files, stagedFile{
			Path: f.Path, Old: nonNil(f.Old), OldHash: hex.EncodeToString(f.OldHash[:]), NewHash: hex.EncodeToString(nh[:]),
			Mode: f.Mode, Replacements: f.Replacements, Edits: f.Edits, SyntaxWarnings: f.SyntaxWarnings,
		})
	}
	return se
}

func encodeSteps(steps []writeStep) []writtenStep {
	out := make([]writtenStep, len(steps))
	for i, s := range steps {
		out[i] = writtenStep{ID: s.id, From: hex.EncodeToString(s.from[:]), To: hex.EncodeToString(s.to[:]), Edits: s.edits}
	}
	return out
}

// Restore loads an [Engine.Snapshot] into an Engine fresh from
// [NewEngine], before it stages or resolves anything. Data that is not a
// whole, undamaged snapshot is refused with an error and leaves the Engine
// empty.
//
// After a restore, resolve accept of a restored edit checks every file
// against its content as staged, exactly as before the restart (a file
// changed meanwhile refuses the edit, unless the change is an accept of
// this run's, recorded before the restart or after, which the edit is
// carried over), and writes the same content. New ids continue
// RestoreIDSkip above the snapshot's, so no id is given out twice;
// resolve of an id in the skipped range says it was lost at the restart.
func (e *Engine) Restore(data []byte) error {
	r, err := decodeSnapshot(data)
	if err != nil {
		return fmt.Errorf("structural: restore: %w; the staged edits were not restored (stage them again with ast_edit)", err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.nextID != 0 || len(e.pending) > 0 || len(e.done) > 0 || len(e.written) > 0 {
		return errors.New("structural: restore: the engine is already in use: restore a snapshot into a new Engine, before it stages an edit")
	}
	e.nextID = r.nextID + RestoreIDSkip
	e.lostFrom, e.lostTo = r.nextID+1, e.nextID
	e.pending = r.pending
	e.done = r.done
	e.written = r.written
	e.gen++
	return nil
}

// restored is a decoded, checked snapshot.
type restored struct {
	nextID  int
	pending map[string]*Proposal
	done    map[string]string
	written map[string][]writeStep
}

// decodeSnapshot checks data and rebuilds its edits: every file's old
// content must have its hash, and its new content (old with the edits
// applied) the hash it had when staged.
func decodeSnapshot(data []byte) (*restored, error) {
	var st engineState
	if err := sealed.Unmarshal(data, snapshotFormat, &st); err != nil {
		return nil, err
	}
	if st.NextID < 0 || st.NextID > maxSnapshotID {
		return nil, fmt.Errorf("the snapshot's edit counter %d is out of range", st.NextID)
	}
	validID := func(id string) bool {
		n := editNumber(id)
		return id == "edit_"+strconv.Itoa(n) && n >= 1 && n <= st.NextID
	}
	r := &restored{nextID: st.NextID, pending: map[string]*Proposal{}, done: map[string]string{}, written: map[string][]writeStep{}}
	for id, state := range st.Done {
		if !validID(id) || state == "" {
			return nil, fmt.Errorf("the snapshot's resolved edit %q is out of range", id)
		}
		r.done[id] = state
	}
	for _, raw := range st.Pending {
		var se stagedEdit
		if err := json.Unmarshal(raw, &se); err != nil {
			return nil, fmt.Errorf("a staged edit of the snapshot is not readable: %w", err)
		}
		if !validID(se.ID) || r.pending[se.ID] != nil || r.done[se.ID] != "" {
			return nil, fmt.Errorf("the snapshot's staged edit %q is out of range or repeated", se.ID)
		}
		p, err := decodeProposal(se)
		if err != nil {
			return nil, fmt.Errorf("the snapshot's staged edit %s: %w", se.ID, err)
		}
		r.pending[se.ID] = p
	}
	for _, wf := range st.Written {
		if !validPath(wf.Path) || len(wf.Steps) > maxWriteSteps || r.written[wf.Path] != nil {
			return nil, fmt.Errorf("the snapshot's record of what was written to %q is out of range", wf.Path)
		}
		steps := make([]writeStep, len(wf.Steps))
		for i, ws := range wf.Steps {
			from, err1 := decodeHash(ws.From)
			to, err2 := decodeHash(ws.To)
			if err := errors.Join(err1, err2); err != nil || !validID(ws.ID) || !validEdits(ws.Edits, -1) {
				return nil, fmt.Errorf("the snapshot's record of %s writing %q is damaged", ws.ID, wf.Path)
			}
			steps[i] = writeStep{id: ws.ID, from: from, to: to, edits: ws.Edits}
		}
		r.written[wf.Path] = steps
	}
	return r, nil
}

// decodeProposal rebuilds a staged edit: its files' new content and diff,
// and its compiled rules (when they no longer compile, the edit is kept
// and only the diff of a refusal is missing).
func decodeProposal(se stagedEdit) (*Proposal, error) {
	if len(se.Rules) == 0 || len(se.Files) == 0 {
		return nil, errors.New("it has no rules or no files")
	}
	p := &Proposal{ID: se.ID, Language: se.Language, Pattern: se.Rules[0].Pattern, Rewrite: se.Rules[0].Rewrite, Rules: se.Rules,
		Replacements: se.Replacements, Skipped: se.Skipped}
	var diff strings.Builder
	for _, sf := range se.Files {
		oh, err1 := decodeHash(sf.OldHash)
		nh, err2 := decodeHash(sf.NewHash)
		switch {
		case !validPath(sf.Path):
			return nil, fmt.Errorf("file %q is not a workspace path", sf.Path)
		case errors.Join(err1, err2) != nil || sha256.Sum256(sf.Old) != oh:
			return nil, fmt.Errorf("%s: its content as staged does not match its hash", sf.Path)
		case sf.Mode&^fs.ModePerm != 0 || !validEdits(sf.Edits, len(sf.Old)):
			return nil, fmt.Errorf("%s: its mode or edits are out of range", sf.Path)
		}
		f := FileEdit{Path: sf.Path, Old: sf.Old, OldHash: oh, Mode: sf.Mode, Replacements: sf.Replacements, Edits: sf.Edits, SyntaxWarnings: sf.SyntaxWarnings}
		f.New = syntax.Apply(f.Old, f.Edits)
		if sha256.Sum256(f.New) != nh {
			return nil, fmt.Errorf("%s: its edits do not give the content staged", sf.Path)
		}
		p.Files = append(p.Files, f)
		diff.WriteString(UnifiedDiff(f.Path, f.Old, f.New, diffContext))
	}
	p.Diff = diff.String()
	p.lang, p.rules, p.rulesErr = recompile(se.Language, se.Rules)
	return p, nil
}

// recompile compiles a restored edit's rules again.
func recompile(language string, rs []Rule) (*syntax.Language, []*rule, error) {
	lang, err := syntax.Lookup(language)
	if err != nil {
		return nil, nil, fmt.Errorf("its language %q is not installed in this berth", language)
	}
	pat, err := syntax.Compile(lang, rs[0].Pattern)
	if err != nil {
		return nil, nil, fmt.Errorf("its pattern does not compile in this berth: %w", err)
	}
	rules, err := compileRules(&target{lang: lang, pat: pat}, rs)
	if err != nil {
		return nil, nil, fmt.Errorf("its rules do not compile in this berth: %w", err)
	}
	return lang, rules, nil
}

// validPath reports whether p is a workspace-relative path as staged.
func validPath(p string) bool { return p != "" && p != "." && fs.ValidPath(p) }

// validEdits reports whether edits are byte ranges within a content of
// size n (-1: unknown).
func validEdits(edits []syntax.Edit, n int) bool {
	for _, e := range edits {
		if e.StartByte < 0 || e.EndByte < e.StartByte || (n >= 0 && e.EndByte > n) {
			return false
		}
	}
	return true
}

func decodeHash(s string) ([sha256.Size]byte, error) {
	var h [sha256.Size]byte
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != sha256.Size {
		return h, fmt.Errorf("hash %q is not a SHA-256", s)
	}
	copy(h[:], b)
	return h, nil
}
