package lsp

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// ErrURI reports a URI the engine cannot map to a file path: another scheme,
// a host, a relative path, a query or fragment, or a bad escape.
var ErrURI = errors.New("lsp: not a local file URI")

// FileURI returns the file URI of an absolute POSIX path, percent-encoded
// the way VS Code encodes it: every byte except ASCII letters, digits,
// "-._~" and "/" becomes %XX with upper-case hex. The path is cleaned first.
// Paths are the sandbox's own paths; a relative path is an error.
func FileURI(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("%w: path %q is not absolute; pass the absolute path inside the sandbox", ErrURI, p)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("%w: path %q contains a NUL byte", ErrURI, p)
	}
	p = path.Clean(p)
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len("file://") + len(p) + 8)
	b.WriteString("file://")
	for i := 0; i < len(p); i++ {
		c := p[i]
		if isUnreserved(c) || c == '/' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String(), nil
}

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

// URIPath returns the absolute, cleaned path of a file URI. It accepts any
// valid percent-encoding (servers encode differently: gopls leaves "@" and
// ":" as they are, VS Code escapes them), an empty or "localhost" authority,
// and the "file:/path" short form. It rejects other schemes, other hosts,
// queries, fragments, invalid escapes and NUL bytes. ".." segments are
// resolved, so the result is ready for a workspace containment check (which
// remains the caller's job).
func URIPath(uri string) (string, error) {
	scheme, rest, ok := strings.Cut(uri, ":")
	if !ok || !strings.EqualFold(scheme, "file") {
		return "", fmt.Errorf("%w: %q has no file: scheme", ErrURI, clipText(uri, 200))
	}
	if strings.HasPrefix(rest, "//") {
		host, p, _ := strings.Cut(rest[2:], "/")
		if host != "" && !strings.EqualFold(host, "localhost") {
			return "", fmt.Errorf("%w: %q names host %q; only local files are supported", ErrURI, clipText(uri, 200), host)
		}
		rest = "/" + p
	}
	if !strings.HasPrefix(rest, "/") {
		return "", fmt.Errorf("%w: %q has a relative path", ErrURI, clipText(uri, 200))
	}
	if strings.ContainsAny(rest, "?#") {
		return "", fmt.Errorf("%w: %q has a query or fragment", ErrURI, clipText(uri, 200))
	}
	p, err := unescape(rest)
	if err != nil {
		return "", fmt.Errorf("%w: %q: %v", ErrURI, clipText(uri, 200), err)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("%w: %q encodes a NUL byte", ErrURI, clipText(uri, 200))
	}
	return path.Clean(p), nil
}

func unescape(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) || unhex(s[i+1]) < 0 || unhex(s[i+2]) < 0 {
			return "", fmt.Errorf("invalid escape at byte %d", i)
		}
		b.WriteByte(byte(unhex(s[i+1])<<4 | unhex(s[i+2])))
		i += 2
	}
	return b.String(), nil
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c - 'a' + 10)
	case 'A' <= c && c <= 'F':
		return int(c - 'A' + 10)
	}
	return -1
}

// canonicalURI returns the FileURI form of a file URI, so URIs spelled
// differently by the server and by us compare equal. Anything else is
// returned unchanged.
func canonicalURI(uri string) string {
	p, err := URIPath(uri)
	if err != nil {
		return uri
	}
	c, err := FileURI(p)
	if err != nil {
		return uri
	}
	return c
}

// clipText shortens peer-controlled text kept in memory or quoted in errors.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
