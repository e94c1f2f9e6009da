package tests

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The contract lives in the repository: docs/tools.md defines the
// requirement ids and docs/design.md the architecture. These checks scan
// the tree's text files (no build) so that a clone never cites a file it
// does not have, nor an id or section the docs do not define; the package
// map check lists the module's packages with go list.

// outsideFile matches citations of the documents the contract was written
// from, which are not in the repository.
var outsideFile = regexp.MustCompile(`\b(TOOLS|DESIGN|STYLE)\.md\b|\b(deps|reliability|ast-grep-semantics|aesthetics|anchors-features|k8s-feasibility)\.md\b|seed-original|/work/shared/`)

// reqID matches anything shaped like a requirement id.
var reqID = regexp.MustCompile(`\b([A-Z][A-Z0-9]{1,6})-([0-9]+)\b`)

// notRequirements are prefixes of names that look like requirement ids
// and are not (SHA-256, UTF-8, MCP's SEP-1303; SPDX-2.3, CC0-1.0 and
// BSD-3-Clause in the SBOM).
var notRequirements = map[string]bool{"SHA": true, "UTF": true, "ISO": true, "RFC": true, "CVE": true, "TLS": true, "HTTP": true, "LICENSE": true, "SEP": true, "SPDX": true, "CC0": true, "BSD": true}

// defined matches a definition in docs/tools.md: "- **LSP-4** …".
var defined = regexp.MustCompile(`(?m)^- \*\*([A-Z]+-[0-9]+)\*\*`)

// toolsSection matches a citation of a section of docs/tools.md, "§7" or
// "§2–3", and designSection one of docs/design.md by its quoted heading.
var (
	toolsSection  = regexp.MustCompile(`docs/tools\.md §([0-9]+)(?:[–-]([0-9]+))?`)
	designSection = regexp.MustCompile("docs/design\\.md`?" + `,?\s*(?://\s*)?\(?"([^"]+)"`)
	heading       = regexp.MustCompile(`(?m)^#+ (.+)$`)
)

// textFile is one scanned file.
type textFile struct {
	rel  string // slash-separated, from the module root
	data []byte
}

// textFiles returns the tree's text files: everything but .git, binary
// files (a NUL byte) and files over 1 MiB.
func textFiles(t *testing.T, root string) []textFile {
	t.Helper()
	var out []textFile
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil || info.Size() > 1<<20 {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if rel == "go.sum" {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.IndexByte(data, 0) >= 0 {
			return nil
		}
		out = append(out, textFile{rel: filepath.ToSlash(rel), data: data})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// lineOf returns the 1-based line of byte offset off in data.
func lineOf(data []byte, off int) int { return bytes.Count(data[:off], []byte("\n")) + 1 }

func TestDocsCiteOnlyWhatTheRepositoryHas(t *testing.T) {
	root := moduleRoot(t)
	for _, f := range textFiles(t, root) {
		if strings.HasPrefix(f.rel, "docs/") || f.rel == "tests/docs_test.go" {
			continue
		}
		for _, m := range outsideFile.FindAllIndex(f.data, -1) {
			t.Errorf("%s:%d cites %s, which is not in the repository: cite docs/tools.md (the tool contract and its ids) or docs/design.md (architecture, dependencies and pitfalls) instead",
				f.rel, lineOf(f.data, m[0]), f.data[m[0]:m[1]])
		}
	}
}

func TestRequirementIDsAreDefined(t *testing.T) {
	root := moduleRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "tools.md"))
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	prefixes := map[string]bool{}
	for _, m := range defined.FindAllSubmatch(doc, -1) {
		id := string(m[1])
		if ids[id] {
			t.Errorf("docs/tools.md defines %s twice", id)
		}
		ids[id] = true
		prefixes[id[:strings.IndexByte(id, '-')]] = true
	}
	if len(ids) == 0 {
		t.Fatal(`docs/tools.md defines no requirement ids (lines "- **LSP-1** …")`)
	}
	for _, f := range textFiles(t, root) {
		if f.rel == "tests/docs_test.go" {
			continue
		}
		for _, m := range reqID.FindAllSubmatchIndex(f.data, -1) {
			id, prefix := string(f.data[m[0]:m[1]]), string(f.data[m[2]:m[3]])
			if ids[id] || notRequirements[prefix] {
				continue
			}
			if prefixes[prefix] {
				t.Errorf("%s:%d uses %s, which docs/tools.md does not define", f.rel, lineOf(f.data, m[0]), id)
			} else {
				t.Errorf("%s:%d uses %s, which looks like a requirement id of a kind docs/tools.md does not have: define it there, or add %s to notRequirements if it is not one",
					f.rel, lineOf(f.data, m[0]), id, prefix)
			}
		}
	}
}

func TestDocSectionCitationsResolve(t *testing.T) {
	root := moduleRoot(t)
	sections := map[int]bool{}
	tools, err := os.ReadFile(filepath.Join(root, "docs", "tools.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^## §([0-9]+) `).FindAllSubmatch(tools, -1) {
		n, _ := strconv.Atoi(string(m[1]))
		sections[n] = true
	}
	design, err := os.ReadFile(filepath.Join(root, "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	headings := map[string]bool{}
	for _, m := range heading.FindAllSubmatch(design, -1) {
		headings[strings.TrimSpace(string(m[1]))] = true
	}
	for _, f := range textFiles(t, root) {
		if f.rel == "tests/docs_test.go" {
			continue
		}
		for _, m := range toolsSection.FindAllSubmatchIndex(f.data, -1) {
			for _, g := range [][2]int{{m[2], m[3]}, {m[4], m[5]}} {
				if g[0] < 0 {
					continue
				}
				n, _ := strconv.Atoi(string(f.data[g[0]:g[1]]))
				if !sections[n] {
					t.Errorf("%s:%d cites docs/tools.md §%d, which has no such section", f.rel, lineOf(f.data, m[0]), n)
				}
			}
		}
		for _, m := range designSection.FindAllSubmatchIndex(f.data, -1) {
			name := string(f.data[m[2]:m[3]])
			if !headings[name] {
				t.Errorf("%s:%d cites docs/design.md %q, which has no such heading", f.rel, lineOf(f.data, m[0]), name)
			}
		}
	}
}

// matrixRow matches a row of docs/security.md's attack matrix, and
// matrixCite one "`pkg` TestA, TestB" citation in its test column.
var (
	matrixRow  = regexp.MustCompile(`(?m)^\| .+ \| (.+) \|$`)
	matrixCite = regexp.MustCompile("`([a-z][a-z0-9/]*)`((?:[ ,]+Test[A-Za-z0-9_]+)+)")
	testName   = regexp.MustCompile(`Test[A-Za-z0-9_]+`)
)

// TestSecurityMatrixNamesRealTests: every test the attack matrix of
// docs/security.md names exists in the package it names, so that the
// matrix cannot cite a test that was renamed or removed.
func TestSecurityMatrixNamesRealTests(t *testing.T) {
	root := filepath.Join("..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "## Attacks and the tests that pin them")
	if !ok {
		t.Fatal("docs/security.md has no attack matrix")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	cited := 0
	for _, row := range matrixRow.FindAllStringSubmatch(table, -1) {
		for _, c := range matrixCite.FindAllStringSubmatch(row[1], -1) {
			dir := filepath.Join(root, filepath.FromSlash(c[1]))
			var src strings.Builder
			files, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
			for _, f := range files {
				b, _ := os.ReadFile(f)
				src.Write(b)
			}
			for _, name := range testName.FindAllString(c[2], -1) {
				cited++
				if !strings.Contains(src.String(), "func "+name+"(") {
					t.Errorf("docs/security.md cites %s in %s, which has no such test", name, c[1])
				}
			}
		}
	}
	if cited < 20 {
		t.Errorf("the attack matrix cites %d tests; the parse is broken", cited)
	}
}

// routeRow matches a row of docs/http.md's route table:
// "| `GET`, `POST` | `/v1/runs/{id}/mcp` | H | …".
var routeRow = regexp.MustCompile("(?m)^\\| ((?:`[A-Z]+`(?:, )?)+) \\| `(/[^`]*)` \\|")

// TestRouteTableMatchesOpenAPI: the prose route table of docs/http.md
// names every operation of controller/httpapi/openapi.json and no other,
// so the one table a harness author reads is the routes berth serves
// (TestOpenAPIRoutes in controller/httpapi keeps the document equal to
// the mux).
func TestRouteTableMatchesOpenAPI(t *testing.T) {
	root := moduleRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, "controller", "httpapi", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("controller/httpapi/openapi.json: %v", err)
	}
	methods := map[string]bool{"get": true, "put": true, "post": true, "delete": true, "options": true, "head": true, "patch": true, "trace": true}
	want := map[string]bool{}
	for path, item := range doc.Paths {
		for m := range item {
			if methods[m] {
				want[strings.ToUpper(m)+" "+path] = true
			}
		}
	}
	if len(want) < 10 {
		t.Fatalf("openapi.json has %d operations; the parse is broken", len(want))
	}

	md, err := os.ReadFile(filepath.Join(root, "docs", "http.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(md), "\n## HTTP API\n")
	if !ok {
		t.Fatal(`docs/http.md has no "## HTTP API" section holding the route table`)
	}
	table, _, _ = strings.Cut(table, "\n#")
	got := map[string]bool{}
	for _, row := range routeRow.FindAllStringSubmatch(table, -1) {
		for _, m := range strings.Split(row[1], ", ") {
			op := strings.Trim(m, "`") + " " + row[2]
			if got[op] {
				t.Errorf("docs/http.md's route table lists %s twice", op)
			}
			got[op] = true
		}
	}
	for op := range want {
		if !got[op] {
			t.Errorf("berth serves %s (controller/httpapi/openapi.json), but docs/http.md's route table does not list it: add a row (method, route without query, scope, what)", op)
		}
	}
	for op := range got {
		if !want[op] {
			t.Errorf("docs/http.md's route table lists %s, which controller/httpapi/openapi.json does not describe (so berth does not serve it): remove the row or fix its method or path", op)
		}
	}
}

var (
	mdLink     = regexp.MustCompile(`\[[^\]\n]*\]\(([^)\s]+)\)`)
	codeSpan   = regexp.MustCompile("`[^`\n]*`")
	fenceStart = regexp.MustCompile("^\\s*(```|~~~)")
	atxHeading = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
)

// markdownProse returns the lines of a Markdown file outside fenced code
// blocks.
func markdownProse(data []byte) []string {
	var out []string
	fenced := false
	for _, line := range strings.Split(string(data), "\n") {
		if fenceStart.MatchString(line) {
			fenced = !fenced
			out = append(out, "")
			continue
		}
		if fenced {
			out = append(out, "")
			continue
		}
		out = append(out, line)
	}
	return out
}

// headingSlugs returns the anchors GitHub gives a Markdown file's
// headings: the heading's text lower-cased, with what is not a letter,
// digit, space, hyphen or underscore dropped and spaces made hyphens; a
// repeated slug gets -1, -2, ….
func headingSlugs(data []byte) map[string]bool {
	slugs := map[string]bool{}
	seen := map[string]int{}
	for _, line := range markdownProse(data) {
		m := atxHeading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			slugs[slug+"-"+strconv.Itoa(n)] = true
		} else {
			slugs[slug] = true
		}
		seen[slug]++
	}
	return slugs
}

// TestDocsLinksResolve: every relative link in README.md and docs/*.md
// leads to a file of the repository, and its #anchor, if any, to a
// heading of that file, so moving a section cannot leave a link behind.
func TestDocsLinksResolve(t *testing.T) {
	root := moduleRoot(t)
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	slugCache := map[string]map[string]bool{}
	slugsOf := func(path string) (map[string]bool, error) {
		if s, ok := slugCache[path]; ok {
			return s, nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		slugCache[path] = headingSlugs(data)
		return slugCache[path], nil
	}
	links := 0
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, file)
		rel = filepath.ToSlash(rel)
		for i, line := range markdownProse(data) {
			line = codeSpan.ReplaceAllString(line, "")
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				links++
				path, anchor, _ := strings.Cut(target, "#")
				dest := file
				if path != "" {
					dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
					if _, err := os.Stat(dest); err != nil {
						t.Errorf("%s:%d links to %s, which does not exist", rel, i+1, target)
						continue
					}
				}
				if anchor == "" || !strings.HasSuffix(dest, ".md") {
					continue
				}
				slugs, err := slugsOf(dest)
				if err != nil {
					t.Errorf("%s:%d links to %s: %v", rel, i+1, target, err)
					continue
				}
				if !slugs[anchor] {
					t.Errorf("%s:%d links to %s, but %s has no heading with the anchor #%s", rel, i+1, target, filepath.Base(dest), anchor)
				}
			}
		}
	}
	if links < 20 {
		t.Errorf("found %d relative links in README.md and docs/; the parse is broken", links)
	}
}

// TestDesignMapNamesEveryPackage: every package of the module (but the
// test suites under tests/) has a row in docs/design.md's package map.
func TestDesignMapNamesEveryPackage(t *testing.T) {
	root := moduleRoot(t)
	design, err := os.ReadFile(filepath.Join(root, "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(design), "\n## Package map\n")
	if !ok {
		t.Fatal(`docs/design.md has no "## Package map" section`)
	}
	table, _, _ = strings.Cut(table, "\n## ")
	mapped := map[string]bool{}
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " | ")
		for _, name := range codeSpan.FindAllString(first, -1) {
			mapped[strings.Trim(name, "`")] = true
		}
	}
	const module = "berth.dev/berth"
	for _, pkg := range goList(t, root, "./...") {
		rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
		if rel == "" || rel == "tests" || strings.HasPrefix(rel, "tests/") || strings.Contains(rel, "testdata") {
			continue
		}
		if !mapped[rel] {
			t.Errorf("package %s is missing from docs/design.md's package map: add a row (package, what it holds from its package doc, what of the module it imports)", rel)
		}
	}
}
