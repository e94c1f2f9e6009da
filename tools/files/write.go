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

const writeDescription = `Write a file of the workspace: create it, or replace its whole content. Missing parent directories are created; an existing file keeps its mode and owner.
To change part of a file prefer edit or apply_patch.`

const editDescription = `Replace text in a file of the workspace. old_string must match the file exactly (whitespace and indentation included) and occur exactly once, unless replace_all is set; include enough surrounding lines to make it unique. Read the file first.`

// WriteInput is the input of the write tool.
type WriteInput struct {
	Path    string `json:"path" jsonschema:"file to write, relative to the workspace or absolute inside it"`
	Content string `json:"content" jsonschema:"the complete new content of the file"`
}

// EditInput is the input of the edit tool.
type EditInput struct {
	Path       string `json:"path" jsonschema:"file to edit, relative to the workspace or absolute inside it"`
	OldString  string `json:"old_string" jsonschema:"the exact text to replace"`
	NewString  string `json:"new_string" jsonschema:"the text to put in its place"`
	ReplaceAll bool   `json:"replace_all,omitempty" jsonschema:"replace every occurrence instead of exactly one"`
}

func (w *workspace) write(ctx context.Context, in WriteInput) (*tools.Result, error) {
	name, err := w.rel(in.Path)
	if err != nil {
		return nil, err
	}
	if name == "." {
		return nil, tools.Fail("%s is the workspace directory, not a file: give a file path", w.root)
	}
	if len(in.Content) > sandbox.MaxFileSize {
		return nil, tools.Fail("content is %d bytes, more than the %d MiB this tool writes", len(in.Content), sandbox.MaxFileSize>>20)
	}
	verb := "created"
	old, err := w.fs.Lstat(ctx, name)
	switch {
	case err == nil:
		if err := wspath.Changeable(ctx, w.fs, name, old); err != nil {
			return nil, err
		}
		verb = fmt.Sprintf("overwrote (was %d bytes)", old.Size())
	case !errors.Is(err, fs.ErrNotExist):
		return nil, w.fsError(name, err)
	}
	if _, err := wspath.MkdirParents(ctx, w.fs, name); err != nil {
		return nil, err
	}
	if err := w.fs.WriteFile(ctx, name, []byte(in.Content), 0o644); err != nil {
		return nil, w.fsError(name, err)
	}
	res := tools.Textf("%s: %s, %d bytes, %s", name, verb, len(in.Content), plural(lineCount(in.Content), "line"))
	res.Touched = []string{name}
	return res, nil
}

func lineCount(s string) int {
	n := strings.Count(s, "\n")
	if s != "" && !strings.HasSuffix(s, "\n") {
		n++
	}
	return n
}

// maxListed bounds the line numbers an edit error lists.
const maxListed = 10

func (w *workspace) edit(ctx context.Context, in EditInput) (*tools.Result, error) {
	if in.OldString == "" {
		return nil, tools.Fail("old_string is empty: to create a file use write; to insert text, put a neighbouring line in old_string and the same line plus the new text in new_string")
	}
	if in.OldString == in.NewString {
		return nil, tools.Fail("old_string and new_string are the same, so there is nothing to change: give the new text in new_string")
	}
	name, err := w.rel(in.Path)
	if err != nil {
		return nil, err
	}
	data, _, err := wspath.ReadText(ctx, w.fs, name)
	if err != nil {
		return nil, err
	}
	text := string(data)
	oldS, newS := in.OldString, in.NewString
	count := strings.Count(text, oldS)
	if count == 0 && strings.Contains(text, "\r\n") && strings.Contains(oldS, "\n") {
		// The model saw the file without CRs: match and write CRLF.
		crOld := toCRLF(oldS)
		if c := strings.Count(text, crOld); c > 0 {
			oldS, newS, count = crOld, toCRLF(newS), c
		}
	}
	if count == 0 {
		msg := fmt.Sprintf("old_string was not found in %s. It must match the file exactly, including whitespace, indentation and line breaks", name)
		if lines := looseMatches(text, in.OldString); len(lines) > 0 {
			msg += fmt.Sprintf("; text that matches when whitespace is ignored starts at %s — read those lines and copy them exactly", lineList("line", lines))
		} else {
			msg += "; read the file again and copy the text you want to replace"
		}
		return nil, tools.Fail("%s", msg)
	}
	if count > 1 && !in.ReplaceAll {
		return nil, tools.Fail("old_string occurs %d times in %s (at %s): add surrounding lines to old_string so it matches exactly one place, or set replace_all to replace all %d",
			count, name, lineList("line", occurrenceLines(text, oldS)), count)
	}
	var out string
	var at []int // 1-based lines where replacements start in the new text
	if in.ReplaceAll {
		out = strings.ReplaceAll(text, oldS, newS)
	} else {
		out = strings.Replace(text, oldS, newS, 1)
	}
	at = occurrenceLinesAfterReplace(text, oldS, newS, count)
	if len(out) > sandbox.MaxFileSize {
		return nil, tools.Fail("the edited %s would be %d bytes, more than the %d MiB limit", name, len(out), sandbox.MaxFileSize>>20)
	}
	if err := w.fs.WriteFile(ctx, name, []byte(out), 0o644); err != nil {
		return nil, w.fsError(name, err)
	}
	res := tools.Textf("%s: %s at %s", name, plural(count, "replacement"), lineList("line", at))
	if count == 1 {
		res.AppendText(snippet(out, at[0], lineCount(newS)))
	}
	res.Touched = []string{name}
	return res, nil
}

func toCRLF(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\n", "\r\n")
}

// occurrenceLines returns the 1-based line of each occurrence of sub in s.
func occurrenceLines(s, sub string) []int {
	var lines []int
	line, pos := 1, 0
	for {
		i := strings.Index(s[pos:], sub)
		if i < 0 {
			return lines
		}
		line += strings.Count(s[pos:pos+i], "\n")
		lines = append(lines, line)
		line += strings.Count(sub, "\n")
		pos += i + len(sub)
	}
}

// occurrenceLinesAfterReplace returns the 1-based lines where the first n
// replacements of old by new start in the result.
func occurrenceLinesAfterReplace(s, old, new string, n int) []int {
	var lines []int
	line, pos := 1, 0
	for k := 0; k < n; k++ {
		i := strings.Index(s[pos:], old)
		if i < 0 {
			break
		}
		line += strings.Count(s[pos:pos+i], "\n")
		lines = append(lines, line)
		line += strings.Count(new, "\n")
		pos += i + len(old)
	}
	return lines
}

// lineList writes up to maxListed numbers as "lines 3, 7 and 9".
func lineList(word string, nums []int) string {
	if len(nums) == 1 {
		return fmt.Sprintf("%s %d", word, nums[0])
	}
	var parts []string
	for i, n := range nums {
		if i == maxListed {
			parts = append(parts, fmt.Sprintf("%d more", len(nums)-i))
			break
		}
		parts = append(parts, fmt.Sprint(n))
	}
	last := len(parts) - 1
	return word + "s " + strings.Join(parts[:last], ", ") + " and " + parts[last]
}

// looseMatches returns the 1-based lines where old matches text when every
// line is compared with its surrounding whitespace removed.
func looseMatches(text, old string) []int {
	want := strings.Split(strings.Trim(strings.ReplaceAll(old, "\r\n", "\n"), "\n"), "\n")
	for i := range want {
		want[i] = strings.TrimSpace(want[i])
	}
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	var found []int
	for i := 0; i+len(want) <= len(lines); i++ {
		ok := true
		for j := range want {
			if strings.TrimSpace(lines[i+j]) != want[j] {
				ok = false
				break
			}
		}
		if ok {
			found = append(found, i+1)
		}
	}
	return found
}

// snippetContext is how many unchanged lines a snippet shows around a change.
const (
	snippetContext  = 2
	maxSnippetLines = 30
)

// snippet shows lines of text around a change that starts at the 1-based
// line start and spans n lines, numbered like read.
func snippet(text string, start, n int) string {
	lines := strings.Split(text, "\n")
	from := max(start-snippetContext, 1)
	to := min(start+max(n, 1)-1+snippetContext, len(lines))
	if strings.HasSuffix(text, "\n") && to == len(lines) {
		to-- // the empty string after the final newline is no line
	}
	var b strings.Builder
	for i := from; i <= to && i-from < maxSnippetLines; i++ {
		fmt.Fprintf(&b, "%6d\t%s\n", i, truncate(strings.TrimSuffix(lines[i-1], "\r"), MaxLineChars))
	}
	return strings.TrimSuffix(b.String(), "\n")
}
