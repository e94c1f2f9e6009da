package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"berth.dev/berth/tests/berthtest"
)

// TestStdioSurvivesLinesThatAreNoMessage: `berth mcp` answers a line that
// is JSON but not one JSON-RPC message (a batch, {}, 42, null, a wrong
// version, an object id, …) with an Invalid Request error and goes on: the
// run and its kernel live, x is still 41 afterwards. Before, the SDK ended
// the session on the first such line, closing the run.
func TestStdioSurvivesLinesThatAreNoMessage(t *testing.T) {
	bin := berthtest.Build(t)
	ws := workspace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*callTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "mcp", "--sandbox", "host", "--workspace", ws)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		in.Close()
		cmd.Wait()
	}()
	lines := make(chan map[string]any)
	go func() { // ends when berth's stdout closes
		defer close(lines)
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				m = map[string]any{"unparsed": sc.Text()}
			}
			select {
			case lines <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	send := func(line string) {
		t.Helper()
		if _, err := io.WriteString(in, line+"\n"); err != nil {
			t.Fatalf("write %s: %v (berth mcp gone?)", line, err)
		}
	}
	// next reads messages until the response to id, returning it and the
	// error responses with a null id seen before it.
	next := func(id float64) (map[string]any, []map[string]any) {
		t.Helper()
		var before []map[string]any
		for {
			select {
			case m, ok := <-lines:
				if !ok {
					t.Fatalf("berth mcp closed stdout before answering request %v (it ended the session)", id)
				}
				if m["id"] == id {
					return m, before
				}
				before = append(before, m)
			case <-ctx.Done():
				t.Fatalf("no answer to request %v", id)
			}
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if m, _ := next(1); m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	id := 2.0
	call := func(tool string, args map[string]any) string {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": map[string]any{"name": tool, "arguments": args}})
		send(string(b))
		m, _ := next(id)
		id++
		res, _ := m["result"].(map[string]any)
		if res == nil || res["isError"] == true {
			t.Fatalf("%s: %v", tool, m)
		}
		var text strings.Builder
		for _, c := range res["content"].([]any) {
			text.WriteString(fmt.Sprint(c.(map[string]any)["text"]))
		}
		return text.String()
	}
	call("eval", map[string]any{"code": "x = 41", "description": "set x to forty one for later"})

	for _, tc := range []struct {
		line   string
		code   float64
		id     any
		reason string
	}{
		{`[]`, -32600, nil, "batch"},
		{`[{"jsonrpc":"2.0","id":90,"method":"ping"}]`, -32600, nil, "batch"},
		{`{}`, -32600, nil, `"jsonrpc":"2.0"`},
		{`42`, -32600, nil, "one JSON object"},
		{`null`, -32600, nil, "one JSON object"},
		{`"ping"`, -32600, nil, "one JSON object"},
		{`{"jsonrpc":"1.0","id":91,"method":"ping"}`, -32600, 91.0, `"jsonrpc":"2.0"`},
		{`{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, -32600, nil, "string or a number"},
		{`{"jsonrpc":"2.0","id":null,"method":"ping"}`, -32600, nil, "not null"},
		{`{"jsonrpc":"2.0","id":92}`, -32600, 92.0, "neither a request"},
		{`{"jsonrpc":"2.0","id":93,"method":7}`, -32600, 93.0, `"method"`},
		{`{"jsonrpc":"2.0","id":94,"method":"ping","params":3}`, -32600, 94.0, `"params"`},
		{`{"jsonrpc":"2.0",`, -32700, nil, "not JSON"},
	} {
		send(tc.line)
		send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%v,"method":"ping"}`, id))
		pong, before := next(id)
		id++
		if pong["result"] == nil {
			t.Errorf("%s: the ping after it got %v", tc.line, pong)
		}
		if len(before) != 1 {
			t.Errorf("%s: want one error response before the ping's answer, got %v", tc.line, before)
			continue
		}
		e, _ := before[0]["error"].(map[string]any)
		if e == nil || e["code"] != tc.code || before[0]["id"] != tc.id || !strings.Contains(fmt.Sprint(e["message"]), tc.reason) {
			t.Errorf("%s: got %v, want code %v, id %v and a message saying %q", tc.line, before[0], tc.code, tc.id, tc.reason)
		}
	}
	if got := call("eval", map[string]any{"code": "x", "description": "read x back to check the kernel"}); !strings.Contains(got, "41") {
		t.Errorf("after the bad lines the kernel lost x: %q", got)
	}
	if cmd.ProcessState != nil {
		t.Errorf("berth mcp exited: %v", cmd.ProcessState)
	}
}
