package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	lspc "berth.dev/berth/lsp"
	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools/lsp"
	"berth.dev/berth/tools/lsp/lsptest"
)

// serverBench is one language server of the table measured both ways: the
// server of the table with id, on project files (given the workspace's
// absolute path), asked hover and references at pos of file, which must
// find refs locations.
type serverBench struct {
	id    string
	image string
	host  func(t *testing.T) string // the binary on the host
	files func(root string) map[string]string
	file  string
	pos   lspc.Position
	refs  int
}

// npmBin returns a binary of BERTH_LSP_NPM_BIN (tests/run installs the npm
// language servers there), or skips.
func npmBin(name string) func(t *testing.T) string {
	return func(t *testing.T) string {
		t.Helper()
		p := filepath.Join(os.Getenv("BERTH_LSP_NPM_BIN"), name)
		if os.Getenv("BERTH_LSP_NPM_BIN") == "" {
			t.Skip("BERTH_LSP_NPM_BIN is not set (tests/run installs the npm language servers and sets it)")
		}
		if _, err := os.Stat(p); err != nil {
			t.Skipf("no %s in BERTH_LSP_NPM_BIN: %v", name, err)
		}
		return p
	}
}

func pathBin(name string) func(t *testing.T) string {
	return func(t *testing.T) string {
		t.Helper()
		p, err := exec.LookPath(name)
		if err != nil {
			t.Skipf("%s is not on PATH", name)
		}
		return p
	}
}

func fixed(files map[string]string) func(string) map[string]string {
	return func(string) map[string]string { return files }
}

// tableServer returns the server of berth's table with id.
func tableServer(t *testing.T, id string) lsp.Server {
	t.Helper()
	for _, sv := range lsp.DefaultServers() {
		if sv.ID == id {
			return sv
		}
	}
	t.Fatalf("no %s in the server table", id)
	return lsp.Server{}
}

// startServerSide initializes a server of the table over rw with the
// project at root, opens its files, and waits for its indexing (a server
// that indexes in the background gets up to 5 s to begin).
func startServerSide(t *testing.T, name string, sv lsp.Server, rw io.ReadWriteCloser, root string, files map[string]string, stop func()) *lspSide {
	t.Helper()
	c := lspc.NewClient(rw, lspc.ConnOptions{Settings: sv.Settings})
	rootURI, _ := lspc.FileURI(root)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if _, err := c.Initialize(ctx, lspc.InitOptions{RootURI: rootURI, InitializationOptions: sv.InitOptions}); err != nil {
		t.Fatalf("%s %s: initialize: %v", sv.ID, name, err)
	}
	if sv.Settings != nil {
		if err := c.Notify(ctx, "workspace/didChangeConfiguration", map[string]any{"settings": sv.Settings}); err != nil {
			t.Fatal(err)
		}
	}
	s := &lspSide{name: name, c: c, root: root, stop: stop}
	for n, text := range files {
		if id, ok := sv.Languages[path.Ext(n)]; ok {
			if _, err := c.DidOpen(ctx, s.uri(n), id, text); err != nil {
				t.Fatal(err)
			}
		}
	}
	if sv.BackgroundIndex {
		bctx, bcancel := context.WithTimeout(ctx, 5*time.Second)
		c.WaitBusy(bctx)
		bcancel()
	}
	if err := c.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// measureServers compares each server through berth's exec stream in its
// image with the same server started directly on the host: hover and
// references, against the echo floor of the same stream.
func measureServers(t *testing.T, title string, cases []serverBench) {
	if os.Getenv(envRun) != "1" {
		t.Skipf("set %s=1 to measure the language-server path (takes a few minutes); bench/run does", envRun)
	}
	n := envInt(envLSPQueries, defaultLSPQueries)
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "server\tmeasure\thost direct\tcontainer via exec\tratio\tadded\tgoal (floor + 50 µs)\t\n")
	for _, bc := range cases {
		t.Run(bc.id, func(t *testing.T) {
			ctx := t.Context()
			sv := tableServer(t, bc.id)
			bin := bc.host(t)
			_, sb := benchContainer(t, bc.image, bc.files(benchWorkspace))
			// The floor: a 100-byte echo through the exec stream, and on the host.
			echo, err := sandbox.Pipe(ctx, sb, &sandbox.Cmd{Args: []string{"cat"}})
			if err != nil {
				t.Fatal(err)
			}
			floor := echoRTT(t, echo, n*3)
			echo.Close()
			hostCat := exec.Command("cat")
			hin, _ := hostCat.StdinPipe()
			hout, _ := hostCat.StdoutPipe()
			if err := hostCat.Start(); err != nil {
				t.Fatal(err)
			}
			hostFloor := echoRTT(t, procStream{hout, hin}, n*3)
			hin.Close()
			hostCat.Wait()

			dir := t.TempDir()
			hostFiles := bc.files(dir)
			for name, text := range hostFiles {
				os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)
				os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644)
			}
			cmd := exec.Command(bin, sv.Args...)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"))
			in, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			host := startServerSide(t, "host", sv, procStream{stdout, in}, dir, hostFiles, func() { cmd.Process.Kill(); cmd.Wait() })
			defer host.stop()
			ps, err := sandbox.Pipe(ctx, sb, &sandbox.Cmd{Args: append([]string{path.Base(bin)}, sv.Args...), Dir: benchWorkspace})
			if err != nil {
				t.Fatal(err)
			}
			ctr := startServerSide(t, "container", sv, ps, benchWorkspace, bc.files(benchWorkspace), func() { ps.Close() })
			defer ctr.stop()

			hostHover, hostRefs := hoverAndRefsAt(t, host, bc, n)
			ctrHover, ctrRefs := hoverAndRefsAt(t, ctr, bc, n)
			goal := median(floor) - median(hostFloor) + 50*time.Microsecond
			fmt.Fprintf(tw, "%s\techo %d B (the floor)\t%s\t%s\t%.2f\t%s\t\t\n", bc.id, echoBytes, us(median(hostFloor)), us(median(floor)), ratio(floor, hostFloor), us(median(floor)-median(hostFloor)))
			for _, r := range []struct {
				name      string
				host, ctr []time.Duration
			}{{"hover", hostHover, ctrHover}, {"references", hostRefs, ctrRefs}} {
				added := median(r.ctr) - median(r.host)
				verdict := "met"
				if added > goal {
					verdict = "NOT met"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.2f\t%s\t%s (%s)\t\n", bc.id, r.name, us(median(r.host)), us(median(r.ctr)), ratio(r.ctr, r.host), us(added), us(goal), verdict)
			}
		})
	}
	tw.Flush()
	t.Logf("%s, median of %d requests (added = container − host; goal = the exec stream's own added echo time + 50 µs):\n%s", title, n, b.String())
}

// hoverAndRefsAt measures hover and references at bc's position.
func hoverAndRefsAt(t *testing.T, s *lspSide, bc serverBench, n int) (hover, refs []time.Duration) {
	uri := s.uri(bc.file)
	hover = timeRequests(t, s, n, func(ctx context.Context) error {
		h, err := s.c.Hover(ctx, uri, bc.pos)
		if err == nil && h == nil {
			err = fmt.Errorf("no hover")
		}
		return err
	})
	refs = timeRequests(t, s, n, func(ctx context.Context) error {
		locs, err := s.c.References(ctx, uri, bc.pos, true)
		if err == nil && len(locs) != bc.refs {
			err = fmt.Errorf("%d references, want %d", len(locs), bc.refs)
		}
		return err
	})
	return hover, refs
}

// TestLSPNpmReport compares pyright, typescript-language-server and
// bash-language-server through berth's exec stream in berth-test-node with
// the same servers (BERTH_LSP_NPM_BIN) started directly on the host. Run it
// with BERTH_BENCH=1 (bench/run).
func TestLSPNpmReport(t *testing.T) {
	measureServers(t, "npm language servers", []serverBench{
		{id: "pyright", image: "berth-test-node", host: npmBin("pyright-langserver"), files: fixed(lsptest.PythonProject),
			file: "main.py", pos: lspc.Position{Line: 2, Character: 6}, refs: 4},
		{id: "typescript-language-server", image: "berth-test-node", host: npmBin("typescript-language-server"), files: fixed(lsptest.TSProject),
			file: "src/main.ts", pos: lspc.Position{Line: 3, Character: 12}, refs: 6},
		{id: "bash-language-server", image: "berth-test-node", host: npmBin("bash-language-server"), files: fixed(lsptest.BashProject),
			file: "main.sh", pos: lspc.Position{Line: 3, Character: 0}, refs: 3},
	})
}
