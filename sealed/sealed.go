// Package sealed encodes a snapshot of state that a restarted berth
// restores (staged edits, question cards) with its format's name and a
// SHA-256 of its content, so that a damaged or foreign snapshot is refused
// instead of restored wrong.
package sealed

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
)

// envelope is a sealed snapshot as stored.
type envelope struct {
	Format string          `json:"format"`
	SHA256 string          `json:"sha256"`
	State  json.RawMessage `json:"state"`
}

// Marshal encodes state as JSON and seals it under format (for example
// "berth.questions.v1").
func Marshal(format string, state any) ([]byte, error) {
	b, err := json.Marshal(state)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	return json.Marshal(envelope{Format: format, SHA256: hex.EncodeToString(sum[:]), State: b})
}

// Unmarshal checks that data is a whole snapshot of format, undamaged,
// and decodes its state into state. Its errors say which of these failed.
func Unmarshal(data []byte, format string, state any) error {
	var e envelope
	if err := json.Unmarshal(data, &e); err != nil {
		return fmt.Errorf("the snapshot is not readable (%d bytes): %w", len(data), err)
	}
	if e.Format != format {
		return fmt.Errorf("the snapshot's format is %q, this berth reads %q", e.Format, format)
	}
	sum := sha256.Sum256(e.State)
	if hex.EncodeToString(sum[:]) != e.SHA256 {
		return errors.New("the snapshot is damaged: its checksum does not match its content")
	}
	if err := json.Unmarshal(e.State, state); err != nil {
		return fmt.Errorf("the snapshot's state is not readable: %w", err)
	}
	return nil
}
