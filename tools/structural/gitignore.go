package structural

import (
	"context"
	"path"
	"regexp"
	"strings"

	"berth.dev/berth/sandbox"
)

// ignoreRule is one pattern line of a .gitignore file.
type ignoreRule struct {
	re      *regexp.Regexp // matched against the path relative to the file's directory
	negate  bool           // "!pattern" re-includes
	dirOnly bool           // "pattern/" matches directories only
}

// ignoreFile is the rules of one .gitignore, for paths below dir.
type ignoreFile struct {
	dir   string // FS name of the directory holding it ("." for the root)
	rules []ignoreRule
}

// parseGitignore parses the text of a .gitignore as git does
// (gitignore(5)): blank lines and "#" comments are skipped, trailing
// unescaped spaces are trimmed, "!" negates, a trailing "/" matches only
// directories, a pattern with a "/" elsewhere is anchored to the file's
// directory, and "*", "?", "[…]" and "**" are wildcards. Lines that do not
// form a valid pattern are ignored, as git ignores them.
func parseGitignore(text string) []ignoreRule {
	var rules []ignoreRule
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSuffix(line, "\r")
		line = trimTrailingSpaces(line)
		if line == "" || line[0] == '#' {
			continue
		}
		var r ignoreRule
		if line[0] == '!' {
			r.negate = true
			line = line[1:]
		} else if line[0] == '\\' && len(line) > 1 && (line[1] == '#' || line[1] == '!') {
			line = line[1:]
		}
		if strings.HasSuffix(line, "/") && !strings.HasSuffix(line, "\\/") {
			r.dirOnly = true
			line = strings.TrimRight(line, "/")
		}
		if line == "" {
			continue
		}
		anchored := strings.Contains(line, "/")
		line = strings.TrimPrefix(line, "/")
		expr, ok := globRegexp(line)
		if !ok {
			continue
		}
		if !anchored {
			expr = "(?:.*/)?" + expr
		}
		re, err := regexp.Compile("^" + expr + "$")
		if err != nil {
			continue
		}
		r.re = re
		rules = append(rules, r)
	}
	return rules
}

// trimTrailingSpaces removes trailing spaces not escaped by a backslash.
func trimTrailingSpaces(s string) string {
	for strings.HasSuffix(s, " ") {
		if strings.HasSuffix(s, "\\ ") {
			return s
		}
		s = s[:len(s)-1]
	}
	return s
}

// globRegexp translates a gitignore glob into a regular expression over
// slash-separated paths.
func globRegexp(g string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(g); {
		c := g[i]
		switch {
		case strings.HasPrefix(g[i:], "**") && (i == 0 || g[i-1] == '/') && (i+2 == len(g) || g[i+2] == '/'):
			// "**" as a whole segment.
			switch {
			case i+2 == len(g) && i == 0: // "**" alone
				b.WriteString(".*")
				i += 2
			case i+2 == len(g): // "a/**": everything inside
				b.WriteString(".*")
				i += 2
			default: // "**/x" or "a/**/x": zero or more directories
				b.WriteString("(?:.*/)?")
				i += 3
			}
		case c == '*':
			for i < len(g) && g[i] == '*' {
				i++ // other consecutive asterisks are a regular asterisk
			}
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
			i++
		case c == '[':
			class, n, ok := globClass(g[i:])
			if !ok {
				return "", false
			}
			b.WriteString(class)
			i += n
		case c == '\\':
			if i+1 == len(g) {
				return "", false // a trailing backslash is an invalid pattern
			}
			b.WriteString(regexp.QuoteMeta(g[i+1 : i+2]))
			i += 2
		default:
			b.WriteString(regexp.QuoteMeta(g[i : i+1]))
			i++
		}
	}
	return b.String(), true
}

// globClass translates a bracket expression at the start of g and returns
// it with the number of bytes it used.
func globClass(g string) (string, int, bool) {
	var b strings.Builder
	b.WriteString("[")
	i := 1
	if i < len(g) && (g[i] == '!' || g[i] == '^') {
		b.WriteString("^/") // a negated class never matches a slash
		i++
	}
	first := true
	for i < len(g) {
		c := g[i]
		switch {
		case c == ']' && !first:
			b.WriteString("]")
			return b.String(), i + 1, true
		case c == '[' && strings.HasPrefix(g[i:], "[:"):
			end := strings.Index(g[i+2:], ":]")
			if end < 0 {
				return "", 0, false
			}
			name := g[i+2 : i+2+end]
			switch name {
			case "alnum", "alpha", "blank", "cntrl", "digit", "graph", "lower", "print", "punct", "space", "upper", "xdigit":
			default:
				return "", 0, false
			}
			b.WriteString("[:" + name + ":]")
			i += 2 + end + 2
		case c == '\\' && i+1 < len(g):
			b.WriteString(regexp.QuoteMeta(g[i+1 : i+2]))
			i += 2
		case c == '-' && !first && i+1 < len(g) && g[i+1] != ']':
			b.WriteString("-")
			i++
		default:
			if c == '\\' || c == '[' || c == ']' || c == '^' || c == '-' {
				b.WriteString("\\")
			}
			b.WriteByte(c)
			i++
		}
		first = false
	}
	return "", 0, false // unclosed
}

// match reports whether the rules decide about rel (relative to the file's
// directory): ignored or re-included; decided is false when no rule matches.
func (f *ignoreFile) match(rel string, isDir bool) (ignored, decided bool) {
	for i := len(f.rules) - 1; i >= 0; i-- {
		r := f.rules[i]
		if r.dirOnly && !isDir {
			continue
		}
		if r.re.MatchString(rel) {
			return !r.negate, true
		}
	}
	return false, false
}

// ignoreStack holds the .gitignore files that apply at the walk's current
// position, shallowest first.
type ignoreStack struct {
	files []*ignoreFile
}

func newIgnoreStack() *ignoreStack { return &ignoreStack{} }

// within reports whether name is dir or below it.
func within(name, dir string) bool {
	return dir == "." || name == dir || strings.HasPrefix(name, dir+"/")
}

// ignored reports whether name is excluded. Deeper .gitignore files take
// precedence over shallower ones, later lines over earlier ones.
func (s *ignoreStack) ignored(name string, isDir bool) bool {
	s.pop(name)
	for i := len(s.files) - 1; i >= 0; i-- {
		f := s.files[i]
		if name == f.dir {
			continue
		}
		r := name
		if f.dir != "." {
			r = strings.TrimPrefix(name, f.dir+"/")
		}
		if ign, ok := f.match(r, isDir); ok {
			return ign
		}
	}
	return false
}

// pop drops the files of directories the walk has left.
func (s *ignoreStack) pop(name string) {
	for len(s.files) > 0 && !within(name, s.files[len(s.files)-1].dir) {
		s.files = s.files[:len(s.files)-1]
	}
}

// enter loads dir's .gitignore (and, at the root, .git/info/exclude).
func (s *ignoreStack) enter(ctx context.Context, fsys sandbox.FS, dir string) error {
	s.pop(dir)
	if dir == "." {
		if err := s.load(ctx, fsys, ".", ".git/info/exclude"); err != nil {
			return err
		}
	}
	return s.load(ctx, fsys, dir, path.Join(dir, ".gitignore"))
}

// loadAncestors loads the .gitignore files of the directories above dir, so
// a search of a subdirectory honours its parents' rules.
func (s *ignoreStack) loadAncestors(ctx context.Context, fsys sandbox.FS, dir string) error {
	if dir == "." {
		return nil
	}
	if err := s.enter(ctx, fsys, "."); err != nil {
		return err
	}
	parts := strings.Split(dir, "/")
	for i := 1; i < len(parts); i++ {
		if err := s.enter(ctx, fsys, strings.Join(parts[:i], "/")); err != nil {
			return err
		}
	}
	return nil
}

// load reads one ignore file; a missing or unreadable one is no rules.
func (s *ignoreStack) load(ctx context.Context, fsys sandbox.FS, dir, name string) error {
	data, err := fsys.ReadFile(ctx, name)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return nil
	}
	if rules := parseGitignore(string(data)); len(rules) > 0 {
		s.files = append(s.files, &ignoreFile{dir: dir, rules: rules})
	}
	return nil
}
