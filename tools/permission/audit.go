package permission

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"berth.dev/berth/tools"
)

// EventDecision is the run event that carries an [Audit] record.
const EventDecision = "permission.decided"

// Outcomes of a permission decision ([Audit.Outcome]).
const (
	OutcomeAllowed       = "allowed"         // the policy allows it
	OutcomeDenied        = "denied"          // the policy forbids it
	OutcomeAllowedBefore = "allowed_for_run" // an earlier card allowed it for the run
	OutcomeApproved      = "approved"        // a card approved this call
	OutcomeAllowRun      = "approved_for_run"
	OutcomeRejected      = "rejected" // a card denied it
	OutcomeRefused       = "refused"  // nobody could decide: no approver, timed out, too large, the call ended
)

// Audit is the record of one permission decision: what was decided, on
// which call (its digest and summary), by whom (the card's answerer) or by
// which policy rule, when, and the outcome.
type Audit struct {
	Time    time.Time `json:"time"`
	Tool    string    `json:"tool"`
	Level   string    `json:"level"`
	Surface string    `json:"surface"`
	// Call is the SHA-256 of the call's arguments (a step's command line),
	// hex: the same call has the same digest.
	Call    string `json:"call_digest"`
	Summary string `json:"summary"`
	Outcome string `json:"outcome"`
	// Rule is the policy rule that decided ("level=write: ask"); for a
	// card, the rule that made it ask.
	Rule string `json:"rule,omitempty"`
	// Card and By: the card that asked, and who answered it.
	Card int    `json:"card,omitempty"`
	By   string `json:"by,omitempty"`
	// Reason says why a call was refused without a decision.
	Reason string `json:"reason,omitempty"`
}

// Digest is the call digest of an audit record.
func Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// String is the rule as an audit record names it.
func (r Rule) String() string {
	var b strings.Builder
	for _, kv := range [][2]string{{"surface", string(r.Surface)}, {"tool", r.Tool}} {
		if kv[1] != "" {
			fmt.Fprintf(&b, "%s=%s ", kv[0], kv[1])
		}
	}
	if r.Level != 0 {
		fmt.Fprintf(&b, "level=%s ", r.Level)
	}
	if b.Len() == 0 {
		b.WriteString("any ")
	}
	return strings.TrimSpace(b.String()) + ": " + string(r.Action)
}

// decision is the policy's action for t on s and the rule that chose it.
func (p Policy) decision(s tools.Surface, t tools.Tool) (Action, string) {
	for _, r := range p.Rules {
		if r.matches(s, t) {
			return r.Action, r.String()
		}
	}
	return Ask, "no rule matches: ask"
}

// record hands rec to the gate's Audit hook, stamped now.
func (g *Gate) record(rec *Audit) {
	if g.audit == nil || rec.Outcome == "" {
		return
	}
	rec.Time = time.Now().UTC()
	g.audit(*rec)
}
