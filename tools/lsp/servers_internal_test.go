package lsp

import (
	"slices"
	"strings"
	"testing"
)

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

// TestClangdHostArgs: on the host clangd reads no workspace .clangd (which
// could add -fplugin flags or name an index to connect to); nowhere does
// berth pass --query-driver, which would let clangd run the compiler a
// compile_commands.json names.
func TestClangdHostArgs(t *testing.T) {
	for _, sv := range DefaultServers() {
		for _, host := range []bool{false, true} {
			for _, a := range sv.args(host) {
				if strings.HasPrefix(a, "--query-driver") {
					t.Errorf("%s (host %v) is started with %s", sv.ID, host, a)
				}
			}
		}
		if sv.ID != "clangd" {
			continue
		}
		if got := sv.args(true); !slices.Contains(got, "--enable-config=false") {
			t.Errorf("clangd on the host: args %q lack --enable-config=false", got)
		}
		if got := sv.args(false); slices.Contains(got, "--enable-config=false") {
			t.Errorf("clangd in a container: args %q turn the project's .clangd off", got)
		}
	}
}

// TestTableOrder: pyright answers Python before pylsp where both are there.
func TestTableOrder(t *testing.T) {
	var ids []string
	for _, sv := range DefaultServers() {
		ids = append(ids, sv.ID)
	}
	if p, l := slices.Index(ids, "pyright"), slices.Index(ids, "pylsp"); p < 0 || l < 0 || p > l {
		t.Errorf("table order %q: want pyright before pylsp", ids)
	}
}
