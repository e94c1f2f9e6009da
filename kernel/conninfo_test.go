package kernel

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

func TestConnectionInfoRedactsKey(t *testing.T) {
	info, err := NewConnectionInfo(ConnectionConfig{KernelName: "python3"})
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Key) != 2*KeyBytes {
		t.Fatalf("key length %d, want %d hex chars", len(info.Key), 2*KeyBytes)
	}
	secret := string(info.Key)
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("conn", "info", info, "key", info.Key)
	slog.New(slog.NewTextHandler(&logs, nil)).Info("conn", "info", info, "key", info.Key)
	outputs := []string{
		fmt.Sprint(info), fmt.Sprintf("%v %+v %#v %s %q", info, info, info, info, info),
		fmt.Sprint(info.Key), fmt.Sprintf("%v %+v %#v %s %q %x", info.Key, info.Key, info.Key, info.Key, info.Key, info.Key),
		fmt.Sprintf("%v", &info), fmt.Sprintf("%+v", []ConnectionInfo{info}), fmt.Sprintf("%+v", struct{ C ConnectionInfo }{info}),
		info.String(), logs.String(),
	}
	for _, out := range outputs {
		if strings.Contains(out, secret) {
			t.Errorf("key leaked in %q", out)
		}
		if !strings.Contains(out, redacted) {
			t.Errorf("no redaction marker in %q", out)
		}
	}
	file, err := info.MarshalFile()
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(file, &back); err != nil {
		t.Fatal(err)
	}
	if back["key"] != secret || back["signature_scheme"] != SignatureScheme || back["transport"] != "tcp" || back["ip"] != "127.0.0.1" {
		t.Errorf("connection file %s lacks the clear key or defaults", redactedFile(file, secret))
	}
}

func redactedFile(b []byte, secret string) string {
	return strings.ReplaceAll(string(b), secret, redacted)
}

func TestNewConnectionInfo(t *testing.T) {
	tests := []struct {
		name    string
		cfg     ConnectionConfig
		wantErr bool
		check   func(t *testing.T, c ConnectionInfo)
	}{
		{name: "free tcp ports", check: func(t *testing.T, c ConnectionInfo) {
			if c.ShellPort == 0 || c.HBPort == 0 {
				t.Errorf("ports not picked: %v", c)
			}
		}},
		{name: "given ports and key", cfg: ConnectionConfig{IP: "127.0.0.1", Key: "abc", Ports: &Ports{1, 2, 3, 4, 5}}, check: func(t *testing.T, c ConnectionInfo) {
			if c.Key != "abc" || c.ShellPort != 1 || c.HBPort != 5 {
				t.Errorf("given values not kept: %v", c)
			}
			if n, a, _ := c.Endpoint(Control); n != "tcp" || a != "127.0.0.1:4" {
				t.Errorf("Endpoint(control) = %s %s", n, a)
			}
		}},
		{name: "ipc", cfg: ConnectionConfig{Transport: "ipc", IP: "/run/k/kernel"}, check: func(t *testing.T, c ConnectionInfo) {
			if n, a, _ := c.Endpoint(Heartbeat); n != "unix" || a != "/run/k/kernel-5" {
				t.Errorf("Endpoint(hb) = %s %s", n, a)
			}
		}},
		{name: "ipc without path", cfg: ConnectionConfig{Transport: "ipc"}, wantErr: true},
		{name: "unknown transport", cfg: ConnectionConfig{Transport: "udp"}, wantErr: true},
		{name: "duplicate ports", cfg: ConnectionConfig{Ports: &Ports{1, 1, 3, 4, 5}}, wantErr: true},
		{name: "port out of range", cfg: ConnectionConfig{Ports: &Ports{1, 2, 3, 4, 70000}}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewConnectionInfo(tt.cfg)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %t", err, tt.wantErr)
			}
			if err == nil && tt.check != nil {
				tt.check(t, c)
			}
		})
	}
}

func TestKeysDiffer(t *testing.T) {
	a, _ := NewKey()
	b, _ := NewKey()
	if a == b {
		t.Fatal("two generated keys are equal")
	}
}

// TestPickedPortsNotHandedTwice: kernels started at once (two runs) get
// connection files whose ports were picked by listening on :0 and closing
// again; the operating system may hand a port just released to the next
// pick. No port this process picked is handed out again within
// PortReuseAfter.
func TestPickedPortsNotHandedTwice(t *testing.T) {
	const pickers, each = 8, 40 // 1,600 ports
	var (
		mu   sync.Mutex
		seen = map[int]int{}
		wg   sync.WaitGroup
	)
	for g := 0; g < pickers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				info, err := NewConnectionInfo(ConnectionConfig{})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, p := range []int{info.ShellPort, info.IOPubPort, info.StdinPort, info.ControlPort, info.HBPort} {
					seen[p]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	twice := 0
	for p, n := range seen {
		if n > 1 {
			twice++
			if twice <= 5 {
				t.Errorf("port %d handed out %d times", p, n)
			}
		}
	}
	if twice > 0 {
		t.Errorf("%d of %d ports handed out more than once", twice, len(seen))
	}
}
