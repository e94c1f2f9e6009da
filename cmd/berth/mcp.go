package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"berth.dev/berth/controller"
	"berth.dev/berth/controller/mcpserver"
	"berth.dev/berth/sandbox/shim"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/permission"
)

// mcpFlags are berth mcp's flags.
type mcpFlags struct {
	workspace        string
	sandbox          string
	conversation     string
	mode             string
	clientIsOperator bool
	permissions      string
	prewarm          []string
}

func newMCP(g *globalFlags) *cobra.Command {
	f := &mcpFlags{}
	cmd := &cobra.Command{
		Use:   "mcp [flags]",
		Short: "Open a run and serve it as an MCP server on stdin/stdout until the client leaves",
		Long: `mcp opens one run from its flags and serves it as a Model Context Protocol
server on stdin and stdout (newline-delimited JSON-RPC), for an editor or CLI
that launches MCP servers. tools/list is the run's tools at --surface; every call
goes through berth's registry and permission gate. The run closes, stopping
everything it started, when the client closes stdin or berth is signalled.

ask_user questions go to the client as elicitation when it declares that
capability. With --permissions hosted, write and exec calls ask the operator
first; those requests go to the client only with --client-is-operator: set it
only when the person at this client is the operator, since otherwise the
session whose call a request gates would approve it itself (without it they
fail closed, as nobody else is there to approve).

Logs go to stderr; stdout carries only the protocol.`,
		Example: `  berth mcp --sandbox docker://dev --workspace /workspace
  berth mcp --sandbox host --workspace "$PWD" --surface plan`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return serveMCP(cmd.Context(), g, f, cmd)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.sandbox, "sandbox", controller.AutoSandbox, "auto, host, docker://NAME-or-ID or containerd://NAMESPACE/ID")
	fl.StringVar(&f.workspace, "workspace", "", "workspace directory inside the sandbox (default: the current directory on the host; required for a container)")
	fl.StringVar(&f.conversation, "conversation", "", "conversation id: with --sandbox auto, the container labelled with it is used")
	fl.StringVar(&f.mode, "surface", "default", "the run's surface: default, plan or readonly")
	// --mode was the surface here and was serve's permission mode:
	// one name for each thing, the old spelling kept for a release.
	fl.StringVar(&f.mode, "mode", "default", "the run's surface (deprecated: use --surface)")
	fl.MarkDeprecated("mode", "use --surface (the same values); --mode will be removed in the next release")
	fl.StringSliceVar(&f.prewarm, "prewarm", nil, "kernels and language servers to start as the run opens, so the first eval or lsp call finds them up: python, javascript, lsp:go, lsp:python, … (comma-separated)")
	fl.BoolVar(&f.clientIsOperator, "client-is-operator", false, "send permission requests to the MCP client as elicitation (only when its user is the operator)")
	fl.StringVar(&f.permissions, "permissions", string(permission.ModeLocal), "permission policy: local (every level allowed) or hosted (write and exec ask the operator: with --client-is-operator the client, else they are refused, nobody being there to approve)")
	return cmd
}

func serveMCP(ctx context.Context, g *globalFlags, f *mcpFlags, cmd *cobra.Command) (err error) {
	mode, err := tools.ParseSurface(f.mode)
	if err != nil {
		return fmt.Errorf("berth: --surface: %w", err)
	}
	stderr := cmd.ErrOrStderr()
	log := g.logger(stderr)
	prepareAgent(log)
	b, err := newBackends(g)
	if err != nil {
		return err
	}
	defer b.Close()
	pmode, err := permission.ParseMode(f.permissions)
	if err != nil {
		return fmt.Errorf("berth: --permissions: %w", err)
	}
	// Placed as a local command (like berth call); a mode gives the run a
	// question port, so ask_user reaches a client that elicits, and picks
	// the permission policy.
	c, err := newController(g, b, nil, log, "", permission.ModeLocal, func(cfg *controller.Config) { cfg.Mode = pmode })
	if err != nil {
		return err
	}
	defer c.Close()
	run, err := c.Open(ctx, controller.RunSpec{
		ConversationID: f.conversation,
		Workspace:      f.workspace,
		Sandbox:        f.sandbox,
		Mode:           mode,
		Prewarm:        f.prewarm,
	})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := run.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	info := run.Info()
	fmt.Fprintf(stderr, "berth: mcp: run %s on %s, workspace %s, mode %s\n", run.ID(), info.Sandbox, info.Workspace, info.Mode)
	srv := mcpserver.New(run, mcpserver.Options{ClientIsOperator: f.clientIsOperator, Version: versionString(), Logger: log, Status: shim.Building})
	out := &lockedWriter{w: os.Stdout}
	err = srv.Run(ctx, &mcp.IOTransport{Reader: &validLines{r: bufio.NewReaderSize(os.Stdin, 64<<10), out: out}, Writer: out})
	if err == nil || errors.Is(err, context.Canceled) || ctx.Err() != nil {
		return nil // the client left, or berth was signalled
	}
	return fmt.Errorf("berth: mcp: %w", err)
}

// maxLine caps one JSON-RPC message on stdin.
const maxLine = 16 << 20

// validLines passes stdin's lines that are one JSON-RPC message on to the
// SDK and answers the others itself: a parse error for a line that is not
// JSON, an invalid request for JSON that is not one message (a batch, an
// object without "jsonrpc":"2.0", an object id, …). The SDK would end the
// session on either, closing the run and its kernels.
type validLines struct {
	r   *bufio.Reader
	out *lockedWriter
	buf []byte // the rest of the current line
}

func (v *validLines) Read(p []byte) (int, error) {
	for len(v.buf) == 0 {
		frag, err := v.r.ReadSlice('\n')
		line := append([]byte(nil), frag...) // ReadSlice's buffer is reused
		for errors.Is(err, bufio.ErrBufferFull) && len(line) < maxLine {
			frag, err = v.r.ReadSlice('\n')
			line = append(line, frag...)
		}
		if len(line) >= maxLine {
			return 0, fmt.Errorf("berth: mcp: a message on stdin exceeds %d bytes", maxLine)
		}
		if t := bytes.TrimSpace(line); len(t) > 0 {
			if !json.Valid(t) {
				v.out.Write([]byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"berth: mcp: the line is not JSON: send one JSON-RPC message per line"}}` + "\n"))
			} else if reply := mcpserver.NotAMessage(t); reply != nil {
				v.out.Write(append(reply, '\n'))
			} else {
				v.buf = append(v.buf[:0], t...)
				v.buf = append(v.buf, '\n')
			}
		}
		if err != nil {
			if len(v.buf) > 0 {
				break
			}
			return 0, err
		}
	}
	n := copy(p, v.buf)
	v.buf = v.buf[n:]
	return n, nil
}

func (v *validLines) Close() error { return nil }

// lockedWriter serialises the SDK's writes and validLines' errors.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) Close() error { return nil }
