package kernel

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"
)

// SignatureScheme is the only signature scheme this package speaks.
const SignatureScheme = "hmac-sha256"

// KeyBytes is the number of random bytes behind a generated key (256 bits);
// the key itself is their lowercase hex form.
const KeyBytes = 32

// redacted replaces the key wherever a [Key] or [ConnectionInfo] is printed
// or logged.
const redacted = "[redacted]"

// Key is the shared HMAC secret of one kernel. Its bytes are the ASCII bytes
// of the string, as in jupyter_client (the hex form is not decoded).
//
// A Key never prints: fmt verbs and slog show "[redacted]". It marshals to
// JSON in the clear, because the connection file must carry it; write that
// file with mode 0600 and never log it.
type Key string

// String returns "[redacted]".
func (Key) String() string { return redacted }

// GoString returns "[redacted]".
func (Key) GoString() string { return redacted }

// Format prints "[redacted]" for every verb.
func (Key) Format(f fmt.State, _ rune) { fmt.Fprint(f, redacted) }

// LogValue redacts the key in slog output.
func (Key) LogValue() slog.Value { return slog.StringValue(redacted) }

// NewKey returns a fresh random key: 256 bits, hex encoded.
func NewKey() (Key, error) {
	var b [KeyBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("kernel: generate key: %w", err)
	}
	return Key(hex.EncodeToString(b[:])), nil
}

// ConnectionInfo is the content of a Jupyter connection file. Marshal it
// with encoding/json to write the file the kernel is started with
// (`-f conn.json`). Printing or logging it redacts the key.
type ConnectionInfo struct {
	Transport       string `json:"transport"` // "tcp" or "ipc"
	IP              string `json:"ip"`        // tcp: the address; ipc: the socket path prefix
	ShellPort       int    `json:"shell_port"`
	IOPubPort       int    `json:"iopub_port"`
	StdinPort       int    `json:"stdin_port"`
	ControlPort     int    `json:"control_port"`
	HBPort          int    `json:"hb_port"`
	Key             Key    `json:"key"`
	SignatureScheme string `json:"signature_scheme"`
	KernelName      string `json:"kernel_name,omitempty"`
}

// String describes the connection with the key redacted.
func (c ConnectionInfo) String() string {
	return fmt.Sprintf("kernel.ConnectionInfo{transport=%s ip=%s shell=%d iopub=%d stdin=%d control=%d hb=%d key=%s scheme=%s kernel=%s}",
		c.Transport, c.IP, c.ShellPort, c.IOPubPort, c.StdinPort, c.ControlPort, c.HBPort, redacted, c.SignatureScheme, c.KernelName)
}

// GoString is [ConnectionInfo.String], so %#v redacts the key too.
func (c ConnectionInfo) GoString() string { return c.String() }

// Format prints [ConnectionInfo.String] for every verb.
func (c ConnectionInfo) Format(f fmt.State, _ rune) { fmt.Fprint(f, c.String()) }

// LogValue logs the connection with the key redacted.
func (c ConnectionInfo) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("transport", c.Transport),
		slog.String("ip", c.IP),
		slog.Int("shell_port", c.ShellPort),
		slog.Int("iopub_port", c.IOPubPort),
		slog.Int("stdin_port", c.StdinPort),
		slog.Int("control_port", c.ControlPort),
		slog.Int("hb_port", c.HBPort),
		slog.String("key", redacted),
		slog.String("signature_scheme", c.SignatureScheme),
		slog.String("kernel_name", c.KernelName),
	)
}

// Ports are the five ports of a kernel, in connection-file terms.
type Ports struct {
	Shell, IOPub, Stdin, Control, HB int
}

// ConnectionConfig says how [NewConnectionInfo] builds a connection.
type ConnectionConfig struct {
	// Transport is "tcp" (the default) or "ipc".
	Transport string
	// IP is the address the kernel binds (tcp, default 127.0.0.1) or the
	// socket path prefix (ipc, required). Never bind a kernel to a
	// reachable address: IOPub is readable without the key.
	IP string
	// Ports, when set, are used as given. When nil, tcp picks five free
	// ports by listening on IP:0 in this process (meaningful only when the
	// kernel runs in this network namespace), and ipc numbers them 1 to 5.
	Ports *Ports
	// Key, when set, is used as given; otherwise a fresh [NewKey].
	Key Key
	// KernelName is copied into the file.
	KernelName string
}

// NewConnectionInfo returns a connection with a random 256-bit key and the
// ports cfg asks for.
func NewConnectionInfo(cfg ConnectionConfig) (ConnectionInfo, error) {
	info := ConnectionInfo{
		Transport:       cfg.Transport,
		IP:              cfg.IP,
		Key:             cfg.Key,
		SignatureScheme: SignatureScheme,
		KernelName:      cfg.KernelName,
	}
	if info.Transport == "" {
		info.Transport = "tcp"
	}
	switch info.Transport {
	case "tcp":
		if info.IP == "" {
			info.IP = "127.0.0.1"
		}
	case "ipc":
		if info.IP == "" {
			return ConnectionInfo{}, errors.New("kernel: ipc transport needs IP set to a socket path prefix inside a private (0700) directory")
		}
	default:
		return ConnectionInfo{}, fmt.Errorf("kernel: unknown transport %q; use \"tcp\" or \"ipc\"", info.Transport)
	}
	if info.Key == "" {
		k, err := NewKey()
		if err != nil {
			return ConnectionInfo{}, err
		}
		info.Key = k
	}
	p := cfg.Ports
	if p == nil {
		var err error
		if p, err = pickPorts(info.Transport, info.IP); err != nil {
			return ConnectionInfo{}, err
		}
	}
	info.ShellPort, info.IOPubPort, info.StdinPort, info.ControlPort, info.HBPort = p.Shell, p.IOPub, p.Stdin, p.Control, p.HB
	if err := info.validate(); err != nil {
		return ConnectionInfo{}, err
	}
	return info, nil
}

// PortReuseAfter is how long a port this process picked for a kernel is
// not handed out again. Between the pick (the listener is closed at once)
// and the kernel's bind, the operating system may give the same free port
// to the next caller; two runs starting kernels at once would then race
// for it.
const PortReuseAfter = 2 * time.Minute

// maxPickTries bounds the listeners opened for one port while skipping
// recently picked ones.
const maxPickTries = 64

// picked remembers the ports this process handed out, and when.
var picked = struct {
	sync.Mutex
	at map[int]time.Time
}{at: map[int]time.Time{}}

// pickPorts chooses five distinct ports. For tcp it holds listeners on
// ip:0 at once, so the ports differ and a port picked within
// PortReuseAfter is skipped, then releases them for the kernel.
func pickPorts(transport, ip string) (*Ports, error) {
	if transport == "ipc" {
		return &Ports{Shell: 1, IOPub: 2, Stdin: 3, Control: 4, HB: 5}, nil
	}
	picked.Lock()
	defer picked.Unlock()
	now := time.Now()
	for p, at := range picked.at {
		if now.Sub(at) >= PortReuseAfter {
			delete(picked.at, p)
		}
	}
	var ports [5]int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for i := range ports {
		for try := 0; ports[i] == 0; try++ {
			if try == maxPickTries {
				return nil, fmt.Errorf("kernel: pick a free port on %s: %d tries gave only ports handed out in the last %v; pass Ports explicitly", ip, maxPickTries, PortReuseAfter)
			}
			l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
			if err != nil {
				return nil, fmt.Errorf("kernel: pick a free port on %s: %w; pass Ports explicitly", ip, err)
			}
			ls = append(ls, l) // held, so the next Listen gets another port
			if p := l.Addr().(*net.TCPAddr).Port; picked.at[p].IsZero() {
				ports[i] = p
			}
		}
	}
	for _, p := range ports {
		picked.at[p] = now
	}
	return &Ports{Shell: ports[0], IOPub: ports[1], Stdin: ports[2], Control: ports[3], HB: ports[4]}, nil
}

// validate checks what a client needs before it dials.
func (c ConnectionInfo) validate() error {
	if c.Transport != "tcp" && c.Transport != "ipc" {
		return fmt.Errorf("kernel: connection transport %q is not supported; use \"tcp\" or \"ipc\"", c.Transport)
	}
	if c.IP == "" {
		return errors.New("kernel: connection has no ip; set the address (tcp) or socket path prefix (ipc)")
	}
	if c.SignatureScheme != SignatureScheme {
		return fmt.Errorf("kernel: signature scheme %q is not supported; use %q", c.SignatureScheme, SignatureScheme)
	}
	if c.Key == "" {
		return errors.New("kernel: connection has no key; unsigned kernels are refused, generate one with NewConnectionInfo")
	}
	seen := map[int]bool{}
	for _, p := range []int{c.ShellPort, c.IOPubPort, c.StdinPort, c.ControlPort, c.HBPort} {
		if p <= 0 || p > 65535 {
			return fmt.Errorf("kernel: connection port %d is out of range 1-65535", p)
		}
		if seen[p] {
			return fmt.Errorf("kernel: connection port %d is used twice; each channel needs its own port", p)
		}
		seen[p] = true
	}
	return nil
}

// Endpoint returns the network ("tcp" or "unix") and address at which the
// kernel serves ch, as passed to a Dial function.
func (c ConnectionInfo) Endpoint(ch Channel) (network, address string, err error) {
	var port int
	switch ch {
	case Shell:
		port = c.ShellPort
	case IOPub:
		port = c.IOPubPort
	case Stdin:
		port = c.StdinPort
	case Control:
		port = c.ControlPort
	case Heartbeat:
		port = c.HBPort
	default:
		return "", "", fmt.Errorf("kernel: unknown channel %q", ch)
	}
	if c.Transport == "ipc" {
		return "unix", c.IP + "-" + strconv.Itoa(port), nil
	}
	return "tcp", net.JoinHostPort(c.IP, strconv.Itoa(port)), nil
}

// MarshalFile returns the connection file's bytes (with the key).
func (c ConnectionInfo) MarshalFile() ([]byte, error) {
	type file ConnectionInfo // no methods: plain JSON
	b, err := json.MarshalIndent(file(c), "", "  ")
	if err != nil {
		return nil, fmt.Errorf("kernel: marshal connection file: %w", err)
	}
	return b, nil
}
