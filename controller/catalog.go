package controller

import (
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/ask"
	"berth.dev/berth/tools/debug"
	"berth.dev/berth/tools/vibe"
)

// Conditional is a tool that a run gets only under a condition, and what
// the run needs to get it.
type Conditional struct {
	tools.Tool
	// Needs says what a run must have for the tool, and how to give it.
	Needs string
}

// ConditionalTools lists the tools of [DefaultTools] and [VibeTools] that
// a run gets only under a condition, so that a listing can show what a run
// lacks and why (`berth tools`).
func ConditionalTools() []Conditional {
	out := []Conditional{
		{Tool: debug.Tool, Needs: "a conversation id (conversation_id when the run is opened; berth call and berth tools: --conversation)"},
		{Tool: ask.Tool, Needs: "a question port: a run served by berth serve, whose event stream (GET /v1/runs/{id}/events) draws the cards"},
	}
	for _, t := range vibe.Tools() {
		out = append(out, Conditional{Tool: t, Needs: `vibe mode: a run opened with "vibe": true on berth serve`})
	}
	return out
}
