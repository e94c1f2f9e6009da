package mcp

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"berth.dev/berth/tests/berthtest"
)

// BenchmarkTrivialCall compares a trivial tool call (read of a small file)
// over MCP (Streamable HTTP: a 2025-11-25 session, and 2026-07-28 without
// one, each by the go-sdk client and as one raw POST) with the same call
// over POST /v1/runs/{id}/tools/read, against one berth serve, alternating
// them so that all see the same machine. It reports the means and the
// ratios to /v1 (goal: mcp/v1 within 1.2).
func BenchmarkTrivialCall(b *testing.B) {
	tok := "bench-" + time.Now().Format("150405.000000")
	s := berthtest.Start(b, berthtest.Options{Args: []string{"--mode", "local"}, Env: []string{"BERTH_TOKEN=" + tok}})
	ws := b.TempDir()
	api := &berthtest.Client{URL: s.URL, Token: tok}
	ctx := context.Background()
	run, err := api.OpenRun(ctx, map[string]any{"sandbox": "host", "workspace": ws})
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := api.Do(ctx, "POST", "/v1/runs/"+run.ID+"/tools/write", map[string]any{"args": map[string]any{"path": "a.txt", "content": "hello\n"}}); err != nil {
		b.Fatal(err)
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "berth-bench", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.URL + "/v1/runs/" + run.ID + "/mcp", HTTPClient: bearerClient(tok)}, legacy)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	cs26, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.URL + "/v1/runs/" + run.ID + "/mcp", HTTPClient: bearerClient(tok)}, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		b.Fatal(err)
	}
	defer cs26.Close()
	raw26 := `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"read","arguments":{"path":"a.txt"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"}}}}`
	args := map[string]any{"path": "a.txt"}
	sid := session(b, s.URL+"/v1/runs/"+run.ID+"/mcp", tok)
	var v1, overMCP, raw, overMCP26, rawStateless time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if res, err := api.Call(ctx, run.ID, "read", args); err != nil || res.IsError {
			b.Fatalf("v1 read: %v %v", err, res)
		}
		v1 += time.Since(start)
		start = time.Now()
		if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "read", Arguments: args}); err != nil || res.IsError {
			b.Fatalf("mcp read: %v %v", err, res)
		}
		overMCP += time.Since(start)
		start = time.Now()
		if st, _, body, err := post(b, ctx, s.URL+"/v1/runs/"+run.ID+"/mcp", tok, sid, `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"read","arguments":{"path":"a.txt"}}}`); err != nil || st != 200 {
			b.Fatalf("raw: %d %v %s", st, err, body)
		}
		raw += time.Since(start)
		start = time.Now()
		if res, err := cs26.CallTool(ctx, &mcp.CallToolParams{Name: "read", Arguments: args}); err != nil || res.IsError {
			b.Fatalf("mcp 2026-07-28 read: %v %v", err, res)
		}
		overMCP26 += time.Since(start)
		start = time.Now()
		if st, body, err := postStateless(ctx, s.URL+"/v1/runs/"+run.ID+"/mcp", tok, raw26); err != nil || st != 200 {
			b.Fatalf("raw 2026-07-28: %d %v %s", st, err, body)
		}
		rawStateless += time.Since(start)
	}
	b.ReportMetric(float64(v1.Nanoseconds())/float64(b.N), "v1-ns/call")
	b.ReportMetric(float64(overMCP.Nanoseconds())/float64(b.N), "mcp-ns/call")
	b.ReportMetric(float64(overMCP)/float64(v1), "mcp/v1")
	b.ReportMetric(float64(raw)/float64(v1), "raw/v1")
	b.ReportMetric(float64(overMCP26)/float64(v1), "mcp26/v1")
	b.ReportMetric(float64(rawStateless)/float64(v1), "raw26/v1")
}

// postStateless sends one 2026-07-28 tools/call body with its headers.
func postStateless(ctx context.Context, url, tok, body string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", "read")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}
