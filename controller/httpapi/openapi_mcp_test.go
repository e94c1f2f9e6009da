package httpapi_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"berth.dev/berth/controller/httpapi"
)

type bearerRT struct{ tok string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.tok)
	return http.DefaultTransport.RoundTrip(r)
}

// TestOpenAPIMCPExchanges drives both MCP endpoints with the go-sdk's
// client through the validating rig.
func TestOpenAPIMCPExchanges(t *testing.T) {
	rg := newRig(t, httpapi.Options{Token: token}, false)
	id := rg.open(`{"sandbox":"host"}`)
	for _, ep := range []string{"/v1/runs/" + id + "/mcp", "/v1/runs/" + id + "/mcp?surface=plan", "/v1/mcp?sandbox=host"} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		c := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil)
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: rg.srv.URL + ep, HTTPClient: &http.Client{Transport: bearerRT{token}}, MaxRetries: -1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cs.ListTools(ctx, nil); err != nil {
			t.Error(err)
		}
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "read", Arguments: map[string]any{"path": "a"}}); err != nil {
			t.Error(err)
		}
		cs.CallTool(ctx, &mcp.CallToolParams{Name: "write", Arguments: map[string]any{"path": "a"}})
		cs.Close()
		cancel()
	}
	for _, b := range []string{`{`, `{"jsonrpc":"2.0","id":1,"method":"nope"}`} {
		r := rg.do("POST", "/v1/runs/"+id+"/mcp", token, b, "Accept", "application/json, text/event-stream", "Content-Type", "application/json")
		t.Logf("%s → %d %s", b, r.status, r.body)
	}
	r := rg.do("GET", "/v1/runs/"+id+"/mcp", "", "")
	t.Logf("no token → %d", r.status)
}
