package tools

// Resource is one live thing a run holds on its sandbox — a language
// server, a kernel, a debug session, a worker — as the operator console
// (GET /v1/runs/{id}/resources) shows it. Tool packages report theirs
// through a [Reporter] the run's binder registers.
type Resource struct {
	// Kind is what it is: "language server", "kernel", "debug session",
	// "worker".
	Kind string `json:"kind"`
	// Name tells it apart from others of its kind, such as "gopls at the
	// workspace root" or "python".
	Name string `json:"name"`
	// State is its state in a few words: "running", "starting", "stopped: idle".
	State string `json:"state"`
	// Detail is anything else worth a glance: pid, binary, uptime.
	Detail string `json:"detail,omitempty"`
}

// Reporter returns a snapshot of a tool package's live resources of one
// run. It must not block on I/O: the console calls it on every refresh.
type Reporter func() []Resource
