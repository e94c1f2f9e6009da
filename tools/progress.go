package tools

import "context"

// Progress notes: a tool tells whoever follows its call what it is doing
// now — a server starting, a cell's latest output, a launch waiting for
// its first stop. A transport that can show them (MCP's
// notifications/progress, for a call sent with a progress token) puts a
// ProgressFunc in the call's context; everywhere else Progress does
// nothing, so tools call it freely.

// MaxProgressChars bounds one progress note; a longer one keeps its end
// (the latest output).
const MaxProgressChars = 200

// ProgressFunc receives a call's progress notes. It must not block: a
// transport keeps the latest note and sends it when it can.
type ProgressFunc func(note string)

type progressKey struct{}

// WithProgress returns ctx whose calls report their progress notes to f.
func WithProgress(ctx context.Context, f ProgressFunc) context.Context {
	return context.WithValue(ctx, progressKey{}, f)
}

// Progress reports what the call of ctx is doing now, when a transport
// follows it; a note over MaxProgressChars keeps its end.
func Progress(ctx context.Context, note string) {
	f, _ := ctx.Value(progressKey{}).(ProgressFunc)
	if f == nil || note == "" {
		return
	}
	if r := []rune(note); len(r) > MaxProgressChars {
		note = "…" + string(r[len(r)-MaxProgressChars+1:])
	}
	f(note)
}

// Following reports whether a transport follows the progress of ctx's
// call, for a tool whose notes cost something to make.
func Following(ctx context.Context) bool {
	f, _ := ctx.Value(progressKey{}).(ProgressFunc)
	return f != nil
}
