package permission

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxDetailBytes bounds the text of a call shown on a permission card. A
// call whose rendering is larger cannot be shown whole, so its card says so
// and can only be denied. 256 KiB holds any cell, patch or file a person
// would read before approving it.
const MaxDetailBytes = 256 << 10

// maxPreviewBytes bounds the beginning of a too-large call shown on its
// card, so the operator knows what they are denying.
const maxPreviewBytes = 4 << 10

// blockPrefix starts every line of a multi-line value on a card, so that
// text inside a value can never pass for one of the card's own headings.
const blockPrefix = "│ "

// Detail renders a call of tool for a permission card, whole: for eval the
// cell's code (with its language and description), for apply_patch the
// patch, for write the path and content, for edit the path and the old and
// new strings, for debug the operation and its arguments, for lsp_rename
// the file, line, symbol and new name, otherwise the arguments as indented
// JSON. Multi-line values are set off line by line with "│ ", and control
// and invisible format characters (bidirectional overrides, zero-width
// spaces) are shown escaped, so nothing in the call can hide from the
// operator. tooLarge reports that the rendering is longer than
// MaxDetailBytes: text then says the call cannot be shown whole and shows
// only its beginning, and the call must not be approved.
func Detail(tool string, args json.RawMessage) (text string, tooLarge bool) {
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	var b strings.Builder
	if !render(&b, tool, args) {
		b.Reset()
		b.WriteString("arguments:\n")
		block(&b, prettyJSON(args))
	}
	text = strings.TrimSuffix(b.String(), "\n")
	if len(text) <= MaxDetailBytes {
		return text, false
	}
	cut := maxPreviewBytes
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return fmt.Sprintf("this call is %d bytes and cannot be shown whole, so it can only be denied (a card shows at most %d KiB); its beginning:\n%s\n…", len(args), MaxDetailBytes>>10, text[:cut]), true
}

// The fields of the tools a card renders specially, with the same JSON
// names as the tools' own inputs. Arguments that do not decode strictly
// into them are shown as JSON instead.
type (
	evalArgs struct {
		Code        string `json:"code"`
		Description string `json:"description"`
		Language    string `json:"language"`
		Reset       bool   `json:"reset"`
	}
	patchArgs struct {
		Patch string `json:"patch"`
	}
	writeArgs struct {
		Path    string `json:"path"`
		Content string `json:"content"`
	}
	editArgs struct {
		Path       string `json:"path"`
		OldString  string `json:"old_string"`
		NewString  string `json:"new_string"`
		ReplaceAll bool   `json:"replace_all"`
	}
	renameArgs struct {
		File    string `json:"file"`
		Line    int    `json:"line"`
		Symbol  string `json:"symbol"`
		NewName string `json:"new_name"`
	}
	debugArgs struct {
		Op          string            `json:"op"`
		Adapter     string            `json:"adapter"`
		File        string            `json:"file"`
		Lines       json.RawMessage   `json:"lines"`
		Program     string            `json:"program"`
		Module      string            `json:"module"`
		Args        []string          `json:"args"`
		Cwd         string            `json:"cwd"`
		Env         map[string]string `json:"env"`
		StopOnEntry bool              `json:"stop_on_entry"`
		Port        int               `json:"port"`
		ThreadID    int               `json:"thread_id"`
		FrameID     int               `json:"frame_id"`
		Reference   int               `json:"reference"`
		Start       int               `json:"start"`
		Expression  string            `json:"expression"`
	}
)

// render writes the special rendering of tool's arguments, reporting false
// when the tool has none or the arguments do not fit its fields.
func render(b *strings.Builder, tool string, args json.RawMessage) bool {
	switch tool {
	case "eval":
		var a evalArgs
		if !strict(args, &a) {
			return false
		}
		lang := a.Language
		if lang == "" {
			lang = "python (the default)"
		}
		field(b, "language", lang)
		field(b, "description", a.Description)
		if a.Reset {
			field(b, "reset", "true (the kernel restarts clean first)")
		}
		text(b, "code", a.Code)
	case "apply_patch":
		var a patchArgs
		if !strict(args, &a) {
			return false
		}
		text(b, "patch", a.Patch)
	case "write":
		var a writeArgs
		if !strict(args, &a) {
			return false
		}
		field(b, "path", a.Path)
		text(b, "content", a.Content)
	case "edit":
		var a editArgs
		if !strict(args, &a) {
			return false
		}
		field(b, "path", a.Path)
		if a.ReplaceAll {
			field(b, "replace_all", "true (every occurrence)")
		}
		text(b, "old_string", a.OldString)
		text(b, "new_string", a.NewString)
	case "lsp_rename":
		var a renameArgs
		if !strict(args, &a) {
			return false
		}
		field(b, "file", a.File)
		field(b, "line", strconv.Itoa(a.Line))
		field(b, "symbol", a.Symbol)
		field(b, "new_name", a.NewName)
	case "debug":
		var a debugArgs
		if !strict(args, &a) {
			return false
		}
		for _, f := range []struct{ name, v string }{
			{"op", a.Op}, {"adapter", a.Adapter}, {"program", a.Program}, {"module", a.Module}, {"cwd", a.Cwd}, {"file", a.File},
		} {
			if f.v != "" {
				field(b, f.name, f.v)
			}
		}
		if a.Args != nil {
			j, _ := json.Marshal(a.Args) // a JSON array: each argument's bounds are plain
			fmt.Fprintf(b, "args: %s\n", visible(string(j)))
		}
		if a.Env != nil {
			j, _ := json.Marshal(a.Env) // a JSON object, its names sorted
			fmt.Fprintf(b, "env: %s\n", visible(string(j)))
		}
		if len(a.Lines) > 0 {
			fmt.Fprintf(b, "lines: %s\n", visible(compactJSON(a.Lines)))
		}
		for _, f := range []struct {
			name string
			v    int
		}{{"port", a.Port}, {"thread_id", a.ThreadID}, {"frame_id", a.FrameID}, {"reference", a.Reference}, {"start", a.Start}} {
			if f.v != 0 {
				field(b, f.name, strconv.Itoa(f.v))
			}
		}
		if a.StopOnEntry {
			field(b, "stop_on_entry", "true")
		}
		if a.Expression != "" {
			text(b, "expression", a.Expression)
		}
	default:
		return false
	}
	return true
}

// strict decodes args into v as the tools' registry does: unknown fields
// and a wrong type fail, and the last of duplicate keys wins.
func strict(args json.RawMessage, v any) bool {
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	if dec.Decode(v) != nil {
		return false
	}
	_, err := dec.Token()
	return err != nil // nothing after the object
}

// field writes a one-line value; one that would not read plainly on one
// line (a newline, surrounding spaces, control characters) is quoted.
func field(b *strings.Builder, name, v string) {
	if v == "" || strings.ContainsAny(v, "\n\r") || strings.TrimSpace(v) != v || visible(v) != v {
		v = strconv.Quote(v)
	}
	fmt.Fprintf(b, "%s: %s\n", name, v)
}

// text writes a multi-line value under a heading that gives its size.
func text(b *strings.Builder, name, v string) {
	lines := strings.Count(v, "\n")
	if v != "" && !strings.HasSuffix(v, "\n") {
		lines++
	}
	fmt.Fprintf(b, "%s (%s, %s):\n", name, count(len(v), "byte"), count(lines, "line"))
	block(b, v)
}

// block writes v line by line, each behind blockPrefix.
func block(b *strings.Builder, v string) {
	if v == "" {
		return
	}
	for line := range strings.Lines(v) {
		b.WriteString(blockPrefix)
		b.WriteString(visible(strings.TrimSuffix(line, "\n")))
		b.WriteByte('\n')
	}
}

// visible escapes what would not show as itself: invalid UTF-8, control
// characters other than tab, and every character that shows as nothing,
// as blank, or over its neighbour ([hidden]), as \u{…} or \x…
func visible(s string) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\t':
			b.WriteRune(r)
		case hidden(r):
			fmt.Fprintf(&b, `\u{%04x}`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// overlays are the combining marks drawn over the character before them
// (canonical combining class 1, Overlay): a stroke or solidus that turns
// one letter into what reads as another.
var overlays = &unicode.RangeTable{
	R16: []unicode.Range16{
		{Lo: 0x0334, Hi: 0x0338, Stride: 1},
		{Lo: 0x1cd4, Hi: 0x1cd4, Stride: 1},
		{Lo: 0x1ce2, Hi: 0x1ce8, Stride: 1},
		{Lo: 0x20d2, Hi: 0x20d3, Stride: 1},
		{Lo: 0x20d8, Hi: 0x20da, Stride: 1},
		{Lo: 0x20e5, Hi: 0x20e6, Stride: 1},
		{Lo: 0x20ea, Hi: 0x20eb, Stride: 1},
	},
	R32: []unicode.Range32{
		{Lo: 0x10a39, Hi: 0x10a39, Stride: 1},
		{Lo: 0x16af0, Hi: 0x16af4, Stride: 1},
		{Lo: 0x1bc9e, Hi: 0x1bc9e, Stride: 1},
		{Lo: 0x1d167, Hi: 0x1d169, Stride: 1},
	},
}

// hidden reports whether r would not show on a card as itself: control
// and format characters (bidirectional controls, zero-width spaces, byte
// order marks, tag characters), the rest of Unicode's default-ignorable
// code points (Hangul fillers, variation selectors, the combining
// grapheme joiner), blanks other than the ASCII space (no-break and
// ideographic spaces, the braille blank), line and paragraph separators,
// and combining overlays.
func hidden(r rune) bool {
	switch {
	case unicode.IsControl(r), unicode.Is(unicode.Cf, r):
		return true
	case unicode.In(r, unicode.Variation_Selector, unicode.Other_Default_Ignorable_Code_Point, overlays):
		return true
	case r > unicode.MaxASCII && (unicode.IsSpace(r) || unicode.In(r, unicode.Zl, unicode.Zp)):
		return true
	case r == '\u2800': // braille pattern blank
		return true
	}
	return false
}

func prettyJSON(args json.RawMessage) string {
	var buf bytes.Buffer
	if json.Indent(&buf, args, "", "  ") != nil {
		return string(args)
	}
	return buf.String()
}

func compactJSON(raw json.RawMessage) string {
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return string(raw)
	}
	return buf.String()
}

// count returns "n word" or "n words", with n in thousands (1,280).
func count(n int, word string) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if n != 1 {
		word += "s"
	}
	return s + " " + word
}
