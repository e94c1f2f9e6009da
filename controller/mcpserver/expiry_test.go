package mcpserver

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/controller"
	"berth.dev/berth/sandbox"
)

// hostOnly is a sandbox.Provider of sandboxes that run nothing.
type hostOnly struct{}

func (hostOnly) Scheme() string { return "host" }
func (hostOnly) Open(context.Context, string) (sandbox.Sandbox, error) {
	return inert{}, nil
}
func (hostOnly) Locate(context.Context, sandbox.Owner) (string, error) {
	return "", sandbox.ErrNotFound
}

type inert struct{}

func (inert) Ref() string { return "host" }
func (inert) Start(context.Context, *sandbox.Cmd) (sandbox.Process, error) {
	return nil, sandbox.ErrUnsupported
}
func (inert) FS(_ context.Context, root string) (sandbox.FS, error) { return rootFS{root: root}, nil }
func (inert) Dial(context.Context, string, string) (sandbox.Conn, error) {
	return nil, sandbox.ErrUnsupported
}
func (inert) Check(context.Context) error { return nil }
func (inert) Close() error                { return nil }

type rootFS struct {
	sandbox.FS
	root string
}

func (f rootFS) Root() string { return f.root }

const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"expiry","version":"1"}}}`

// TestFirstIdleExpiry: a session that sent nothing after initialize but
// notifications/initialized ends FirstIdleTimeout after it, and gives
// its place under the caps back; a session that made a call lives on
// until IdleTimeout.
func TestFirstIdleExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, err := controller.New(controller.Config{Providers: []sandbox.Provider{hostOnly{}}, Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		run, err := c.Open(t.Context(), controller.RunSpec{Sandbox: "host", Workspace: "/"})
		if err != nil {
			t.Fatal(err)
		}
		h := NewHTTP(nil, Caps{})
		defer h.Close()
		post := func(sid, body string) *httptest.ResponseRecorder {
			r := httptest.NewRequest("POST", "/mcp", strings.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Accept", "application/json, text/event-stream")
			if sid != "" {
				r.Header.Set(SessionHeader, sid)
				r.Header.Set("Mcp-Protocol-Version", "2025-06-18")
			}
			w := httptest.NewRecorder()
			h.ServeRun(w, r, run, Options{Tenant: "a"})
			return w
		}
		open := func() string {
			w := post("", initialize)
			if w.Code != http.StatusOK {
				t.Fatalf("initialize: %d %s", w.Code, w.Body)
			}
			sid := w.Header().Get(SessionHeader)
			if w := post(sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); w.Code != http.StatusAccepted {
				t.Fatalf("notifications/initialized: %d %s", w.Code, w.Body)
			}
			return sid
		}
		idle, used := open(), open()
		if w := post(used, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`); w.Code != http.StatusOK {
			t.Fatalf("tools/list: %d %s", w.Code, w.Body)
		}
		time.Sleep(FirstIdleTimeout + time.Second)
		synctest.Wait()
		if h.session(idle) != nil {
			t.Errorf("a session that only initialized is still open %v later", FirstIdleTimeout+time.Second)
		}
		if h.session(used) == nil {
			t.Errorf("a session in use ended after %v", FirstIdleTimeout+time.Second)
		}
		h.mu.Lock()
		n := h.tenants["a"]
		h.mu.Unlock()
		if n != 1 {
			t.Errorf("tenant a counts %d sessions, want the one left", n)
		}
		time.Sleep(IdleTimeout)
		synctest.Wait()
		if h.session(used) != nil {
			t.Errorf("a session idle for %v is still open", IdleTimeout)
		}
	})
}
