package lsp

import "testing"

// TestHostInitOptions: on the host rust-analyzer starts with build
// scripts, proc macros and check on save off (each runs the crate's own
// code); in a container it keeps its defaults.
func TestHostInitOptions(t *testing.T) {
	var ra Server
	for _, sv := range DefaultServers() {
		if sv.ID == "rust-analyzer" {
			ra = sv
		}
	}
	if got := ra.initOptions(false); got != nil {
		t.Errorf("in a container: %v, want the server's defaults (nil)", got)
	}
	opts, ok := ra.initOptions(true).(map[string]any)
	if !ok {
		t.Fatalf("on the host: %v, want options that turn off project code", ra.initOptions(true))
	}
	off := func(m any, keys ...string) bool {
		for _, k := range keys[:len(keys)-1] {
			mm, ok := m.(map[string]any)
			if !ok {
				return false
			}
			m = mm[k]
		}
		mm, ok := m.(map[string]any)
		return ok && mm[keys[len(keys)-1]] == false
	}
	for _, k := range [][]string{{"cargo", "buildScripts", "enable"}, {"procMacro", "enable"}, {"checkOnSave"}} {
		if !off(opts, k...) {
			t.Errorf("on the host %v is not false: %v", k, opts)
		}
	}
}
