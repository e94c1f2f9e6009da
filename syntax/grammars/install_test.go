package grammars

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/syntax"
)

func TestSpecsEmbedded(t *testing.T) {
	specs, err := Specs()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Spec{}
	for _, s := range specs {
		got[s.ID] = s
	}
	for id, pkg := range map[string]string{"dart": "tree-sitter-dart", "swift": "tree-sitter-swift"} {
		s, ok := got[id]
		if !ok || s.Package != pkg || len(s.Contexts) == 0 || len(s.Extensions) == 0 {
			t.Errorf("spec %s = %+v", id, s)
		}
	}
	if h := Hint("Dart"); !strings.Contains(h, "berth grammars install dart") {
		t.Errorf("Hint(Dart) = %q", h)
	}
	if h := Hint("cobol"); h != "" {
		t.Errorf("Hint(cobol) = %q, want none", h)
	}
	if _, err := Install(context.Background(), "cobol", Options{Dir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "dart, swift") {
		t.Errorf("Install(cobol) = %v, want an error listing what berth installs", err)
	}
}

func TestTarballURL(t *testing.T) {
	for _, c := range []struct{ registry, pkg, want string }{
		{"https://registry.npmjs.org/", "tree-sitter-dart", "https://registry.npmjs.org/tree-sitter-dart/-/tree-sitter-dart-1.0.0.tgz"},
		{"https://registry.npmjs.org", "tree-sitter-dart", "https://registry.npmjs.org/tree-sitter-dart/-/tree-sitter-dart-1.0.0.tgz"},
		{"https://npm.example.com/repository/npm/", "tree-sitter-dart", "https://npm.example.com/repository/npm/tree-sitter-dart/-/tree-sitter-dart-1.0.0.tgz"},
		{"https://registry.npmjs.org/", "@scope/tree-sitter-x", "https://registry.npmjs.org/@scope/tree-sitter-x/-/tree-sitter-x-1.0.0.tgz"},
	} {
		got, err := TarballURL(c.registry, c.pkg, "1.0.0")
		if err != nil || got != c.want {
			t.Errorf("TarballURL(%q, %q) = %q, %v; want %q", c.registry, c.pkg, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "registry.npmjs.org", "file:///etc", "ftp://x/"} {
		if _, err := TarballURL(bad, "p", "1"); err == nil {
			t.Errorf("TarballURL(%q) accepted", bad)
		}
	}
}

func TestRegistry(t *testing.T) {
	t.Setenv(RegistryEnv, "https://mirror.example/npm/")
	if got := Registry(context.Background()); got != "https://mirror.example/npm/" {
		t.Errorf("Registry with %s = %q", RegistryEnv, got)
	}
	t.Setenv(RegistryEnv, "")
	t.Setenv("npm_config_registry", "https://other.example/")
	if got := Registry(context.Background()); got != "https://other.example/" {
		t.Errorf("Registry with npm_config_registry = %q", got)
	}
}

// registryOrSkip returns the registry, or skips when it does not answer
// (fails under CI=true: tests/run has the network).
func registryOrSkip(t *testing.T) string {
	t.Helper()
	reg := Registry(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	u, err := TarballURL(reg, "tree-sitter-dart", "1.0.0")
	if err == nil {
		var req *http.Request
		if req, err = http.NewRequestWithContext(ctx, http.MethodHead, u, nil); err == nil {
			var resp *http.Response
			if resp, err = http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("npm registry %s unreachable: %v", reg, err)
		}
		t.Skipf("npm registry %s unreachable: %v", reg, err)
	}
	return reg
}

const dartGuards = `class Player {
  void stop() {
    if (sub != null) sub.dispose();
    if (timer != null) other.dispose();
  }
}
`

// TestInstallFromNpm installs Dart from the real registry, checks that a
// second install is a no-op, that the installed grammar finds the spec's
// example, and that every pinned tarball matches its integrity.
func TestInstallFromNpm(t *testing.T) {
	registryOrSkip(t)
	if findTool("", "CC", "cc", "gcc", "clang") == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("no C compiler")
		}
		t.Skip("no C compiler")
	}
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "grammars")
	var log bytes.Buffer
	res, err := Install(ctx, "dart", Options{Dir: dir, Log: &log})
	if err != nil {
		t.Fatalf("install: %v\n%s", err, log.String())
	}
	if res.Skipped || res.Version != "1.0.0" || res.Library != filepath.Join(dir, "libtree-sitter-dart.so") {
		t.Errorf("result = %+v", res)
	}
	again, err := Install(ctx, "dart", Options{Dir: dir, Log: &log})
	if err != nil || !again.Skipped {
		t.Errorf("second install = %+v, %v; want it skipped", again, err)
	}
	// A descriptor from an older berth (another context ladder) is brought
	// up to date without a rebuild.
	stale, err := os.ReadFile(res.Descriptor)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(res.Descriptor, bytes.Replace(stale, []byte(`"chain"`), []byte(`"aliases": ["old"], "chain"`), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	log.Reset()
	if again, err := Install(ctx, "dart", Options{Dir: dir, Log: &log}); err != nil || !again.Skipped || !strings.Contains(log.String(), "descriptor was updated") {
		t.Errorf("install over a stale descriptor = %+v, %v; log %q", again, err, log.String())
	}
	if now, _ := os.ReadFile(res.Descriptor); !bytes.Equal(now, stale) {
		t.Errorf("descriptor not refreshed:\n%s", now)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Errorf("grammar directory holds %d entries, want the library and the descriptor (no leftovers)", len(ents))
	}
	list, err := List(dir)
	if err != nil || len(list) != 1 || list[0].ID != "dart" || list[0].Version != "1.0.0" || list[0].Err != nil || list[0].Pinned != "1.0.0" {
		t.Errorf("List = %+v, %v", list, err)
	}

	dart := installedDart
	if dart == nil {
		if dart, err = syntax.LoadGrammar(res.Descriptor); err != nil {
			t.Fatal(err)
		}
		installedDart = dart
	}
	ms, err := syntax.Search(ctx, dart, "if ($X != null) $X.dispose()", []byte(dartGuards))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || ms[0].Text != "if (sub != null) sub.dispose();" {
		t.Errorf("the spec's example found %d matches: %+v; want only the guard that disposes what it tested", len(ms), ms)
	}

	specs, err := Specs()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		t.Run("integrity/"+s.ID, func(t *testing.T) {
			u, err := TarballURL(Registry(ctx), s.Package, s.Version)
			if err != nil {
				t.Fatal(err)
			}
			tgz, err := download(ctx, nil, u)
			if err != nil {
				t.Fatal(err)
			}
			if err := checkIntegrity(tgz, s.Integrity); err != nil {
				t.Fatal(err)
			}
			files, err := extract(tgz, t.TempDir())
			if err != nil || len(files) < 2 || files[0] != "parser.c" {
				t.Errorf("extract = %v, %v", files, err)
			}
		})
	}
}

// installedDart is the dart grammar TestInstallFromNpm loaded. Grammars
// stay registered for the process's life, so when the test runs again in
// the same process (go test -count=2) it searches with this one: loading
// the new install's descriptor would be refused as a duplicate id.
var installedDart *syntax.Language

type entry struct {
	name     string
	typeflag byte
	body     string
	link     string
}

func tarball(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typeflag, Mode: 0o644, Size: int64(len(e.body)), Linkname: e.link}
		if e.typeflag != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func integrity(b []byte) string {
	sum := sha512.Sum512(b)
	return "sha512-" + base64.StdEncoding.EncodeToString(sum[:])
}

// TestInstallRefuses serves tarballs the test builds from a local registry
// and checks that a wrong integrity, a tampered tarball, hostile paths and
// links, a package without a parser and a parser that does not compile all
// fail and leave the grammar directory without a grammar.
func TestInstallRefuses(t *testing.T) {
	good := []entry{
		{name: "package/package.json", typeflag: tar.TypeReg, body: `{"name":"tree-sitter-fake"}`},
		{name: "package/src/parser.c", typeflag: tar.TypeReg, body: "const void *tree_sitter_fake(void) { return 0; }\n"},
		{name: "package/src/tree_sitter/parser.h", typeflag: tar.TypeReg, body: "/* header */\n"},
	}
	goodTGZ := tarball(t, good...)
	tampered := tarball(t, append(good[:1:1], entry{name: "package/src/parser.c", typeflag: tar.TypeReg, body: "const void *tree_sitter_fake(void) { return (void *)1; }\n"}, good[2])...)
	outside := t.TempDir()
	evil := filepath.Join(outside, "evil.c")
	hostile := func(e entry) []byte { return tarball(t, append(append([]entry{}, good...), e)...) }

	for _, c := range []struct {
		name      string
		serve     []byte // what the registry serves
		integrity string // pinned; "" means the integrity of serve
		status    int
		want      error
		wantText  string
	}{
		{name: "wrong integrity", serve: goodTGZ, integrity: integrity([]byte("other bytes")), want: ErrIntegrity},
		{name: "sha1 integrity", serve: goodTGZ, integrity: "sha1-AAAA", want: ErrIntegrity},
		{name: "tampered tarball", serve: tampered, integrity: integrity(goodTGZ), want: ErrIntegrity},
		{name: "dot-dot", serve: hostile(entry{name: "package/../../" + evil, typeflag: tar.TypeReg, body: "x"}), want: ErrHostileArchive, wantText: `".."`},
		{name: "dot-dot in src", serve: hostile(entry{name: "package/src/../../evil.c", typeflag: tar.TypeReg, body: "x"}), want: ErrHostileArchive},
		{name: "absolute", serve: hostile(entry{name: evil, typeflag: tar.TypeReg, body: "x"}), want: ErrHostileArchive, wantText: "absolute"},
		{name: "symlink", serve: tarball(t, good[0], entry{name: "package/src/parser.c", typeflag: tar.TypeSymlink, link: "/etc/passwd"}, good[2]), want: ErrHostileArchive, wantText: "symbolic link"},
		{name: "symlinked dir", serve: tarball(t, entry{name: "package/src", typeflag: tar.TypeSymlink, link: outside}, good[1]), want: ErrHostileArchive, wantText: "symbolic link"},
		{name: "hard link", serve: hostile(entry{name: "package/src/scanner.c", typeflag: tar.TypeLink, link: "/etc/passwd"}), want: ErrHostileArchive, wantText: "hard link"},
		{name: "no parser", serve: tarball(t, good[0], good[2]), wantText: "ships no src/parser.c"},
		{name: "not gzip", serve: []byte("plain text"), wantText: "not gzip"},
		{name: "does not compile", serve: tarball(t, good[0], entry{name: "package/src/parser.c", typeflag: tar.TypeReg, body: "this is not C\n"}), wantText: "failed"},
		{name: "not a grammar", serve: goodTGZ, wantText: "returned no language"},
		{name: "not found", status: http.StatusNotFound, integrity: integrity(goodTGZ), wantText: "404"},
		{name: "no compiler", serve: goodTGZ, wantText: "apt-get install gcc"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "no compiler" {
				t.Setenv("PATH", t.TempDir())
				t.Setenv("CC", "")
			}
			if c.wantText == "failed" || c.wantText == "returned no language" {
				if findTool("", "CC", "cc", "gcc", "clang") == "" {
					t.Skip("no C compiler")
				}
			}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if c.status != 0 {
					http.Error(w, "no such package", c.status)
					return
				}
				if r.URL.Path != "/tree-sitter-fake/-/tree-sitter-fake-1.0.0.tgz" {
					http.Error(w, "unexpected path "+r.URL.Path, http.StatusNotFound)
					return
				}
				w.Write(c.serve)
			}))
			defer srv.Close()
			pin := c.integrity
			if pin == "" {
				pin = integrity(c.serve)
			}
			spec := Spec{ID: "fake", Package: "tree-sitter-fake", Version: "1.0.0", Integrity: pin, Check: "x", Extensions: []string{".fake"}}
			dir := filepath.Join(t.TempDir(), "grammars")
			_, err := install(context.Background(), spec, Options{Dir: dir, Registry: srv.URL})
			if err == nil {
				t.Fatal("install succeeded")
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Errorf("error = %v, want %v", err, c.want)
			}
			if !strings.Contains(err.Error(), c.wantText) {
				t.Errorf("error = %v, want it to mention %q", err, c.wantText)
			}
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				t.Errorf("the grammar directory holds %s after a refused install", e.Name())
			}
			if _, err := os.Stat(evil); err == nil {
				t.Errorf("%s was written outside the package", evil)
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "evil.c")); err == nil {
				t.Error("evil.c was written outside the package")
			}
		})
	}
}
