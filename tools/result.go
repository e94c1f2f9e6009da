package tools

import (
	"encoding/json"
	"fmt"
)

// Result is a tool's answer, in the shape of an MCP CallToolResult. Text is
// written for a model: compact, path:line anchored, bounded, and an error
// says what to do next.
type Result struct {
	Content           []Content `json:"content"`
	IsError           bool      `json:"isError,omitempty"`
	StructuredContent any       `json:"structuredContent,omitempty"`

	// Touched lists the files this call changed (paths relative to the
	// workspace, slash-separated), for middleware such as diagnostics on
	// write. It is not part of the wire format.
	Touched []string `json:"-"`
}

// Content is one block of a Result.
type Content struct {
	Type     string `json:"type"`               // "text" or "image"
	Text     string `json:"text,omitempty"`     // for "text"
	MimeType string `json:"mimeType,omitempty"` // for "image"
	Data     []byte `json:"data,omitempty"`     // for "image"; base64 on the wire
}

// MarshalJSON writes the fields MCP expects for the block's type: a text
// block always has "text", an image block "mimeType" and "data".
func (c Content) MarshalJSON() ([]byte, error) {
	switch c.Type {
	case "text":
		return json.Marshal(struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}{c.Type, c.Text})
	case "image":
		return json.Marshal(struct {
			Type     string `json:"type"`
			MimeType string `json:"mimeType"`
			Data     []byte `json:"data"`
		}{c.Type, c.MimeType, c.Data})
	}
	type plain Content
	return json.Marshal(plain(c))
}

// Text returns a successful result with one text block.
func Text(text string) *Result {
	return &Result{Content: []Content{{Type: "text", Text: text}}}
}

// Textf is Text with formatting.
func Textf(format string, args ...any) *Result { return Text(fmt.Sprintf(format, args...)) }

// Errorf returns a result the model should act on: IsError with one text
// block. Write what failed, why, and what to call next.
func Errorf(format string, args ...any) *Result {
	return &Result{Content: []Content{{Type: "text", Text: fmt.Sprintf(format, args...)}}, IsError: true}
}

// AppendText adds a text block to r.
func (r *Result) AppendText(text string) {
	r.Content = append(r.Content, Content{Type: "text", Text: text})
}

// AllText joins the text blocks of r with newlines.
func (r *Result) AllText() string {
	var s string
	for i, c := range r.Content {
		if c.Type != "text" {
			continue
		}
		if i > 0 && s != "" {
			s += "\n"
		}
		s += c.Text
	}
	return s
}
