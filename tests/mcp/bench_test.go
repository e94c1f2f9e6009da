package mcp

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"berth.dev/berth/tests/berthtest"
)

// BenchmarkTrivialCall compares a trivial tool call (read of a small file)
// over MCP (Streamable HTTP, one session) with the same call over
// POST /v1/runs/{id}/tools/read, against one berth serve, alternating the
// two so that both see the same machine. It reports each one's mean and
// their ratio (goal: mcp/v1 within 1.2).
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
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.URL + "/v1/runs/" + run.ID + "/mcp", HTTPClient: bearerClient(tok)}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	args := map[string]any{"path": "a.txt"}
	sid := session(b, s.URL+"/v1/runs/"+run.ID+"/mcp", tok)
	var v1, overMCP, raw time.Duration
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
	}
	b.ReportMetric(float64(v1.Nanoseconds())/float64(b.N), "v1-ns/call")
	b.ReportMetric(float64(overMCP.Nanoseconds())/float64(b.N), "mcp-ns/call")
	b.ReportMetric(float64(overMCP)/float64(v1), "mcp/v1")
	b.ReportMetric(float64(raw)/float64(v1), "raw/v1")
}
