package bundled

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

//go:embed berth_kernel.py
var pythonSource string

//go:embed berth_kernel.js
var javaScriptSource string

//go:embed ipython_tool_shim.py
var ipythonToolShim string

// Languages of the bundled kernels, as in their language_info.name.
const (
	Python     = "python"
	JavaScript = "javascript"
)

// ErrUnknownLanguage: no bundled kernel for the language; tested with
// errors.Is.
var ErrUnknownLanguage = errors.New("bundled: no bundled kernel for this language")

// Kernel is one bundled kernel.
type Kernel struct {
	// Language is Python or JavaScript.
	Language string
	// File is the name to write Source under, e.g. "berth_kernel.py".
	File string
	// Source is the program.
	Source string
	// Interpreter is the command that runs it: "python3" or "node".
	Interpreter string
	// MinVersion is the oldest interpreter version it supports.
	MinVersion string
	// InterruptMode is the kernelspec interrupt_mode: "message" for both;
	// the Python kernel also takes SIGINT through its process.
	InterruptMode string
}

// Lookup returns the bundled kernel for language: "python" (also
// "python3", "py") or "javascript" (also "js", "node").
func Lookup(language string) (Kernel, error) {
	switch strings.ToLower(language) {
	case Python, "python3", "py":
		return Kernel{Language: Python, File: "berth_kernel.py", Source: pythonSource,
			Interpreter: "python3", MinVersion: "3.8", InterruptMode: "message"}, nil
	case JavaScript, "js", "node", "nodejs":
		return Kernel{Language: JavaScript, File: "berth_kernel.js", Source: javaScriptSource,
			Interpreter: "node", MinVersion: "18", InterruptMode: "message"}, nil
	}
	return Kernel{}, fmt.Errorf("%w: %q; use %q or %q", ErrUnknownLanguage, language, Python, JavaScript)
}

// Source returns a copy of the bundled kernel's program for language (see
// [Lookup]).
func Source(language string) ([]byte, error) {
	k, err := Lookup(language)
	if err != nil {
		return nil, err
	}
	return []byte(k.Source), nil
}

// Argv returns the command line that starts k: interpreter (k.Interpreter
// when empty), the script written at scriptPath, and the connection file.
func (k Kernel) Argv(interpreter, scriptPath, connectionFile string) []string {
	if interpreter == "" {
		interpreter = k.Interpreter
	}
	return []string{interpreter, scriptPath, "-f", connectionFile}
}

// IPythonToolShim returns Python that defines tool() and ToolError, with
// the same envelope, in a kernel that is not berth's (ipykernel). Execute
// it once, silently, after connecting.
func IPythonToolShim() string { return ipythonToolShim }

// ToolRequest is a tool() call from a cell, decoded from the prompt of its
// input_request.
type ToolRequest struct {
	// Tool is the tool's name.
	Tool string `json:"berth_tool"`
	// Args is the arguments as the cell gave them (any JSON; usually an
	// object).
	Args json.RawMessage `json:"args"`
}

// ParseToolRequest reports whether prompt is a tool() envelope and decodes
// it. Any other prompt is an ordinary input() call.
func ParseToolRequest(prompt string) (ToolRequest, bool) {
	p := strings.TrimSpace(prompt)
	if !strings.HasPrefix(p, "{") || !strings.Contains(p, `"berth_tool"`) {
		return ToolRequest{}, false
	}
	var req ToolRequest
	if err := json.Unmarshal([]byte(p), &req); err != nil || req.Tool == "" {
		return ToolRequest{}, false
	}
	if len(req.Args) == 0 {
		req.Args = json.RawMessage("{}")
	}
	return req, true
}

// ToolReply is the value of the input_reply answering a [ToolRequest].
type ToolReply struct {
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// ReplyOK returns the input_reply value that makes tool() return result
// (marshalled to JSON; a json.RawMessage passes through).
func ReplyOK(result any) (string, error) {
	raw, err := json.Marshal(result)
	if err != nil {
		return "", fmt.Errorf("bundled: encode the tool result for the kernel: %w", err)
	}
	b, err := json.Marshal(ToolReply{OK: true, Result: raw})
	if err != nil {
		return "", fmt.Errorf("bundled: encode the tool reply: %w", err)
	}
	return string(b), nil
}

// ReplyError returns the input_reply value that makes tool() raise
// ToolError with message.
func ReplyError(message string) string {
	if message == "" {
		message = "the tool call failed"
	}
	b, _ := json.Marshal(ToolReply{Error: message}) // a string always marshals
	return string(b)
}
