package main

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/controller"
	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/host"
	"berth.dev/berth/tools/lsp"
)

// TestLSPRequestTimeoutFlag: --lsp-request-timeout, a flag of every
// command that opens runs, reaches the controller's configuration (and so
// the language servers' request deadline); its default is tools/lsp's, and
// a negative value is refused with what to pass instead.
func TestLSPRequestTimeoutFlag(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    time.Duration
		wantErr string
	}{
		{name: "default", args: []string{"call"}, want: lsp.DefaultRequestTimeout},
		{name: "set", args: []string{"call", "--lsp-request-timeout", "3s"}, want: 3 * time.Second},
		{name: "serve", args: []string{"serve", "--lsp-request-timeout", "90s"}, want: 90 * time.Second},
		{name: "negative", args: []string{"call", "--lsp-request-timeout", "-1s"}, wantErr: "--lsp-request-timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := newRoot()
			cmd, rest, err := root.Find(tt.args)
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.ParseFlags(rest); err != nil {
				t.Fatal(err)
			}
			v, err := cmd.Flags().GetDuration("lsp-request-timeout")
			if err != nil {
				t.Fatal(err)
			}
			g := &globalFlags{lspRequestTimeout: v}
			var got time.Duration
			b := &backends{providers: []sandbox.Provider{&host.Provider{}}}
			c, err := newController(g, b, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)), "", "",
				func(cfg *controller.Config) { got = cfg.LSPRequestTimeout })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("newController: err = %v, want one naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if got != tt.want {
				t.Errorf("Config.LSPRequestTimeout = %v, want %v", got, tt.want)
			}
		})
	}
}
