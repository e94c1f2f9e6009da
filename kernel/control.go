package kernel

import (
	"context"
	"encoding/json"
	"fmt"
)

// KernelInfo is the content of kernel_info_reply.
type KernelInfo struct {
	Status                string       `json:"status"`
	ProtocolVersion       string       `json:"protocol_version"`
	Implementation        string       `json:"implementation"`
	ImplementationVersion string       `json:"implementation_version"`
	LanguageInfo          LanguageInfo `json:"language_info"`
	Banner                string       `json:"banner"`
}

// LanguageInfo describes the kernel's language.
type LanguageInfo struct {
	Name          string `json:"name"`
	Version       string `json:"version"`
	MIMEType      string `json:"mimetype"`
	FileExtension string `json:"file_extension"`
}

// KernelInfo asks the kernel for kernel_info_reply on the shell channel.
// ctx bounds the wait.
func (c *Client) KernelInfo(ctx context.Context) (KernelInfo, error) {
	m, err := c.request(ctx, Shell, "kernel_info_request", struct{}{})
	if err != nil {
		return KernelInfo{}, err
	}
	var info KernelInfo
	if err := json.Unmarshal(m.Content, &info); err != nil {
		return KernelInfo{}, fmt.Errorf("kernel: decode kernel_info_reply: %w", err)
	}
	return info, nil
}

// Interrupt sends interrupt_request on the control channel (the kernelspec
// interrupt_mode "message") and waits for the reply; the running cell then
// ends with a KeyboardInterrupt error. Kernels that only take a signal
// need SIGINT through their process instead, which is the caller's. ctx
// bounds the wait.
func (c *Client) Interrupt(ctx context.Context) error {
	m, err := c.request(ctx, Control, "interrupt_request", struct{}{})
	if err != nil {
		return err
	}
	return replyStatus("interrupt_reply", m)
}

// Shutdown sends shutdown_request on the control channel and waits for the
// reply. The kernel then exits (restart only tells it why), so the client
// is marked dead with an error wrapping [ErrDead]; Close it. Escalating to
// SIGTERM and SIGKILL when the kernel does not exit is the caller's,
// through the process. ctx bounds the wait.
func (c *Client) Shutdown(ctx context.Context, restart bool) error {
	m, err := c.request(ctx, Control, "shutdown_request", struct {
		Restart bool `json:"restart"`
	}{restart})
	if err != nil {
		return err
	}
	if err := replyStatus("shutdown_reply", m); err != nil {
		return err
	}
	c.markDead(fmt.Errorf("%w: it was shut down on request; start a new kernel", ErrDead))
	return nil
}

// replyStatus turns a reply whose status is not "ok" into an error.
func replyStatus(name string, m *Message) error {
	var r struct {
		Status string `json:"status"`
		ExecError
	}
	if err := json.Unmarshal(m.Content, &r); err != nil {
		return fmt.Errorf("kernel: decode %s: %w", name, err)
	}
	if r.Status != "" && r.Status != "ok" {
		return fmt.Errorf("kernel: %s status %q: %s: %s", name, r.Status, r.Name, r.Value)
	}
	return nil
}
