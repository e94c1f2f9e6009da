// Package grammars installs the tree-sitter grammars berth loads at run time
// (Dart, Swift): `berth grammars install NAME...` fetches the grammar's npm
// tarball at the exact version and sha512 integrity pinned in NAME.json (this
// directory, embedded in the binary), extracts only the generated parser
// sources, compiles them with the system C compiler, checks the result by
// parsing a known snippet and writes the shared library and its descriptor
// into the grammar directory syntax.LoadConfigured reads. No third-party
// source is kept in berth's repository or binary.
package grammars

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"berth.dev/berth/syntax"
)

//go:embed *.json
var specFiles embed.FS

// Caps on what an install reads and runs.
const (
	// maxTarballBytes caps the npm tarball download (tree-sitter-swift
	// 0.7.1 is 4.9 MB).
	maxTarballBytes = 64 << 20
	// maxSourceBytes caps one extracted source file (swift's parser.c is
	// 18 MB).
	maxSourceBytes = 128 << 20
	// maxExtractBytes caps all extracted files together.
	maxExtractBytes = 256 << 20
	// maxTarEntries caps the entries read from one tarball.
	maxTarEntries = 10000
	// downloadTimeout bounds the whole download.
	downloadTimeout = 5 * time.Minute
	// compileTimeout bounds one compiler run (swift's parser.c takes about
	// a minute on a slow core).
	compileTimeout = 15 * time.Minute
	// registryConfigTimeout bounds `npm config get registry`.
	registryConfigTimeout = 10 * time.Second

	// DefaultRegistry is used when neither the environment nor npm's
	// configuration names one.
	DefaultRegistry = "https://registry.npmjs.org/"
	// RegistryEnv overrides the npm registry berth downloads from.
	RegistryEnv = "BERTH_NPM_REGISTRY"
)

// Spec is what berth pins about an installable grammar: where it comes from
// (an npm package at an exact version and integrity), how to check it, and
// the descriptor fields syntax needs (extensions, expando, context ladder).
type Spec struct {
	ID         string                     `json:"id"`
	Package    string                     `json:"package"`
	Version    string                     `json:"version"`
	Integrity  string                     `json:"integrity"`
	Check      string                     `json:"check"`
	Aliases    []string                   `json:"aliases,omitempty"`
	Extensions []string                   `json:"extensions,omitempty"`
	Filenames  []string                   `json:"filenames,omitempty"`
	Expando    string                     `json:"expando,omitempty"`
	Contexts   []syntax.ContextDescriptor `json:"contexts,omitempty"`
	Chain      []string                   `json:"chain,omitempty"`
}

// Library is the shared library's file name in the grammar directory.
func (s Spec) Library() string { return "libtree-sitter-" + s.ID + ".so" }

// Symbol is the grammar's language function.
func (s Spec) Symbol() string { return "tree_sitter_" + strings.ReplaceAll(s.ID, "-", "_") }

// descriptor is the syntax.GrammarDescriptor written next to the library.
func (s Spec) descriptor() syntax.GrammarDescriptor {
	return syntax.GrammarDescriptor{
		ID: s.ID, Aliases: s.Aliases, Library: s.Library(), Symbol: s.Symbol(),
		Extensions: s.Extensions, Filenames: s.Filenames, Expando: s.Expando,
		Version: s.Version, Integrity: s.Integrity, Contexts: s.Contexts, Chain: s.Chain,
	}
}

// Specs returns the grammars berth can install, by id.
func Specs() ([]Spec, error) {
	ents, err := specFiles.ReadDir(".")
	if err != nil {
		return nil, err
	}
	var out []Spec
	for _, e := range ents {
		b, err := specFiles.ReadFile(e.Name())
		if err != nil {
			return nil, err
		}
		var s Spec
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			return nil, fmt.Errorf("grammars: embedded %s: %w", e.Name(), err)
		}
		if s.ID+".json" != e.Name() || s.Package == "" || s.Version == "" || !strings.HasPrefix(s.Integrity, "sha512-") || s.Check == "" {
			return nil, fmt.Errorf("grammars: embedded %s must name its id (as the file), package, version, sha512 integrity and check snippet", e.Name())
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Names returns the ids of the grammars berth can install.
func Names() []string {
	specs, _ := Specs()
	var out []string
	for _, s := range specs {
		out = append(out, s.ID)
	}
	return out
}

// Lookup returns the spec of an installable grammar (by id or alias).
func Lookup(name string) (Spec, bool) {
	specs, _ := Specs()
	name = strings.ToLower(strings.TrimSpace(name))
	for _, s := range specs {
		if s.ID == name {
			return s, true
		}
		for _, a := range s.Aliases {
			if strings.ToLower(a) == name {
				return s, true
			}
		}
	}
	return Spec{}, false
}

// Hint is the sentence an unknown-language error adds for a language berth
// can install, or "" when it cannot.
func Hint(name string) string {
	s, ok := Lookup(name)
	if !ok {
		return ""
	}
	return fmt.Sprintf("the %s grammar is not installed: run `berth grammars install %s` on the machine berth runs on (needs a C compiler), then retry", s.ID, s.ID)
}

// Options configure Install.
type Options struct {
	// Dir is the grammar directory; "" means syntax.DefaultGrammarDir().
	Dir string
	// Registry is the npm registry's base URL; "" means Registry(ctx).
	Registry string
	// Client downloads the tarball; nil means a client with downloadTimeout.
	Client *http.Client
	// CC and CXX are the C and C++ compilers; "" means $CC/$CXX, else the
	// first of cc, gcc, clang (c++, g++, clang++) on PATH.
	CC, CXX string
	// Force reinstalls a grammar that is already installed.
	Force bool
	// Log receives one line per step; nil discards them.
	Log io.Writer
}

// Result says what Install did.
type Result struct {
	ID, Version string
	Dir         string // the grammar directory
	Library     string // absolute path of the shared library
	Descriptor  string // absolute path of the descriptor
	// Skipped is true when the same version and integrity were installed
	// already and still pass the check.
	Skipped bool
}

// Registry returns the npm registry to download from: $BERTH_NPM_REGISTRY,
// else npm's $npm_config_registry, else `npm config get registry` when npm
// is on PATH, else DefaultRegistry.
func Registry(ctx context.Context) string {
	for _, env := range []string{RegistryEnv, "npm_config_registry", "NPM_CONFIG_REGISTRY"} {
		if v := strings.TrimSpace(os.Getenv(env)); v != "" {
			return v
		}
	}
	if npm, err := exec.LookPath("npm"); err == nil {
		cctx, cancel := context.WithTimeout(ctx, registryConfigTimeout)
		defer cancel()
		out, err := exec.CommandContext(cctx, npm, "config", "get", "registry").Output()
		if v := strings.TrimSpace(string(out)); err == nil && strings.HasPrefix(v, "http") {
			return v
		}
	}
	return DefaultRegistry
}

// TarballURL is the conventional npm tarball address of pkg@version under
// registry (REGISTRY/pkg/-/pkg-version.tgz; a scoped @s/pkg keeps its scope
// in the path and drops it from the file name).
func TarballURL(registry, pkg, version string) (string, error) {
	u, err := url.Parse(strings.TrimRight(registry, "/") + "/")
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", fmt.Errorf("grammars: npm registry %q is not an http(s) URL; set %s or npm's registry to one", registry, RegistryEnv)
	}
	base := pkg
	if i := strings.LastIndex(pkg, "/"); i >= 0 {
		base = pkg[i+1:]
	}
	return u.JoinPath(pkg, "-", base+"-"+version+".tgz").String(), nil
}

func (o *Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, format+"\n", args...)
	}
}

// Install installs the grammar named name into opt.Dir.
func Install(ctx context.Context, name string, opt Options) (Result, error) {
	s, ok := Lookup(name)
	if !ok {
		return Result{}, fmt.Errorf("grammars: berth cannot install a grammar named %q; it installs: %s (a grammar of your own can be added by config, see syntax/grammars/README.md)", name, strings.Join(Names(), ", "))
	}
	return install(ctx, s, opt)
}

func install(ctx context.Context, s Spec, opt Options) (Result, error) {
	dir := opt.Dir
	if dir == "" {
		dir = syntax.DefaultGrammarDir()
		if dir == "" {
			return Result{}, fmt.Errorf("grammars: no grammar directory (no $HOME, $XDG_CACHE_HOME or $%s); pass --dir", syntax.GrammarDirEnv)
		}
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return Result{}, fmt.Errorf("grammars: grammar directory %s: %w", opt.Dir, err)
	}
	res := Result{ID: s.ID, Version: s.Version, Dir: dir, Library: filepath.Join(dir, s.Library()), Descriptor: filepath.Join(dir, s.ID+".json")}
	if !opt.Force && installed(ctx, s, res.Descriptor) {
		// The library is the pinned one; the descriptor follows this
		// berth's metadata (context ladder, chain kinds), which may be
		// newer than the berth that installed it.
		fresh, err := refreshDescriptor(res.Descriptor, s.descriptor())
		if err != nil {
			return res, err
		}
		if fresh {
			opt.logf("%s %s: already installed in %s; its descriptor was updated to this berth's", s.ID, s.Version, dir)
		} else {
			opt.logf("%s %s: already installed in %s", s.ID, s.Version, dir)
		}
		res.Skipped = true
		return res, nil
	}
	if findTool(opt.CC, "CC", "cc", "gcc", "clang") == "" {
		return res, fmt.Errorf("grammars: %s %s: %w", s.ID, s.Version, errNoCC)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, fmt.Errorf("grammars: cannot create the grammar directory: %w; pass --dir a writable directory", err)
	}
	work, err := os.MkdirTemp(dir, ".install-"+s.ID+"-")
	if err != nil {
		return res, fmt.Errorf("grammars: cannot write in the grammar directory: %w; pass --dir a writable directory", err)
	}
	defer os.RemoveAll(work)

	registry := opt.Registry
	if registry == "" {
		registry = Registry(ctx)
	}
	u, err := TarballURL(registry, s.Package, s.Version)
	if err != nil {
		return res, err
	}
	opt.logf("%s %s: downloading %s", s.ID, s.Version, u)
	tgz, err := download(ctx, opt.Client, u)
	if err != nil {
		return res, fmt.Errorf("grammars: %s %s: %w", s.ID, s.Version, err)
	}
	if err := checkIntegrity(tgz, s.Integrity); err != nil {
		return res, fmt.Errorf("grammars: %s@%s from %s: %w", s.Package, s.Version, u, err)
	}
	src := filepath.Join(work, "src")
	files, err := extract(tgz, src)
	if err != nil {
		return res, fmt.Errorf("grammars: %s@%s: %w", s.Package, s.Version, err)
	}
	opt.logf("%s %s: compiling %s", s.ID, s.Version, strings.Join(files, ", "))
	lib := filepath.Join(work, s.Library())
	if err := compile(ctx, opt, src, files, lib); err != nil {
		return res, fmt.Errorf("grammars: %s %s: %w", s.ID, s.Version, err)
	}
	desc := filepath.Join(work, s.ID+".json")
	if err := writeDescriptor(desc, s.descriptor()); err != nil {
		return res, err
	}
	if err := syntax.CheckGrammar(ctx, desc, []byte(s.Check)); err != nil {
		return res, fmt.Errorf("grammars: %s %s was built but fails its check: %w", s.ID, s.Version, err)
	}
	// The library first: a descriptor never names a library that is not there.
	if err := os.Rename(lib, res.Library); err != nil {
		return res, fmt.Errorf("grammars: installing %s: %w", res.Library, err)
	}
	if err := os.Rename(desc, res.Descriptor); err != nil {
		return res, fmt.Errorf("grammars: installing %s: %w", res.Descriptor, err)
	}
	opt.logf("%s %s: installed %s and %s", s.ID, s.Version, res.Library, res.Descriptor)
	return res, nil
}

// installed reports whether desc describes this exact spec and its library
// still passes the check.
func installed(ctx context.Context, s Spec, desc string) bool {
	d, err := syntax.ReadGrammarDescriptor(desc)
	if err != nil || d.Version != s.Version || d.Integrity != s.Integrity || d.Library != s.Library() {
		return false
	}
	return syntax.CheckGrammar(ctx, desc, []byte(s.Check)) == nil
}

// refreshDescriptor rewrites the descriptor at path (atomically) when it
// differs from d, and reports whether it did.
func refreshDescriptor(path string, d syntax.GrammarDescriptor) (bool, error) {
	want, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return false, err
	}
	want = append(want, '\n')
	if have, err := os.ReadFile(path); err == nil && bytes.Equal(have, want) {
		return false, nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, want, 0o644); err != nil {
		return false, fmt.Errorf("grammars: writing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return false, fmt.Errorf("grammars: installing %s: %w", path, err)
	}
	return true, nil
}

func writeDescriptor(path string, d syntax.GrammarDescriptor) error {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("grammars: writing %s: %w", path, err)
	}
	return nil
}

// download GETs u into memory, at most maxTarballBytes.
func download(ctx context.Context, c *http.Client, u string) ([]byte, error) {
	if c == nil {
		c = &http.Client{Timeout: downloadTimeout}
	}
	ctx, cancel := context.WithTimeout(ctx, downloadTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("downloading %s: %w; check the network or point %s (or npm's registry) at a reachable npm registry", u, err, RegistryEnv)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("downloading %s: %s; the registry does not serve this exact version (check %s or npm's registry setting)", u, resp.Status, RegistryEnv)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxTarballBytes+1))
	if err != nil {
		return nil, fmt.Errorf("downloading %s: %w", u, err)
	}
	if len(b) > maxTarballBytes {
		return nil, fmt.Errorf("downloading %s: over %d bytes; that is not the pinned grammar tarball", u, maxTarballBytes)
	}
	return b, nil
}

// ErrIntegrity is the error a tarball whose digest differs from the pinned
// integrity wraps.
var ErrIntegrity = errors.New("integrity mismatch")

// checkIntegrity compares b's sha512 with an npm subresource integrity
// string ("sha512-BASE64").
func checkIntegrity(b []byte, integrity string) error {
	want, ok := strings.CutPrefix(integrity, "sha512-")
	if !ok {
		return fmt.Errorf("%w: berth pins only sha512 integrities, got %q", ErrIntegrity, integrity)
	}
	sum := sha512.Sum512(b)
	got := base64.StdEncoding.EncodeToString(sum[:])
	if subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		return fmt.Errorf("%w: the tarball is sha512-%s, berth pins %s; nothing was installed (a registry mirror serving other bytes, or a tampered download)", ErrIntegrity, got, integrity)
	}
	return nil
}

// ErrHostileArchive is the error a tarball with an entry that could write
// outside its directory wraps.
var ErrHostileArchive = errors.New("hostile archive")

// wanted reports whether a path inside the package (its top directory
// removed) is a parser source berth compiles or includes.
func wanted(rel string) bool {
	switch rel {
	case "src/parser.c", "src/scanner.c", "src/scanner.cc":
		return true
	}
	dir, file := path.Split(rel)
	return dir == "src/tree_sitter/" && strings.HasSuffix(file, ".h")
}

// extract writes the parser sources of an npm tarball into dst (as
// dst/parser.c, dst/tree_sitter/parser.h, …) and returns the compilable
// files (relative to dst). It refuses the whole tarball when any entry is a
// link or device, or its name is absolute or climbs out with "..", and
// writes nothing then.
func extract(tgz []byte, dst string) ([]string, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, fmt.Errorf("the tarball is not gzip: %w", err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	type file struct {
		rel  string
		data []byte
	}
	var keep []file
	var total int64
	for n := 0; ; n++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading the tarball: %w", err)
		}
		if n >= maxTarEntries {
			return nil, fmt.Errorf("%w: over %d entries", ErrHostileArchive, maxTarEntries)
		}
		name := h.Name
		if strings.HasPrefix(name, "/") || strings.HasPrefix(name, `\`) || filepath.IsAbs(name) || (len(name) > 1 && name[1] == ':') {
			return nil, fmt.Errorf("%w: entry %q has an absolute path; nothing was installed", ErrHostileArchive, name)
		}
		for _, part := range strings.FieldsFunc(name, func(r rune) bool { return r == '/' || r == '\\' }) {
			if part == ".." {
				return nil, fmt.Errorf("%w: entry %q climbs out of the package with \"..\"; nothing was installed", ErrHostileArchive, name)
			}
		}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeDir, tar.TypeXGlobalHeader:
		default:
			return nil, fmt.Errorf("%w: entry %q is a %s, not a file or directory (links are refused); nothing was installed", ErrHostileArchive, name, typeName(h.Typeflag))
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		clean := path.Clean(strings.TrimPrefix(name, "./"))
		_, rel, ok := strings.Cut(clean, "/") // npm tarballs put everything under one top directory ("package/")
		if !ok || !wanted(rel) {
			continue
		}
		if h.Size > maxSourceBytes {
			return nil, fmt.Errorf("%w: %s is %d bytes, over %d", ErrHostileArchive, name, h.Size, maxSourceBytes)
		}
		total += h.Size
		if total > maxExtractBytes {
			return nil, fmt.Errorf("%w: the parser sources are over %d bytes together", ErrHostileArchive, maxExtractBytes)
		}
		data, err := io.ReadAll(io.LimitReader(tr, maxSourceBytes+1))
		if err != nil {
			return nil, fmt.Errorf("reading %s from the tarball: %w", name, err)
		}
		keep = append(keep, file{strings.TrimPrefix(rel, "src/"), data})
	}
	var sources []string
	hasParser := false
	for _, f := range keep {
		switch f.rel {
		case "parser.c":
			hasParser = true
			sources = append(sources, f.rel)
		case "scanner.c", "scanner.cc":
			sources = append(sources, f.rel)
		}
	}
	if !hasParser {
		return nil, fmt.Errorf("the package ships no src/parser.c (a generated parser is needed)")
	}
	for _, f := range keep {
		p := filepath.Join(dst, filepath.FromSlash(f.rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		// O_EXCL: a name that appears twice in the tarball is not written twice.
		w, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return nil, fmt.Errorf("%w: writing %s: %v", ErrHostileArchive, f.rel, err)
		}
		_, err = w.Write(f.data)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("writing %s: %w", p, err)
		}
	}
	sort.Strings(sources)
	return sources, nil
}

func typeName(t byte) string {
	switch t {
	case tar.TypeSymlink:
		return "symbolic link"
	case tar.TypeLink:
		return "hard link"
	case tar.TypeChar, tar.TypeBlock:
		return "device"
	case tar.TypeFifo:
		return "fifo"
	}
	return fmt.Sprintf("tar entry of type %q", t)
}

// errNoCC says how to get a C compiler.
var errNoCC = errors.New("no C compiler found ($CC, cc, gcc, clang); install one (Debian/Ubuntu: apt-get install gcc; Alpine: apk add build-base; macOS: xcode-select --install) and run the install again")

// findTool returns the first of env's value and names found on PATH.
func findTool(explicit, env string, names ...string) string {
	for _, n := range append([]string{explicit, os.Getenv(env)}, names...) {
		if n == "" {
			continue
		}
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return ""
}

// compile builds the sources in src into the shared library lib.
func compile(ctx context.Context, opt Options, src string, files []string, lib string) error {
	cc := findTool(opt.CC, "CC", "cc", "gcc", "clang")
	if cc == "" {
		return errNoCC
	}
	linker := cc
	var objs []string
	for _, f := range files {
		comp := cc
		args := []string{"-O2", "-fPIC"}
		if strings.HasSuffix(f, ".cc") {
			comp = findTool(opt.CXX, "CXX", "c++", "g++", "clang++")
			if comp == "" {
				return fmt.Errorf("%s is C++ and no C++ compiler was found ($CXX, c++, g++, clang++); install one (Debian/Ubuntu: apt-get install g++) and run the install again", f)
			}
			linker = comp
		}
		obj := filepath.Join(src, strings.TrimSuffix(f, filepath.Ext(f))+".o")
		args = append(args, "-I", src, "-c", filepath.Join(src, f), "-o", obj)
		if err := run(ctx, comp, args...); err != nil {
			return err
		}
		objs = append(objs, obj)
	}
	return run(ctx, linker, append([]string{"-shared", "-o", lib}, objs...)...)
}

func run(ctx context.Context, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, compileTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(out.String())
		if len(msg) > 2000 {
			msg = msg[len(msg)-2000:]
		}
		return fmt.Errorf("%s %s failed: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, msg)
	}
	return nil
}

// Installed is one grammar found in a grammar directory.
type Installed struct {
	ID, Version, Integrity string
	Descriptor, Library    string
	// Pinned is the version berth installs for this id ("" when berth does
	// not know the grammar: one added by config).
	Pinned string
	// Err is set when the descriptor cannot be read or its library is
	// missing.
	Err error
}

// List returns the grammars whose descriptors are in dir (a missing dir is
// an empty list).
func List(dir string) ([]Installed, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("grammars: %w", err)
	}
	var out []Installed
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		it := Installed{Descriptor: p, ID: strings.TrimSuffix(e.Name(), ".json")}
		d, err := syntax.ReadGrammarDescriptor(p)
		if err != nil {
			it.Err = err
			out = append(out, it)
			continue
		}
		it.ID, it.Version, it.Integrity = d.ID, d.Version, d.Integrity
		it.Library = d.Library
		if !filepath.IsAbs(it.Library) {
			it.Library = filepath.Join(dir, it.Library)
		}
		if _, err := os.Stat(it.Library); err != nil {
			it.Err = fmt.Errorf("library missing: %w; reinstall with `berth grammars install --force %s`", err, d.ID)
		}
		if s, ok := Lookup(d.ID); ok {
			it.Pinned = s.Version
		}
		out = append(out, it)
	}
	return out, nil
}
