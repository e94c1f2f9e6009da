package lsp

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/framing/framingtest"
)

// TestRealServer runs the whole client against a real language server when
// one is installed (gopls, else pylsp); it installs nothing.
func TestRealServer(t *testing.T) {
	type server struct {
		bin, lang, file, src, wantDiag, wantHover string
		args                                      []string
		files                                     map[string]string
		hover                                     Position
	}
	servers := []server{
		{bin: "gopls", args: []string{"serve"}, lang: "go", file: "main.go",
			files:    map[string]string{"go.mod": "module example.com/m\n\ngo 1.21\n"},
			src:      "package main\n\nvar x int = \"oops\"\n\nfunc main() { _ = x }\n",
			wantDiag: "oops", hover: Position{Line: 2, Character: 4}, wantHover: "int"},
		{bin: "pylsp", lang: "python", file: "a.py",
			files:    map[string]string{"setup.py": ""},
			src:      "def greet(name):\n    return undefined_name + name\n",
			wantDiag: "undefined_name", hover: Position{Line: 0, Character: 5}, wantHover: "greet"},
	}
	var s server
	var bin string
	for _, cand := range servers {
		if p, err := exec.LookPath(cand.bin); err == nil {
			s, bin = cand, p
			break
		}
	}
	if bin == "" {
		t.Skip("neither gopls nor pylsp is on PATH")
	}
	dir := t.TempDir()
	for name, text := range s.files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, s.file)
	if err := os.WriteFile(path, []byte(s.src), 0o644); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(bin, s.args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stream, err := framingtest.Stdio(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait closes the pipes once the server exits, and the server exits
	// as soon as it reads "exit": waited for only after the client's
	// Shutdown and Close (deferred after this), it cannot close the stream
	// under Shutdown ("close |1: file already closed", seen in CI).
	defer func() {
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill() // the supervisor's last step
			<-exited
		}
	}()

	cl := NewClient(stream, ConnOptions{})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root, _ := FileURI(dir)
	uri, _ := FileURI(path)
	if _, err := cl.Initialize(ctx, InitOptions{RootURI: root}); err != nil {
		t.Fatalf("initialize: %v\nstderr: %s", err, stderr.String())
	}
	t.Logf("%s: server %+v, encoding %s", s.bin, cl.ServerInfo(), cl.PositionEncoding())
	v, err := cl.DidOpen(ctx, uri, s.lang, s.src)
	if err != nil {
		t.Fatal(err)
	}
	d, err := cl.WaitDiagnostics(ctx, uri, v)
	for err == nil && len(d.Diagnostics) == 0 { // an empty list may come first
		d, err = cl.WaitPublish(ctx, d.Seq, func(n DiagnosticSet) bool { return canonicalURI(n.URI) == uri })
	}
	if err != nil {
		t.Fatalf("diagnostics: %v\nmessages: %+v", err, cl.Messages())
	}
	if !strings.Contains(d.Diagnostics[0].Message, s.wantDiag) {
		t.Fatalf("diagnostics = %+v; want one mentioning %q", d.Diagnostics, s.wantDiag)
	}
	h, err := cl.Hover(ctx, uri, s.hover)
	if err != nil || h == nil {
		t.Fatalf("hover = %v, %v", h, err)
	}
	if text, err := h.Text(); err != nil || !strings.Contains(text, s.wantHover) {
		t.Fatalf("hover text %q, %v; want it to mention %q", text, err, s.wantHover)
	}
	if err := cl.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}
