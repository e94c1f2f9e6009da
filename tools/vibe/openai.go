package vibe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"berth.dev/berth/tools"
)

// Caps of the built-in agent loop.
const (
	// MaxSteps bounds the model calls of one attempt.
	MaxSteps = 60
	// MaxToolResultChars bounds one tool result as the model sees it.
	MaxToolResultChars = 30_000
	// maxResponseBytes bounds a chat-completions response body.
	maxResponseBytes = 16 << 20
	// errorBodyKeep is how much of a failing response's body an error shows.
	errorBodyKeep = 1000
	// DefaultRequestTimeout bounds one chat-completions request.
	DefaultRequestTimeout = 5 * time.Minute
)

// DefaultSystemPrompt is the worker's system message when
// OpenAIOptions.System is empty.
const DefaultSystemPrompt = "You are a background worker for a lead coding agent. " +
	"Do the task in the user's brief with the tools you have; they act on the project's workspace. " +
	"Do not ask questions: when something is unclear, choose the most reasonable reading and say so. " +
	"When you are done, answer without calling a tool, with a short report: what you changed (paths), how you verified it, and what is left."

// OpenAIOptions configure [OpenAI].
type OpenAIOptions struct {
	// BaseURL is the API's base, e.g. "https://api.openai.com/v1"; the
	// runner posts to BaseURL + "/chat/completions". Required.
	BaseURL string
	// APIKey is sent as a bearer token when set. It is never logged or
	// put into an error.
	APIKey string
	// Models maps a tier (TierFast, TierGood) to a model name. Required
	// for every tier the workers use.
	Models map[string]string
	// Tools builds the worker's registry for an attempt: a sub-run of this
	// run (same sandbox and workspace, with the run's permission gate).
	// Tools named vibe_* are never offered to a worker. Nil means no tools.
	Tools func() *tools.Registry
	// Surface is the widest surface the worker's tools are listed and
	// called on (default tools.SurfaceDefault); a job from a narrower
	// surface (Job.Surface, e.g. a plan-mode lead) gets that one instead.
	Surface tools.Surface
	// System overrides DefaultSystemPrompt.
	System string
	// Client is the HTTP client (default http.DefaultClient).
	Client *http.Client
	// RequestTimeout overrides DefaultRequestTimeout.
	RequestTimeout time.Duration
	// MaxSteps overrides the package's MaxSteps when positive.
	MaxSteps int
}

// OpenAI returns a runner with berth's own agent loop against an
// OpenAI-compatible chat-completions endpoint: it offers the worker
// registry's tools as functions, calls the ones the model asks for through
// [tools.Registry.Call], and returns the model's first answer without tool
// calls. An attempt that reaches the step cap fails with the model's last
// words.
func OpenAI(opts OpenAIOptions) Runner {
	if opts.BaseURL == "" {
		panic("vibe: OpenAIOptions needs a BaseURL")
	}
	if opts.Surface == "" {
		opts.Surface = tools.SurfaceDefault
	}
	if opts.System == "" {
		opts.System = DefaultSystemPrompt
	}
	if opts.Client == nil {
		opts.Client = http.DefaultClient
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if opts.MaxSteps <= 0 {
		opts.MaxSteps = MaxSteps
	}
	opts.BaseURL = strings.TrimRight(opts.BaseURL, "/")
	return &openAIRunner{opts: opts}
}

type openAIRunner struct{ opts OpenAIOptions }

// Wire types of the chat-completions API (the parts berth uses).
type (
	chatRequest struct {
		Model    string        `json:"model"`
		Messages []chatMessage `json:"messages"`
		Tools    []chatTool    `json:"tools,omitempty"`
	}
	chatMessage struct {
		Role       string     `json:"role"`
		Content    *string    `json:"content"`
		ToolCalls  []toolCall `json:"tool_calls,omitempty"`
		ToolCallID string     `json:"tool_call_id,omitempty"`
	}
	chatTool struct {
		Type     string       `json:"type"`
		Function chatFunction `json:"function"`
	}
	chatFunction struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters"`
	}
	toolCall struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	chatResponse struct {
		Choices []struct {
			Message      chatMessage `json:"message"`
			FinishReason string      `json:"finish_reason"`
		} `json:"choices"`
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
)

func (r *openAIRunner) Run(ctx context.Context, job Job) (string, error) {
	model := r.opts.Models[job.Tier]
	if model == "" {
		return "", fmt.Errorf("vibe: no model is configured for tier %q: spawn with another tier or configure the vibe runner's models", job.Tier)
	}
	surface := r.opts.Surface
	if job.Surface != "" {
		surface = narrower(surface, job.Surface)
	}
	var reg *tools.Registry
	var fns []chatTool
	if r.opts.Tools != nil {
		reg = r.opts.Tools()
		for _, info := range reg.List(surface) {
			if strings.HasPrefix(info.Name, "vibe_") {
				continue
			}
			params := json.RawMessage(`{"type":"object"}`)
			if info.InputSchema != nil {
				b, err := json.Marshal(info.InputSchema)
				if err != nil {
					return "", fmt.Errorf("vibe: the schema of tool %s does not encode: %w", info.Name, err)
				}
				params = b
			}
			fns = append(fns, chatTool{Type: "function", Function: chatFunction{Name: info.Name, Description: info.Description, Parameters: params}})
		}
	}
	msgs := []chatMessage{
		{Role: "system", Content: ptr(r.opts.System)},
		{Role: "user", Content: ptr(job.Prompt())},
	}
	last := ""
	for step := 0; step < r.opts.MaxSteps; step++ {
		msg, err := r.complete(ctx, chatRequest{Model: model, Messages: msgs, Tools: fns})
		if err != nil {
			return last, err
		}
		if msg.Content != nil && strings.TrimSpace(*msg.Content) != "" {
			last = *msg.Content
		}
		if len(msg.ToolCalls) == 0 {
			return last, nil
		}
		msg.Role = "assistant"
		for i := range msg.ToolCalls {
			if msg.ToolCalls[i].Type == "" {
				msg.ToolCalls[i].Type = "function"
			}
		}
		msgs = append(msgs, msg)
		for _, tc := range msg.ToolCalls {
			out, err := r.callTool(ctx, reg, surface, tc)
			if err != nil {
				return last, err
			}
			msgs = append(msgs, chatMessage{Role: "tool", ToolCallID: tc.ID, Content: ptr(out)})
		}
	}
	return last, fmt.Errorf("vibe: the worker made %d model calls without finishing, the most one attempt may: narrow the brief or split the task, and vibe_send what to do next", r.opts.MaxSteps)
}

// callTool runs one tool call and returns what the model sees. Only ctx's
// end is an error; every other failure is text for the model.
func (r *openAIRunner) callTool(ctx context.Context, reg *tools.Registry, surface tools.Surface, tc toolCall) (string, error) {
	name := tc.Function.Name
	if reg == nil || strings.HasPrefix(name, "vibe_") {
		return fmt.Sprintf("error: there is no tool %q for workers; use only the tools listed", name), nil
	}
	args := json.RawMessage(tc.Function.Arguments)
	if strings.TrimSpace(tc.Function.Arguments) == "" {
		args = json.RawMessage("{}")
	}
	res, err := reg.Call(ctx, surface, name, args)
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	if err != nil {
		return clip("error: "+err.Error(), MaxToolResultChars), nil
	}
	text := res.AllText()
	if res.IsError {
		text = "error: " + text
	}
	if text == "" {
		text = "(no output)"
	}
	return clip(text, MaxToolResultChars), nil
}

// complete posts one chat-completions request and returns the first
// choice's message.
func (r *openAIRunner) complete(ctx context.Context, req chatRequest) (chatMessage, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return chatMessage{}, fmt.Errorf("vibe: encoding the model request: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.opts.RequestTimeout)
	defer cancel()
	url := r.opts.BaseURL + "/chat/completions"
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return chatMessage{}, fmt.Errorf("vibe: the model endpoint %q is not a valid URL: %w; check the vibe runner configuration", url, err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	if r.opts.APIKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+r.opts.APIKey)
	}
	resp, err := r.opts.Client.Do(hreq)
	if err != nil {
		return chatMessage{}, fmt.Errorf("vibe: the model endpoint %s did not answer: %w", url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return chatMessage{}, fmt.Errorf("vibe: reading the model's answer from %s: %w", url, err)
	}
	if len(data) > maxResponseBytes {
		return chatMessage{}, fmt.Errorf("vibe: the model's answer from %s is larger than %d bytes", url, maxResponseBytes)
	}
	if resp.StatusCode != http.StatusOK {
		return chatMessage{}, fmt.Errorf("vibe: the model endpoint %s answered %s: %s", url, resp.Status, clip(strings.TrimSpace(string(data)), errorBodyKeep))
	}
	var cr chatResponse
	if err := json.Unmarshal(data, &cr); err != nil {
		return chatMessage{}, fmt.Errorf("vibe: the model's answer from %s is not chat-completions JSON: %w", url, err)
	}
	if cr.Error != nil {
		return chatMessage{}, fmt.Errorf("vibe: the model endpoint %s reported an error: %s", url, cr.Error.Message)
	}
	if len(cr.Choices) == 0 {
		return chatMessage{}, errors.New("vibe: the model's answer from " + url + " has no choices")
	}
	return cr.Choices[0].Message, nil
}

func ptr(s string) *string { return &s }
