package files

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"unicode/utf8"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
	wspath "berth.dev/berth/tools/workspace"
)

const readDescription = `Read a text file of the workspace, or list a directory.
Lines come numbered like cat -n (line number, tab, text). By default the first 2000 lines are returned; for longer files pass offset (1-based first line) and limit (number of lines) to read further. Lines longer than 2000 characters are cut. Binary files are refused.
The path is relative to the workspace or absolute inside it.`

// ReadInput is the input of the read tool.
type ReadInput struct {
	Path   string `json:"path" jsonschema:"file or directory to read, relative to the workspace or absolute inside it"`
	Offset int    `json:"offset,omitempty" jsonschema:"first line to return, 1-based (default 1)"`
	Limit  int    `json:"limit,omitempty" jsonschema:"how many lines to return (default 2000)"`
}

func (w *workspace) read(ctx context.Context, in ReadInput) (*tools.Result, error) {
	if in.Offset < 0 || in.Limit < 0 {
		return nil, tools.Fail("offset and limit must not be negative: offset is the 1-based first line, limit the number of lines")
	}
	name, err := w.rel(in.Path)
	if err != nil {
		return nil, err
	}
	fi, err := w.fs.Stat(ctx, name)
	if err != nil {
		return nil, w.fsError(name, err)
	}
	if fi.IsDir() {
		return w.list(ctx, name)
	}
	if !fi.Mode().IsRegular() {
		return nil, tools.Fail("%s is not a regular file (%s) and cannot be read", name, fi.Mode().Type())
	}
	if err := wspath.SingleLink(name, fi, "read"); err != nil {
		return nil, err
	}
	data, err := w.fs.ReadFile(ctx, name)
	if err != nil {
		return nil, w.fsError(name, err)
	}
	if wspath.IsBinary(data) {
		return nil, tools.Fail("%s is a binary file (%d bytes) and is not shown: inspect it with a shell command (file, xxd | head) if you need to", name, len(data))
	}
	text, err := numbered(name, string(data), in.Offset, in.Limit)
	if err != nil {
		return nil, err
	}
	return tools.Text(text), nil
}

// numbered renders lines offset..offset+limit-1 of text like cat -n, with a
// note on how to read more.
func numbered(name, text string, offset, limit int) (string, error) {
	if text == "" {
		return fmt.Sprintf("%s is empty (0 bytes)", name), nil
	}
	if offset == 0 {
		offset = 1
	}
	if limit == 0 {
		limit = DefaultReadLines
	}
	lines := strings.Split(text, "\n")
	if strings.HasSuffix(text, "\n") {
		lines = lines[:len(lines)-1]
	}
	total := len(lines)
	if offset > total {
		return "", tools.Fail("%s has %s; offset %d is past the end: read from offset 1", name, plural(total, "line"), offset)
	}
	crlf := strings.Count(text, "\r\n")*2 > strings.Count(text, "\n")

	var b strings.Builder
	last := offset - 1 // the last line written
	cut := 0           // lines whose text was cut
	for i := offset - 1; i < total && i < offset-1+limit; i++ {
		line := strings.TrimSuffix(lines[i], "\r")
		if len(line) > MaxLineChars {
			line = truncate(line, MaxLineChars) + " … [line cut]"
			cut++
		}
		entry := fmt.Sprintf("%6d\t%s\n", i+1, line)
		if b.Len()+len(entry) > MaxReadChars && last >= offset {
			break
		}
		b.WriteString(entry)
		last = i + 1
	}
	var notes []string
	if crlf {
		notes = append(notes, "the file has CRLF line endings (shown without the CR)")
	}
	if cut > 0 {
		notes = append(notes, fmt.Sprintf("%s longer than %d characters were cut", plural(cut, "line"), MaxLineChars))
	}
	if last < total {
		notes = append(notes, fmt.Sprintf("showing lines %d-%d of %d; call read with offset=%d to read more", offset, last, total, last+1))
	}
	if len(notes) > 0 {
		b.WriteString("[" + strings.Join(notes, "; ") + "]\n")
	}
	return b.String(), nil
}

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// list renders a directory listing.
func (w *workspace) list(ctx context.Context, name string) (*tools.Result, error) {
	ents, err := w.fs.ReadDir(ctx, name)
	if err != nil {
		return nil, w.fsError(name, err)
	}
	title := name
	if name == "." {
		title = w.root
	}
	var b strings.Builder
	fmt.Fprintf(&b, "directory %s (%s):\n", title, plural(len(ents), "entry"))
	for i, e := range ents {
		if i == MaxListEntries {
			fmt.Fprintf(&b, "[%d more entries not shown: list a subdirectory, or use a shell command such as ls or find]\n", len(ents)-i)
			break
		}
		switch t := e.Type(); {
		case t.IsDir():
			b.WriteString(e.Name() + "/\n")
		case t&fs.ModeSymlink != 0:
			b.WriteString(e.Name() + " (symbolic link" + linkKind(ctx, w, path.Join(name, e.Name())) + ")\n")
		default:
			b.WriteString(e.Name() + "\n")
		}
	}
	if len(ents) == 0 {
		b.WriteString("(empty)\n")
	}
	return tools.Text(strings.TrimSuffix(b.String(), "\n")), nil
}

// linkKind says where the symbolic link name leads, as far as the workspace
// can tell.
func linkKind(ctx context.Context, w *workspace, name string) string {
	fi, err := w.fs.Stat(ctx, name)
	switch {
	case err == nil && fi.IsDir():
		return " to a directory"
	case err == nil:
		return " to a file"
	case errors.Is(err, fs.ErrNotExist):
		return ", dangling"
	case errors.Is(err, sandbox.ErrEscape):
		return ", leads outside the workspace"
	default:
		return ", unusable"
	}
}
