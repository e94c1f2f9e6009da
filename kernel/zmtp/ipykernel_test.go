package zmtp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// systemPython is Debian's python, which has python3-ipykernel.
const systemPython = "/usr/bin/python3"

// freePort returns a loopback port nothing listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestHandshakeWithIPyKernel dials each of a real ipykernel's sockets
// (libzmq on the other side) with the socket type a Jupyter client uses,
// and checks the handshake and one exchange: a heartbeat echo.
func TestHandshakeWithIPyKernel(t *testing.T) {
	if err := exec.Command(systemPython, "-c", "import ipykernel").Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("ipykernel is not importable by %s: %v", systemPython, err)
		}
		t.Skipf("ipykernel is not importable by %s: %v", systemPython, err)
	}
	dir := t.TempDir()
	ports := map[string]int{}
	for _, name := range []string{"shell", "iopub", "stdin", "control", "hb"} {
		ports[name] = freePort(t)
	}
	file, _ := json.Marshal(map[string]any{
		"transport": "tcp", "ip": "127.0.0.1", "key": "k", "signature_scheme": "hmac-sha256",
		"shell_port": ports["shell"], "iopub_port": ports["iopub"], "stdin_port": ports["stdin"],
		"control_port": ports["control"], "hb_port": ports["hb"],
	})
	path := filepath.Join(dir, "conn.json")
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(systemPython, "-m", "ipykernel_launcher", "-f", path)
	cmd.Env = append(os.Environ(), "HOME="+dir, "IPYTHONDIR="+filepath.Join(dir, "ipython"), "JUPYTER_RUNTIME_DIR="+dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("kernel output:\n%s", out.String())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, tc := range []struct {
		port string
		typ  SocketType
		opts Options
		peer []string
	}{
		{"hb", Req, Options{}, []string{"REP", "ROUTER"}},
		{"shell", Dealer, Options{Identity: []byte("berth-test")}, []string{"ROUTER"}},
		{"stdin", Dealer, Options{Identity: []byte("berth-test")}, []string{"ROUTER"}},
		{"control", Dealer, Options{}, []string{"ROUTER"}},
		{"iopub", Sub, Options{Subscribe: []string{""}}, []string{"PUB", "XPUB"}},
	} {
		addr := fmt.Sprintf("127.0.0.1:%d", ports[tc.port])
		s := NewSocket(tc.typ, tc.opts, func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}, 100*time.Millisecond)
		defer s.Close()
		c, err := s.Conn(ctx)
		if err != nil {
			t.Fatalf("%s: %v", tc.port, err)
		}
		if !strings.Contains(strings.Join(tc.peer, " "), c.PeerType()) {
			t.Errorf("%s: peer type %q, want one of %q", tc.port, c.PeerType(), tc.peer)
		}
		if tc.port != "hb" {
			continue
		}
		if err := s.Send(ctx, [][]byte{[]byte("ping-1")}); err != nil {
			t.Fatal(err)
		}
		frames, err := c.ReadMessage(64)
		if err != nil {
			t.Fatal(err)
		}
		if len(frames) != 2 || len(frames[0]) != 0 || string(frames[1]) != "ping-1" {
			t.Errorf("heartbeat echo %q, want the empty delimiter and ping-1", frames)
		}
	}
}
