package runstore

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Record is what a berth needs to adopt a run after a restart.
//
// Its JSON encoding is the stored form and includes the resident's
// secret: never send it anywhere but a [Store]. Printing a Record with
// the fmt package (any verb, also inside slices, maps and structs), or
// logging it with log/slog, shows neither the secret nor the contents of
// State (which may hold other credentials, such as a kernel's connection
// key), only the names and sizes of its entries. Log a Record itself,
// not a slice or struct holding one: slog resolves LogValue only on the
// value logged, and its JSON handler marshals the rest, stored form
// included.
type Record struct {
	ID           string                     `json:"id"`
	Tenant       string                     `json:"tenant,omitempty"`
	Conversation string                     `json:"conversation_id,omitempty"`
	Sandbox      string                     `json:"sandbox"` // resolved reference, e.g. docker://<id>
	Workspace    string                     `json:"workspace"`
	Mode         string                     `json:"mode"`
	Vibe         bool                       `json:"vibe,omitempty"`
	Session      bool                       `json:"session,omitempty"` // opened by an MCP session, closed with it (controller.RunSpec.Session)
	Placement    string                     `json:"placement,omitempty"`
	Opened       time.Time                  `json:"opened"`
	Updated      time.Time                  `json:"updated"`
	Owner        string                     `json:"owner,omitempty"` // the replica (berth instance) that serves it
	User         string                     `json:"user,omitempty"`  // who the run's processes run as on the host (controller.Config.HostUser)
	Resident     *Resident                  `json:"resident,omitempty"`
	State        map[string]json.RawMessage `json:"state,omitempty"` // per resource: "eval", "structural", "questions", "debug", …
}

// Resident is where a run's resident supervisor lives inside its sandbox
// and the secret that authenticates berth to it.
//
// Printing a Resident with the fmt package (any verb), its String and
// GoString methods, and logging it with log/slog all redact the secret.
type Resident struct {
	Dir    string `json:"dir"`
	Secret []byte `json:"secret"`
}

// redacted stands for a secret wherever a value is printed.
const redacted = "[redacted]"

// String describes r without its secret.
func (r Resident) String() string {
	return fmt.Sprintf("{Dir:%s Secret:%s}", r.Dir, r.secretNote())
}

// GoString describes r as Go syntax, without its secret.
func (r Resident) GoString() string {
	return fmt.Sprintf("runstore.Resident{Dir:%q, Secret:%s}", r.Dir, r.secretNote())
}

// Format prints r for every fmt verb without its secret: %#v as
// [Resident.GoString], everything else as [Resident.String]. Without it a
// verb like %d or %x would print the secret's bytes.
func (r Resident) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		io.WriteString(f, r.GoString())
		return
	}
	io.WriteString(f, r.String())
}

// LogValue is what log/slog records for r: its directory, and the
// secret's length only.
func (r Resident) LogValue() slog.Value {
	return slog.GroupValue(slog.String("dir", r.Dir), slog.String("secret", r.secretNote()))
}

func (r Resident) secretNote() string {
	if len(r.Secret) == 0 {
		return "[none]"
	}
	return "[redacted " + strconv.Itoa(len(r.Secret)) + " bytes]"
}

// stateSummary lists State's resources with their sizes, sorted, never
// their contents.
func (r Record) stateSummary() string {
	names := make([]string, 0, len(r.State))
	for name := range r.State {
		names = append(names, name)
	}
	sort.Strings(names)
	for i, name := range names {
		names[i] = name + "(" + strconv.Itoa(len(r.State[name])) + " bytes)"
	}
	return "[" + strings.Join(names, " ") + "]"
}

func (r Record) residentString(gosyntax bool) string {
	switch {
	case r.Resident == nil && gosyntax:
		return "nil"
	case r.Resident == nil:
		return "<nil>"
	case gosyntax:
		return "&" + r.Resident.GoString()
	}
	return r.Resident.String()
}

// String describes r without its resident's secret or its State's
// contents.
func (r Record) String() string {
	return fmt.Sprintf("{ID:%s Tenant:%s Conversation:%s Sandbox:%s Workspace:%s Mode:%s Vibe:%t Placement:%s Opened:%s Updated:%s Owner:%s User:%s Resident:%s State:%s}",
		r.ID, r.Tenant, r.Conversation, r.Sandbox, r.Workspace, r.Mode, r.Vibe, r.Placement,
		r.Opened.Format(time.RFC3339Nano), r.Updated.Format(time.RFC3339Nano), r.Owner, r.User,
		r.residentString(false), r.stateSummary())
}

// GoString describes r as Go syntax, without its resident's secret or
// its State's contents.
func (r Record) GoString() string {
	return fmt.Sprintf("runstore.Record{ID:%q, Tenant:%q, Conversation:%q, Sandbox:%q, Workspace:%q, Mode:%q, Vibe:%t, Placement:%q, Opened:%q, Updated:%q, Owner:%q, User:%q, Resident:%s, State:%s}",
		r.ID, r.Tenant, r.Conversation, r.Sandbox, r.Workspace, r.Mode, r.Vibe, r.Placement,
		r.Opened.Format(time.RFC3339Nano), r.Updated.Format(time.RFC3339Nano), r.Owner, r.User,
		r.residentString(true), r.stateSummary())
}

// Format prints r for every fmt verb without its resident's secret or
// its State's contents: %#v as [Record.GoString], everything else as
// [Record.String].
func (r Record) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		io.WriteString(f, r.GoString())
		return
	}
	io.WriteString(f, r.String())
}

// LogValue is what log/slog records for r: everything but the resident's
// secret and State's contents (State's entries with their sizes).
func (r Record) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.String("id", r.ID),
		slog.String("tenant", r.Tenant),
		slog.String("conversation_id", r.Conversation),
		slog.String("sandbox", r.Sandbox),
		slog.String("workspace", r.Workspace),
		slog.String("mode", r.Mode),
		slog.Bool("vibe", r.Vibe),
		slog.String("placement", r.Placement),
		slog.Time("opened", r.Opened),
		slog.Time("updated", r.Updated),
		slog.String("owner", r.Owner),
		slog.String("user", r.User),
	}
	if r.Resident != nil {
		attrs = append(attrs, slog.Any("resident", *r.Resident))
	}
	attrs = append(attrs, slog.String("state", r.stateSummary()))
	return slog.GroupValue(attrs...)
}
