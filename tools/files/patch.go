package files

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
	wspath "berth.dev/berth/tools/workspace"
)

const patchDescription = `Apply a patch that adds, updates, moves and deletes files of the workspace, all or nothing. Format:
*** Begin Patch
*** Add File: path/new.go
+every line of the new file, prefixed with +
*** Update File: path/old.go
*** Move to: path/renamed.go   (optional)
@@ func example()              (optional: a line just before the change, to locate it)
 an unchanged context line (prefixed with a space)
-a removed line
+an added line
*** Delete File: path/gone.go
*** End Patch
Give about 3 context lines around each change, hunks of a file in file order. If any file fails, nothing is written.`

// PatchInput is the input of the apply_patch tool.
type PatchInput struct {
	Patch string `json:"patch" jsonschema:"the patch text, from *** Begin Patch to *** End Patch"`
}

// Markers of the patch format.
const (
	beginPatch = "*** Begin Patch"
	endPatch   = "*** End Patch"
	addFile    = "*** Add File: "
	updateFile = "*** Update File: "
	deleteFile = "*** Delete File: "
	moveTo     = "*** Move to: "
	endOfFile  = "*** End of File"
)

type opKind int

const (
	opAdd opKind = iota
	opUpdate
	opDelete
)

// fileOp is one file section of a patch.
type fileOp struct {
	kind   opKind
	path   string // as written in the patch
	moveTo string // for opUpdate; empty when the file stays
	line   int    // line of the section header in the patch; 0 outside a patch
	add    []string
	hunks  []hunk
}

// where prefixes a message about op with its patch line, if it has one.
func (op *fileOp) where() string {
	if op.line == 0 {
		return ""
	}
	return fmt.Sprintf("patch line %d: ", op.line)
}

// hunk is one change of an updated file.
type hunk struct {
	anchors []string // the text of @@ lines, located before the change
	lines   []hunkLine
	eof     bool // the change ends at the end of the file
	line    int  // line of the hunk's start in the patch
}

type hunkLine struct {
	kind byte // ' ', '-' or '+'
	text string
}

func isSectionHeader(l string) bool {
	return strings.HasPrefix(l, addFile) || strings.HasPrefix(l, updateFile) ||
		strings.HasPrefix(l, deleteFile) || strings.TrimSpace(l) == endPatch
}

// parsePatch parses the whole patch text.
func parsePatch(text string) ([]*fileOp, error) {
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	first, last := 0, len(lines)-1
	for first <= last && strings.TrimSpace(lines[first]) == "" {
		first++
	}
	for last >= first && strings.TrimSpace(lines[last]) == "" {
		last--
	}
	if first > last || strings.TrimSpace(lines[first]) != beginPatch {
		return nil, tools.Fail("the patch must start with the line %q", beginPatch)
	}
	if strings.TrimSpace(lines[last]) != endPatch || last == first {
		return nil, tools.Fail("the patch must end with the line %q", endPatch)
	}
	var ops []*fileOp
	i := first + 1
	for i < last {
		l := lines[i]
		ln := i + 1
		switch {
		case strings.TrimSpace(l) == "":
			i++
		case strings.HasPrefix(l, addFile):
			op := &fileOp{kind: opAdd, path: strings.TrimSpace(l[len(addFile):]), line: ln}
			i++
			blanks := 0
			for ; i < last && !isSectionHeader(lines[i]); i++ {
				switch {
				case strings.HasPrefix(lines[i], "+"):
					for ; blanks > 0; blanks-- {
						op.add = append(op.add, "")
					}
					op.add = append(op.add, lines[i][1:])
				case lines[i] == "":
					blanks++ // an empty line whose + was dropped, unless trailing
				default:
					return nil, tools.Fail("patch line %d: every line of an added file starts with +, found %q (in *** Add File: %s)", i+1, lines[i], op.path)
				}
			}
			ops = append(ops, op)
		case strings.HasPrefix(l, deleteFile):
			ops = append(ops, &fileOp{kind: opDelete, path: strings.TrimSpace(l[len(deleteFile):]), line: ln})
			i++
		case strings.HasPrefix(l, updateFile):
			op := &fileOp{kind: opUpdate, path: strings.TrimSpace(l[len(updateFile):]), line: ln}
			i++
			if i < last && strings.HasPrefix(lines[i], moveTo) {
				op.moveTo = strings.TrimSpace(lines[i][len(moveTo):])
				i++
			}
			var err error
			i, err = parseHunks(lines, i, last, op)
			if err != nil {
				return nil, err
			}
			if len(op.hunks) == 0 && op.moveTo == "" {
				return nil, tools.Fail("patch line %d: *** Update File: %s has no hunks: add lines starting with space, - or +", ln, op.path)
			}
			ops = append(ops, op)
		case strings.TrimSpace(l) == endPatch:
			return nil, tools.Fail("patch line %d: %q comes before the end of the patch: give one patch per call, ending with %q", ln, endPatch, endPatch)
		default:
			return nil, tools.Fail("patch line %d: expected *** Add File:, *** Update File: or *** Delete File:, found %q", ln, l)
		}
	}
	if len(ops) == 0 {
		return nil, tools.Fail("the patch changes no file: put *** Add File:, *** Update File: or *** Delete File: sections between %q and %q", beginPatch, endPatch)
	}
	for _, op := range ops {
		if op.path == "" {
			return nil, tools.Fail("patch line %d: the file path is missing", op.line)
		}
	}
	return ops, nil
}

// parseHunks reads the hunks of op from lines[i:last] and returns the index
// of the next section.
func parseHunks(lines []string, i, last int, op *fileOp) (int, error) {
	var cur *hunk
	start := func(ln int) {
		if cur == nil || len(cur.lines) > 0 || cur.eof {
			op.hunks = append(op.hunks, hunk{line: ln})
			cur = &op.hunks[len(op.hunks)-1]
		}
	}
	for ; i < last && !isSectionHeader(lines[i]); i++ {
		l, ln := lines[i], i+1
		switch {
		case strings.HasPrefix(l, "@@"):
			start(ln)
			if a := strings.TrimSpace(strings.Trim(strings.TrimSpace(l), "@")); a != "" {
				cur.anchors = append(cur.anchors, a)
			}
		case strings.TrimSpace(l) == endOfFile:
			if cur == nil || len(cur.lines) == 0 {
				return 0, tools.Fail("patch line %d: %q must follow the lines of a hunk (in *** Update File: %s)", ln, endOfFile, op.path)
			}
			cur.eof = true
		case strings.HasPrefix(l, moveTo):
			return 0, tools.Fail("patch line %d: %q must come right after *** Update File: %s", ln, strings.TrimSpace(moveTo), op.path)
		case l == "" || l[0] == ' ' || l[0] == '-' || l[0] == '+':
			if cur == nil || cur.eof {
				start(ln)
			}
			if l == "" {
				cur.lines = append(cur.lines, hunkLine{' ', ""}) // a context line whose space was dropped
			} else {
				cur.lines = append(cur.lines, hunkLine{l[0], l[1:]})
			}
		default:
			return 0, tools.Fail("patch line %d: lines of a hunk start with a space (context), - (removed) or + (added), found %q (in *** Update File: %s)", ln, l, op.path)
		}
	}
	// Trailing empty context lines are usually blank lines between sections.
	for h := range op.hunks {
		hl := op.hunks[h].lines
		for len(hl) > 0 && hl[len(hl)-1] == (hunkLine{' ', ""}) {
			hl = hl[:len(hl)-1]
		}
		op.hunks[h].lines = hl
		if len(hl) == 0 {
			return 0, tools.Fail("patch line %d: a hunk of *** Update File: %s has no lines", op.hunks[h].line, op.path)
		}
	}
	return i, nil
}

// applyHunks applies the hunks of the file name to text.
func applyHunks(name string, text string, hunks []hunk) (string, error) {
	lines := strings.Split(text, "\n")
	trailingNL := strings.HasSuffix(text, "\n")
	if trailingNL || text == "" {
		lines = lines[:len(lines)-1]
	}
	crlf := strings.Count(text, "\r\n")*2 > strings.Count(text, "\n")
	cursor := 0
	for hi, h := range hunks {
		label := fmt.Sprintf("hunk %d of %s (patch line %d)", hi+1, name, h.line)
		for _, a := range h.anchors {
			idx := seek(lines, []string{a}, cursor, trimBoth)
			if idx < 0 {
				return "", tools.Fail("%s did not apply: its @@ line %q was not found in %s%s: use a line that exists in the file, or leave the text after @@ empty",
					label, a, name, afterLine(cursor))
			}
			cursor = idx + 1
		}
		var old []string
		for _, l := range h.lines {
			if l.kind != '+' {
				old = append(old, l.text)
			}
		}
		pos := -1
		switch {
		case len(old) == 0 && len(h.anchors) > 0:
			pos = cursor
		case len(old) == 0:
			pos = len(lines)
		default:
			if h.eof {
				if p := len(lines) - len(old); p >= cursor {
					for _, eq := range []func(a, b string) bool{exact, trimRight} {
						if seek(lines[:p+len(old)], old, p, eq) == p {
							pos = p
							break
						}
					}
				}
			}
			if pos < 0 {
				pos = seek(lines, old, cursor, exact)
			}
			if pos < 0 {
				pos = seek(lines, old, cursor, trimRight)
			}
		}
		if pos < 0 {
			return "", hunkError(label, name, lines, old, cursor)
		}
		var repl []string
		k := pos
		for _, l := range h.lines {
			switch l.kind {
			case ' ':
				repl = append(repl, lines[k]) // keep the file's own text
				k++
			case '-':
				k++
			case '+':
				t := l.text
				if crlf {
					t += "\r"
				}
				repl = append(repl, t)
			}
		}
		tail := append(repl, lines[pos+len(old):]...)
		lines = append(lines[:pos:pos], tail...)
		cursor = pos + len(repl)
	}
	if len(lines) == 0 {
		return "", nil
	}
	out := strings.Join(lines, "\n")
	if trailingNL || text == "" {
		out += "\n"
	}
	return out, nil
}

func exact(a, b string) bool { return a == b }
func trimRight(a, b string) bool {
	return strings.TrimRight(a, " \t\r") == strings.TrimRight(b, " \t\r")
}
func trimBoth(a, b string) bool { return strings.TrimSpace(a) == strings.TrimSpace(b) }

// seek returns the first index >= from where want matches lines, or -1.
func seek(lines, want []string, from int, eq func(a, b string) bool) int {
	for i := from; i+len(want) <= len(lines); i++ {
		ok := true
		for j := range want {
			if !eq(lines[i+j], want[j]) {
				ok = false
				break
			}
		}
		if ok {
			return i
		}
	}
	return -1
}

func afterLine(cursor int) string {
	if cursor == 0 {
		return ""
	}
	return fmt.Sprintf(" after line %d", cursor)
}

// maxShownHunkLines bounds the lines a failed hunk's error repeats.
const maxShownHunkLines = 8

func hunkError(label, name string, lines, old []string, cursor int) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s did not apply: its context and - lines were not found in %s%s", label, name, afterLine(cursor))
	if cursor > 0 && seek(lines, old, 0, trimRight) >= 0 {
		b.WriteString(" (they occur earlier: list the hunks of a file in file order)")
	} else if first := seek(lines, old[:1], 0, trimBoth); first >= 0 {
		fmt.Fprintf(&b, " (its first line %q matches line %d, but the following lines differ)", old[0], first+1)
	}
	b.WriteString(". The lines looked for:\n")
	for i, l := range old {
		if i == maxShownHunkLines {
			fmt.Fprintf(&b, "… %d more\n", len(old)-i)
			break
		}
		b.WriteString(l + "\n")
	}
	fmt.Fprintf(&b, "Read %s again and copy the context and - lines exactly. No file was changed.", name)
	return tools.Fail("%s", b.String())
}

// change is the planned effect of one fileOp.
type change struct {
	op      *fileOp
	name    string // workspace name of op.path
	dest    string // workspace name after a move; equals name otherwise
	old     []byte // content before (update, delete)
	oldInfo fs.FileInfo
	new     []byte // content after (add, update)
	added   int
	removed int
}

func (w *workspace) applyPatch(ctx context.Context, in PatchInput) (*tools.Result, error) {
	ops, err := parsePatch(in.Patch)
	if err != nil {
		return nil, err
	}
	changes, err := w.plan(ctx, ops)
	if err != nil {
		return nil, err
	}
	if err := w.verify(ctx, changes); err != nil {
		return nil, err
	}
	if err := w.commit(ctx, changes); err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "applied the patch to %s:", plural(len(changes), "file"))
	var touched []string
	for _, c := range changes {
		switch c.op.kind {
		case opAdd:
			fmt.Fprintf(&b, "\nA %s (+%d)", c.name, c.added)
			touched = append(touched, c.name)
		case opDelete:
			fmt.Fprintf(&b, "\nD %s", c.name)
			touched = append(touched, c.name)
		case opUpdate:
			if c.dest != c.name {
				fmt.Fprintf(&b, "\nM %s (moved from %s, +%d -%d)", c.dest, c.name, c.added, c.removed)
				touched = append(touched, c.name, c.dest)
			} else {
				fmt.Fprintf(&b, "\nM %s (+%d -%d)", c.name, c.added, c.removed)
				touched = append(touched, c.name)
			}
		}
	}
	res := tools.Text(b.String())
	res.Touched = touched
	return res, nil
}

// plan resolves every path and computes every new content in memory.
func (w *workspace) plan(ctx context.Context, ops []*fileOp) ([]*change, error) {
	claimed := map[string]int{} // workspace name -> patch line of the section using it
	claim := func(name string, op *fileOp) error {
		if ln, dup := claimed[name]; dup {
			return tools.Fail("patch line %d: %s is already changed by the section at patch line %d: put all changes of a file in one section", op.line, name, ln)
		}
		claimed[name] = op.line
		return nil
	}
	var changes []*change
	for _, op := range ops {
		name, err := w.rel(op.path)
		if err != nil {
			return nil, err
		}
		if name == "." {
			return nil, tools.Fail("patch line %d: %s is the workspace directory, not a file", op.line, op.path)
		}
		if err := claim(name, op); err != nil {
			return nil, err
		}
		c := &change{op: op, name: name, dest: name}
		switch op.kind {
		case opAdd:
			if err := w.mustNotExist(ctx, name, op, "*** Update File:"); err != nil {
				return nil, err
			}
			c.new = []byte(strings.Join(op.add, "\n"))
			if len(op.add) > 0 {
				c.new = append(c.new, '\n')
			}
			c.added = len(op.add)
		case opDelete:
			if c.old, c.oldInfo, err = w.readPatchTarget(ctx, name, op); err != nil {
				return nil, err
			}
		case opUpdate:
			if c.old, c.oldInfo, err = w.readPatchTarget(ctx, name, op); err != nil {
				return nil, err
			}
			out, err := applyHunks(name, string(c.old), op.hunks)
			if err != nil {
				return nil, err
			}
			c.new = []byte(out)
			for _, h := range op.hunks {
				for _, l := range h.lines {
					switch l.kind {
					case '+':
						c.added++
					case '-':
						c.removed++
					}
				}
			}
			if op.moveTo != "" {
				dest, err := w.rel(op.moveTo)
				if err != nil {
					return nil, err
				}
				if dest == "." {
					return nil, tools.Fail("patch line %d: cannot move %s onto the workspace directory", op.line, name)
				}
				if dest != name {
					if err := claim(dest, op); err != nil {
						return nil, err
					}
					if err := w.mustNotExist(ctx, dest, op, "another *** Move to: path"); err != nil {
						return nil, err
					}
					c.dest = dest
				}
			}
		}
		if len(c.new) > sandbox.MaxFileSize {
			return nil, tools.Fail("patch line %d: %s would be %d bytes, more than the %d MiB limit", op.line, c.dest, len(c.new), sandbox.MaxFileSize>>20)
		}
		changes = append(changes, c)
	}
	return changes, nil
}

func (w *workspace) readPatchTarget(ctx context.Context, name string, op *fileOp) ([]byte, fs.FileInfo, error) {
	data, fi, err := wspath.ReadText(ctx, w.fs, name)
	if err != nil {
		var te *tools.Error
		if errors.As(err, &te) {
			return nil, nil, tools.Fail("patch line %d: %s. No file was changed.", op.line, te.Msg)
		}
		return nil, nil, err
	}
	return data, fi, nil
}

// mustNotExist fails when name exists (as anything, a dangling link too).
func (w *workspace) mustNotExist(ctx context.Context, name string, op *fileOp, instead string) error {
	return wspath.MustNotExist(ctx, w.fs, name, op.where(), instead)
}

// commitChanges are changes as the workspace's multi-file commit takes them.
func commitChanges(changes []*change) []wspath.Change {
	out := make([]wspath.Change, len(changes))
	for i, c := range changes {
		wc := wspath.Change{Path: c.name, Where: c.op.where()}
		switch c.op.kind {
		case opAdd:
			wc.New = c.new
		case opDelete:
			wc.Old = c.old
		case opUpdate:
			wc.Old, wc.New = c.old, c.new
			if c.dest != c.name {
				wc.MoveTo = c.dest
			}
		}
		// Old nil means create and New nil delete: an empty file is
		// neither.
		if c.op.kind != opAdd && wc.Old == nil {
			wc.Old = []byte{}
		}
		if c.op.kind != opDelete && wc.New == nil {
			wc.New = []byte{}
		}
		wc.Perm = 0o644
		if c.oldInfo != nil {
			wc.Perm = c.oldInfo.Mode().Perm()
		}
		out[i] = wc
	}
	return out
}

// verify checks that no file changed on disk since plan read it.
func (w *workspace) verify(ctx context.Context, changes []*change) error {
	return wspath.Verify(ctx, w.fs, commitChanges(changes))
}

// commit writes every change. When one fails it undoes the changes already
// made, newest first, and reports both.
func (w *workspace) commit(ctx context.Context, changes []*change) error {
	return wspath.Write(ctx, w.fs, commitChanges(changes), wspath.WriteOptions{})
}
