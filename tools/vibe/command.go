package vibe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"berth.dev/berth/sandbox"
)

// Caps of the command runner.
const (
	// MaxCommandOutput bounds the stdout kept of an agent command; the head
	// and the tail are kept.
	MaxCommandOutput = 1 << 20
	// stderrKeep is how much of a failing command's stderr its error shows.
	stderrKeep = 4096
)

// CommandOptions configure [Command].
type CommandOptions struct {
	// Sandbox is the run's sandbox. Required.
	Sandbox sandbox.Sandbox
	// Args is the agent command, e.g. {"claude", "-p"}. Required. The
	// prompt ([Job.Prompt]) arrives on its stdin, and its stdout is the
	// result.
	Args []string
	// TierArgs are extra arguments appended to Args per tier, e.g.
	// {"fast": {"--model", "small"}, "good": {"--model", "large"}}.
	TierArgs map[string][]string
	// Dir is the working directory in the sandbox, normally the workspace
	// root; empty means the sandbox's default.
	Dir string
	// Env holds extra KEY=VALUE entries. BERTH_VIBE_WORKER (the worker id),
	// BERTH_VIBE_TIER and BERTH_VIBE_SURFACE (Job.Surface, which the agent
	// command must honour: "plan" and "readonly" mean no edits) are always
	// added.
	Env []string
	// User runs the command as this sandbox user; empty is the default.
	User string
}

// Command returns a runner that starts the agent command in the sandbox
// for every attempt. Cancelling an attempt cancels the process's context,
// on which the sandbox sends SIGTERM and then SIGKILL to its whole process
// group, so nothing the agent started survives it.
func Command(opts CommandOptions) Runner {
	if opts.Sandbox == nil || len(opts.Args) == 0 {
		panic("vibe: CommandOptions needs a Sandbox and Args")
	}
	return &commandRunner{opts: opts}
}

type commandRunner struct{ opts CommandOptions }

func (c *commandRunner) Run(ctx context.Context, job Job) (string, error) {
	args := append(append([]string(nil), c.opts.Args...), c.opts.TierArgs[job.Tier]...)
	env := append(append([]string(nil), c.opts.Env...), "BERTH_VIBE_WORKER="+job.WorkerID, "BERTH_VIBE_TIER="+job.Tier, "BERTH_VIBE_SURFACE="+string(job.Surface))
	stdout := &capBuffer{max: MaxCommandOutput}
	stderr := &capBuffer{max: stderrKeep}
	p, err := c.opts.Sandbox.Start(ctx, &sandbox.Cmd{
		Args: args, Env: env, Dir: c.opts.Dir, User: c.opts.User,
		Stdin: strings.NewReader(job.Prompt()), Stdout: stdout, Stderr: stderr,
	})
	if err != nil {
		return "", fmt.Errorf("vibe: could not start the worker command %q: %w; check the vibe runner configuration", args[0], err)
	}
	st, err := p.Wait()
	out := stdout.String()
	if ctx.Err() != nil {
		return out, ctx.Err()
	}
	if err != nil {
		return out, fmt.Errorf("vibe: the worker command %q ended in an unknown state: %w", args[0], err)
	}
	if !st.Success() {
		msg := fmt.Sprintf("vibe: the worker command %q failed (%s)", args[0], st)
		if e := strings.TrimSpace(stderr.String()); e != "" {
			msg += "; its stderr:\n" + e
		}
		return out, errors.New(msg)
	}
	return out, nil
}

// capBuffer keeps the first max/2 and the last max/2 bytes written to it.
type capBuffer struct {
	max int

	mu   sync.Mutex
	head bytes.Buffer
	tail []byte
	cut  int
}

func (b *capBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	if room := b.max/2 - b.head.Len(); room > 0 {
		k := min(room, len(p))
		b.head.Write(p[:k])
		p = p[k:]
	}
	if len(p) > 0 {
		b.tail = append(b.tail, p...)
		// Let the tail grow to twice its share before shifting, so that
		// many small writes cost amortised constant time.
		if len(b.tail) > b.max {
			drop := len(b.tail) - b.max/2
			b.cut += drop
			b.tail = append(b.tail[:0], b.tail[drop:]...)
		}
	}
	return n, nil
}

func (b *capBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	tail, cut := b.tail, b.cut
	if over := len(tail) - b.max/2; over > 0 {
		tail, cut = tail[over:], cut+over
	}
	if cut == 0 {
		return b.head.String() + string(tail)
	}
	return strings.ToValidUTF8(b.head.String(), "") + fmt.Sprintf("\n… (%d bytes cut) …\n", cut) + strings.ToValidUTF8(string(tail), "")
}
