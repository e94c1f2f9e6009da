package docker

import (
	"context"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/host"
	"berth.dev/berth/sandbox/shim"
)

// Echo latency measurement, gated: BERTH_BENCH=1 go test -run TestEchoLatency -v ./sandbox/docker
//
// It sends a 100-byte message through `cat` and reads it back, many times,
// over four streams: a host pipe (os/exec), the host sandbox's
// sandbox.Pipe (agent + client), a raw docker exec (Transport.Exec, no
// agent), the docker sandbox's sandbox.Pipe (agent in the container), and
// its Dial to a unix-socket echo server in the container, directly through
// /proc/PID/root and through the agent's relay. Rounds of each stream are
// interleaved so that load from other work on the machine spreads evenly
// over them. BERTH_BENCH_N sets the round
// trips per stream (default 3000).

const (
	echoSize   = 100
	echoRounds = 10  // interleaved rounds per stream
	echoWarmup = 200 // round trips per stream before measuring
)

// echoStream is one measured stream and how to end it.
type echoStream struct {
	name  string
	rw    io.ReadWriter
	close func()
	rtts  []time.Duration
}

// echoOnce writes msg and reads it back.
func echoOnce(rw io.ReadWriter, msg, buf []byte) error {
	if _, err := rw.Write(msg); err != nil {
		return err
	}
	_, err := io.ReadFull(rw, buf)
	return err
}

func TestEchoLatency(t *testing.T) {
	if os.Getenv("BERTH_BENCH") != "1" {
		t.Skip("set BERTH_BENCH=1 to measure stdio echo latency")
	}
	n := 3000
	if v, err := strconv.Atoi(os.Getenv("BERTH_BENCH_N")); err == nil && v > 0 {
		n = v
	}
	cli := needDocker(t)
	id := startContainer(t, cli, containerSpec{image: testImage(t, cli)})
	ctx := context.Background()

	var streams []*echoStream

	// 1. A host pipe to cat.
	hostCat := exec.Command("cat")
	hin, err := hostCat.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	hout, err := hostCat.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := hostCat.Start(); err != nil {
		t.Fatal(err)
	}
	streams = append(streams, &echoStream{
		name: "host pipe (os/exec cat)",
		rw: struct {
			io.Reader
			io.Writer
		}{hout, hin},
		close: func() { hin.Close(); hostCat.Wait() },
	})

	// 2. The host sandbox.
	hsb := host.New(host.Options{})
	t.Cleanup(func() { hsb.Close() })
	hps, err := sandbox.Pipe(ctx, hsb, &sandbox.Cmd{Args: []string{"cat"}})
	if err != nil {
		t.Fatal(err)
	}
	streams = append(streams, &echoStream{name: "host sandbox.Pipe", rw: hps, close: func() { hps.Close() }})

	// 3. A raw docker exec of cat.
	raw, err := NewTransport(cli, id).Exec(ctx, shim.ExecSpec{Args: []string{"cat"}})
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, raw.Stderr())
	streams = append(streams, &echoStream{
		name: "docker raw exec (Transport.Exec cat)",
		rw: struct {
			io.Reader
			io.Writer
		}{raw.Stdout(), raw.Stdin()},
		close: func() { raw.Stdin().Close(); raw.Wait(); raw.Close() },
	})

	// 4. The docker sandbox.
	p := newProvider(t)
	dsb := open(t, p, id)
	dps, err := sandbox.Pipe(ctx, dsb, &sandbox.Cmd{Args: []string{"cat"}})
	if err != nil {
		t.Fatal(err)
	}
	streams = append(streams, &echoStream{name: "docker sandbox.Pipe", rw: dps, close: func() { dps.Close() }})

	// 5 and 6. The docker sandbox's Dial to an echo server on a unix
	// socket in the container (python3, as a kernel's sockets are):
	// directly, and through the agent's relay.
	const echoSock = "/tmp/berth-echo.sock"
	srvOut, srvW := io.Pipe()
	srv, err := dsb.Start(ctx, &sandbox.Cmd{Stdout: srvW, Args: []string{"python3", "-c", `
import os, socket
p = "` + echoSock + `"
if os.path.exists(p): os.unlink(p)
s = socket.socket(socket.AF_UNIX)
s.bind(p); s.listen(2); print("ready", flush=True)
def echo(c):
    while True:
        b = c.recv(65536)
        if not b: break
        c.sendall(b)
import threading
while True:
    c, _ = s.accept()
    threading.Thread(target=echo, args=(c,), daemon=True).start()
`}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Signal(context.Background(), 9); srvW.Close(); srv.Wait() })
	ready := make([]byte, 6)
	if _, err := io.ReadFull(srvOut, ready); err != nil {
		t.Fatalf("echo server: %v", err)
	}
	dc, err := dsb.Dial(ctx, "unix", echoSock)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := dc.(*localConn); !ok {
		t.Fatalf("Dial returned %T, want the direct connection", dc)
	}
	streams = append(streams, &echoStream{name: "docker sandbox.Dial (direct)", rw: dc, close: func() { dc.Close() }})
	rsb := open(t, newProvider(t, WithDirectReads(false)), id)
	rc, err := rsb.Dial(ctx, "unix", echoSock)
	if err != nil {
		t.Fatal(err)
	}
	streams = append(streams, &echoStream{name: "docker sandbox.Dial (agent relay)", rw: rc, close: func() { rc.Close() }})

	msg := make([]byte, echoSize)
	for i := range msg {
		msg[i] = 'a' + byte(i%26)
	}
	buf := make([]byte, echoSize)
	for _, s := range streams {
		for range echoWarmup {
			if err := echoOnce(s.rw, msg, buf); err != nil {
				t.Fatalf("%s: warm-up echo: %v", s.name, err)
			}
		}
	}
	per := max(n/echoRounds, 1)
	for range echoRounds {
		for _, s := range streams {
			for range per {
				start := time.Now()
				if err := echoOnce(s.rw, msg, buf); err != nil {
					t.Fatalf("%s: echo: %v", s.name, err)
				}
				s.rtts = append(s.rtts, time.Since(start))
			}
		}
	}
	for _, s := range streams {
		s.close()
	}

	t.Logf("%d-byte echo round trips through cat, %d per stream, GOMAXPROCS=%d:", echoSize, per*echoRounds, runtime.GOMAXPROCS(0))
	t.Logf("%-40s %10s %10s %10s", "stream", "median", "p90", "p99")
	median := make([]float64, len(streams))
	for i, s := range streams {
		slices.Sort(s.rtts)
		q := func(f float64) float64 {
			return float64(s.rtts[int(f*float64(len(s.rtts)-1))].Nanoseconds()) / 1e3
		}
		median[i] = q(0.5)
		t.Logf("%-40s %9.0fµs %9.0fµs %9.0fµs", s.name, q(0.5), q(0.9), q(0.99))
	}
	t.Logf("berth's overhead (median): host %+.0fµs over the pipe, docker %+.0fµs over the raw exec, Dial %+.0fµs (direct) and %+.0fµs (relay) over the raw exec",
		median[1]-median[0], median[3]-median[2], median[4]-median[2], median[5]-median[2])
}
