package main

import (
	"slices"
	"strconv"
	"unicode/utf8"

	"berth.dev/berth/tools/structural"
)

// appendMatchJSON appends m as one line of `berth ast-grep --json`:
// {"file","start_line","start_col","end_line","end_col","text","enclosing",
// "captures"} in that order, enclosing left out when it is empty, captures
// sorted by name and left out when there are none,
// byte for byte what encoding/json prints for that object without HTML
// escaping (TestMatchJSON holds it to that). It is written by hand because a
// search prints thousands of matches, and the reflection and allocations of
// encoding/json cost more than the writing.
func appendMatchJSON(dst []byte, file string, m structural.FileMatch) []byte {
	dst = append(dst, `{"file":`...)
	dst = appendJSONString(dst, file)
	dst = append(dst, `,"start_line":`...)
	dst = strconv.AppendInt(dst, int64(m.StartLine), 10)
	dst = append(dst, `,"start_col":`...)
	dst = strconv.AppendInt(dst, int64(m.StartCol), 10)
	dst = append(dst, `,"end_line":`...)
	dst = strconv.AppendInt(dst, int64(m.EndLine), 10)
	dst = append(dst, `,"end_col":`...)
	dst = strconv.AppendInt(dst, int64(m.EndCol), 10)
	dst = append(dst, `,"text":`...)
	dst = appendJSONString(dst, m.Text)
	if m.Enclosing != "" {
		dst = append(dst, `,"enclosing":`...)
		dst = appendJSONString(dst, m.Enclosing)
	}
	if len(m.Captures) > 0 {
		names := make([]string, 0, len(m.Captures))
		for k := range m.Captures {
			names = append(names, k)
		}
		slices.Sort(names)
		dst = append(dst, `,"captures":{`...)
		for i, k := range names {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, k)
			dst = append(dst, ':')
			dst = appendJSONString(dst, m.Captures[k])
		}
		dst = append(dst, '}')
	}
	return append(dst, '}', '\n')
}

// appendJSONString appends s as a JSON string the way encoding/json writes
// one with HTML escaping off: '"' and '\\' escaped, control characters as
// \b \f \n \r \t or \u00XX, invalid UTF-8 as \ufffd, and U+2028 and U+2029
// escaped (JSONP-safe); everything else verbatim.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
