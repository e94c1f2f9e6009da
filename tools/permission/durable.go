package permission

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Across berth's restarts: an operator's "allow for this run" decisions
// are part of the run, so they persist with it (Snapshot, Restore) and a
// restarted berth does not ask again what the operator allowed. Nothing
// else of the gate is state: its policy comes from the configuration.

// gateState is a gate's snapshot: the names allowed for the rest of the
// run, sorted.
type gateState struct {
	Allowed []string `json:"allowed"`
}

// Generation changes whenever an "allow for this run" decision is added.
func (g *Gate) Generation() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return uint64(len(g.allowed))
}

// Snapshot returns the gate's "allow for this run" decisions.
func (g *Gate) Snapshot() ([]byte, error) {
	g.mu.Lock()
	st := gateState{Allowed: make([]string, 0, len(g.allowed))}
	for name := range g.allowed {
		st.Allowed = append(st.Allowed, name)
	}
	g.mu.Unlock()
	slices.Sort(st.Allowed)
	return json.Marshal(st)
}

// Restore loads a Snapshot into a gate before its first call. Unreadable
// data is refused and changes nothing: the operator is asked again.
func (g *Gate) Restore(data []byte) error {
	var st gateState
	if err := json.Unmarshal(data, &st); err != nil {
		return fmt.Errorf("permission: the stored \"allow for this run\" decisions are unreadable (%v); the operator is asked again", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, name := range st.Allowed {
		if name != "" {
			g.allowed[name] = true
		}
	}
	return nil
}
