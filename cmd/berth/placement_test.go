package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/controller"
	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/host"
	"berth.dev/berth/tools/permission"
)

func TestPlacementPolicyDefaults(t *testing.T) {
	const call permission.Mode = "" // call and tools
	tests := []struct {
		name      string
		mode      permission.Mode
		g         globalFlags
		host      controller.HostPlacement
		roots     []string // nil: anywhere
		nowhere   bool     // roots is an empty list
		unlabeled bool
	}{
		{name: "call", mode: call, host: controller.HostFallback, unlabeled: true},
		{name: "call --no-host-fallback", mode: call, g: globalFlags{noHostFallback: true}, host: controller.HostExplicit, unlabeled: true},
		{name: "serve local", mode: permission.ModeLocal, host: controller.HostFallback},
		{name: "serve local --no-host-fallback", mode: permission.ModeLocal, g: globalFlags{noHostFallback: true}, host: controller.HostExplicit},
		{name: "serve local --host-root", mode: permission.ModeLocal, g: globalFlags{hostRoots: []string{"/srv"}}, host: controller.HostFallback, roots: []string{"/srv"}},
		{name: "serve local --host-placement off", mode: permission.ModeLocal, g: globalFlags{hostPlacement: "off"}, host: controller.HostOff},
		{name: "serve local --allow-unlabelled", mode: permission.ModeLocal, g: globalFlags{allowUnlabelled: true}, host: controller.HostFallback, unlabeled: true},
		{name: "serve hosted", mode: permission.ModeHosted, host: controller.HostOff, nowhere: true},
		{name: "serve hosted --host-user", mode: permission.ModeHosted, g: globalFlags{hostUser: "berth-run"}, host: controller.HostExplicit, nowhere: true},
		{name: "serve hosted --host-user --host-root", mode: permission.ModeHosted, g: globalFlags{hostUser: "berth-run", hostRoots: []string{"/srv/ws"}},
			host: controller.HostExplicit, roots: []string{"/srv/ws"}},
		{name: "serve hosted --host-placement fallback", mode: permission.ModeHosted, g: globalFlags{hostPlacement: "fallback"}, host: controller.HostFallback, nowhere: true},
		{name: "serve hosted --host-placement fallback --no-host-fallback", mode: permission.ModeHosted,
			g: globalFlags{hostPlacement: "fallback", noHostFallback: true}, host: controller.HostExplicit, nowhere: true},
		{name: "serve hosted --host-user --host-placement off", mode: permission.ModeHosted, g: globalFlags{hostUser: "berth-run", hostPlacement: "off"}, host: controller.HostOff, nowhere: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := newPlacementPolicy(&tt.g, tt.mode)
			if err != nil {
				t.Fatal(err)
			}
			if p.host != tt.host {
				t.Errorf("host placement %q, want %q", p.host, tt.host)
			}
			switch {
			case tt.nowhere:
				if p.roots == nil || len(p.roots) != 0 {
					t.Errorf("host roots %#v, want none (an empty list)", p.roots)
				}
			case fmt.Sprint(p.roots) != fmt.Sprint(tt.roots) || (tt.roots == nil) != (p.roots == nil):
				t.Errorf("host roots %#v, want %#v", p.roots, tt.roots)
			}
			if p.allowUnlabelled != tt.unlabeled {
				t.Errorf("allowUnlabelled %v, want %v", p.allowUnlabelled, tt.unlabeled)
			}
		})
	}
	if _, err := newPlacementPolicy(&globalFlags{hostPlacement: "maybe"}, call); err == nil || !strings.Contains(err.Error(), "--host-placement") {
		t.Errorf("a bad --host-placement: %v", err)
	}
}

// TestHostedControllerPlacement wires serve's controller over the real host
// provider: hosted mode refuses the host until a host user and a host root
// are configured, and logs what it chose.
func TestHostedControllerPlacement(t *testing.T) {
	root := t.TempDir()
	tests := []struct {
		name      string
		g         globalFlags
		ws        string
		wantErr   error
		errSubstr string
		logs      string
	}{
		{name: "no host user", ws: root, wantErr: controller.ErrPlacement, errSubstr: "host placement is off", logs: "host placement off"},
		{name: "host user, no root", g: globalFlags{hostUser: "nobody"}, ws: root, wantErr: controller.ErrPlacement,
			errSubstr: "--host-root", logs: "every host workspace is refused"},
		{name: "host user and root", g: globalFlags{hostUser: "nobody", hostRoots: []string{root}}, ws: root, logs: "host workspaces under " + root},
		{name: "outside the root", g: globalFlags{hostUser: "nobody", hostRoots: []string{root}}, ws: "/", wantErr: controller.ErrPlacement, errSubstr: "not under a host root"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
			b := &backends{providers: []sandbox.Provider{&host.Provider{}}}
			c, err := newController(&tt.g, b, prometheus.NewRegistry(), log, "", permission.ModeHosted)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if !strings.Contains(logs.String(), tt.logs) {
				t.Errorf("start log %q does not say %q", logs.String(), tt.logs)
			}
			r, err := c.Open(context.Background(), controller.RunSpec{Sandbox: "host", Workspace: tt.ws})
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				r.Close()
				return
			}
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.errSubstr) {
				t.Fatalf("Open: %v, want %v saying %q", err, tt.wantErr, tt.errSubstr)
			}
		})
	}
}

func TestCallPlacementFlags(t *testing.T) {
	dir := workspace(t)
	other := t.TempDir()
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{name: "host roots hold the workspace", args: []string{"--host-root", dir}},
		{name: "host roots without the workspace", args: []string{"--host-root", other}, code: 1, stderr: "not under a host root"},
		{name: "host placement off refuses auto's fallback", args: []string{"--host-placement", "off"}, code: 1, stderr: "host placement is off"},
		{name: "host placement off refuses explicit host", args: []string{"--host-placement", "off", "--sandbox", "host"}, code: 1, stderr: "--host-placement explicit"},
		{name: "explicit host under --no-host-fallback", args: []string{"--no-host-fallback", "--sandbox", "host"}},
		{name: "a bad host placement", args: []string{"--host-placement", "sometimes"}, code: 1, stderr: "off, explicit or fallback"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"call", noDocker, "--workspace", dir}, tt.args...)
			out, errs, code := run(t, append(args, "read", `{"path":"README.md"}`)...)
			if code != tt.code || !strings.Contains(errs, tt.stderr) {
				t.Fatalf("exit %d, want %d with %q\nstdout: %s\nstderr: %s", code, tt.code, tt.stderr, out, errs)
			}
			if tt.code == 0 && !strings.Contains(out, "# hello") {
				t.Errorf("stdout lacks the file: %s", out)
			}
		})
	}
}
