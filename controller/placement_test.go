package controller

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/host"
)

// realHost replaces the rig's fake host provider by the real one.
func realHost(c *Config) {
	c.Providers = []sandbox.Provider{c.Providers[0], &host.Provider{}}
}

func TestHostPlacementPolicy(t *testing.T) {
	type want int
	const (
		onHost     want = iota
		notFound        // auto without a container: sandbox.ErrNotFound
		refusedOff      // explicit host: ErrPlacement
	)
	policies := []struct {
		name       string
		placement  HostPlacement
		noFallback bool
		auto, host want
		autoSays   string
	}{
		{"zero value", "", false, onHost, onHost, ""},
		{"zero value with NoHostFallback", "", true, notFound, onHost, "host fallback is disabled"},
		{"fallback", HostFallback, false, onHost, onHost, ""},
		{"fallback with NoHostFallback", HostFallback, true, notFound, onHost, "host fallback is disabled"},
		{"explicit", HostExplicit, false, notFound, onHost, "host fallback is disabled"},
		{"off", HostOff, false, notFound, refusedOff, "host placement is off"},
		{"off with NoHostFallback", HostOff, true, notFound, refusedOff, "host placement is off"},
	}
	for _, p := range policies {
		for _, sb := range []string{AutoSandbox, HostScheme} {
			t.Run(p.name+"/"+sb, func(t *testing.T) {
				rg := newRig(t, func(c *Config) {
					realHost(c)
					c.HostPlacement = p.placement
					c.NoHostFallback = p.noFallback
				})
				w := p.auto
				if sb == HostScheme {
					w = p.host
				}
				r, err := rg.c.Open(context.Background(), RunSpec{ConversationID: "c-nope", Sandbox: sb, Workspace: t.TempDir()})
				switch w {
				case onHost:
					if err != nil || r.Sandbox() != HostScheme {
						t.Fatalf("Open = %v, %v; want a host run", r, err)
					}
				case notFound:
					if !errors.Is(err, sandbox.ErrNotFound) || !strings.Contains(err.Error(), p.autoSays) {
						t.Fatalf("Open: %v; want ErrNotFound saying %q", err, p.autoSays)
					}
				case refusedOff:
					if !errors.Is(err, ErrPlacement) {
						t.Fatalf("Open: %v; want ErrPlacement", err)
					}
					for _, s := range []string{"host placement is off on this berth", "berth.conversation=c-nope", "--host-placement explicit"} {
						if !strings.Contains(err.Error(), s) {
							t.Errorf("refusal %q does not say %q", err, s)
						}
					}
				}
			})
		}
	}
	// The labelled container is found whatever the host policy.
	rg := newRig(t, func(c *Config) { c.HostPlacement = HostOff })
	if r, err := rg.c.Open(context.Background(), RunSpec{ConversationID: "c-42", Workspace: "/workspace"}); err != nil || r.Sandbox() != "docker://0123abcd" {
		t.Errorf("auto with host placement off: %v, %v; want the labelled container", r, err)
	}
	if _, err := New(Config{HostPlacement: "sometimes"}); err == nil || !strings.Contains(err.Error(), "off, explicit or fallback") {
		t.Errorf("New with a bad host placement: %v", err)
	}
}

func TestHostRoots(t *testing.T) {
	base := t.TempDir()
	mkdir := func(p string) string {
		t.Helper()
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	symlink := func(target, link string) string {
		t.Helper()
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		return link
	}
	root := mkdir(filepath.Join(base, "root"))
	proj := mkdir(filepath.Join(root, "proj"))
	out := mkdir(filepath.Join(base, "out"))
	kit := mkdir(filepath.Join(base, "rootkit"))
	leadsOut := symlink(out, filepath.Join(root, "leads-out"))
	rootLink := symlink(root, filepath.Join(base, "root-link"))
	inner := symlink(proj, filepath.Join(root, "inner"))

	tests := []struct {
		name      string
		roots     []string
		sandbox   string
		ws        string
		wantWS    string // "" when refused
		errSubstr []string
	}{
		{name: "under a root", roots: []string{root}, ws: proj, wantWS: proj},
		{name: "the root itself", roots: []string{root}, ws: root, wantWS: root},
		{name: "a second root", roots: []string{out, root}, ws: proj, wantWS: proj},
		{name: "outside", roots: []string{root}, ws: out, errSubstr: []string{out, "not under a host root", root, "--host-root"}},
		{name: "a symlink inside the root that leads out", roots: []string{root}, ws: leadsOut,
			errSubstr: []string{leadsOut, "resolves to " + out}},
		{name: "dot-dot out of the root", roots: []string{root}, ws: root + "/../out", errSubstr: []string{"not under a host root"}},
		{name: "a sibling sharing the root's prefix", roots: []string{root}, ws: kit, errSubstr: []string{"not under a host root"}},
		{name: "a symlink inside the root that stays in", roots: []string{root}, ws: inner, wantWS: proj},
		{name: "a root given through a symlink", roots: []string{rootLink}, ws: proj, wantWS: proj},
		{name: "a workspace given through a symlinked root", roots: []string{root}, ws: filepath.Join(rootLink, "proj"), wantWS: proj},
		{name: "the filesystem root outside", roots: []string{root}, ws: "/", errSubstr: []string{"not under a host root"}},
		{name: "auto's fallback is checked too", roots: []string{root}, sandbox: AutoSandbox, ws: out, errSubstr: []string{"not under a host root"}},
		{name: "no roots: nowhere", roots: []string{}, ws: proj, errSubstr: []string{"names no host root", "--host-root"}},
		{name: "nil roots: anywhere", roots: nil, ws: out, wantWS: out},
		{name: "a missing workspace under roots", roots: []string{root}, ws: filepath.Join(root, "nope"), errSubstr: []string{"cannot be resolved", root}},
		// No oracle for which host paths exist: missing or not, outside is outside.
		{name: "a missing workspace outside the roots", roots: []string{root}, ws: filepath.Join(out, "nope"), errSubstr: []string{"not under a host root"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rg := newRig(t, func(c *Config) { realHost(c); c.HostRoots = tt.roots })
			sb := tt.sandbox
			if sb == "" {
				sb = HostScheme
			}
			r, err := rg.c.Open(context.Background(), RunSpec{Sandbox: sb, Workspace: tt.ws})
			if tt.wantWS != "" {
				if err != nil {
					t.Fatalf("Open(%s): %v", tt.ws, err)
				}
				if got := r.Info().Workspace; got != tt.wantWS {
					t.Errorf("workspace = %s, want %s", got, tt.wantWS)
				}
				return
			}
			if err == nil {
				t.Fatalf("Open(%s) placed a run in %s, want a refusal", tt.ws, r.Info().Workspace)
			}
			if !strings.Contains(tt.name, "missing") && !errors.Is(err, ErrPlacement) {
				t.Errorf("Open(%s): %v does not wrap ErrPlacement", tt.ws, err)
			}
			for _, s := range tt.errSubstr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("refusal %q does not say %q", err, s)
				}
			}
		})
	}

	// The default workspace is held to the roots too.
	rg := newRig(t, func(c *Config) { realHost(c); c.HostRoots = []string{root}; c.DefaultWorkspace = out })
	if _, err := rg.c.Open(context.Background(), RunSpec{Sandbox: HostScheme}); !errors.Is(err, ErrPlacement) {
		t.Errorf("the default workspace outside the roots: %v, want ErrPlacement", err)
	}
	if _, err := New(Config{HostRoots: []string{filepath.Join(base, "absent")}}); err == nil || !strings.Contains(err.Error(), "absent") {
		t.Errorf("New with a missing host root: %v", err)
	}
}

func TestExplicitContainerNeedsLabel(t *testing.T) {
	// The rig's docker provider labels 0123abcd with c-42 and feed with c-7.
	tests := []struct {
		name      string
		allow     bool
		spec      RunSpec
		wantRef   string
		errSubstr []string
	}{
		{name: "labelled with the run's conversation", spec: RunSpec{ConversationID: "c-42", Sandbox: "docker://0123abcd"}, wantRef: "docker://0123abcd"},
		{name: "another conversation's container", spec: RunSpec{ConversationID: "c-42", Sandbox: "docker://feed"},
			errSubstr: []string{"docker://feed refused", "berth.conversation=c-42", "docker://0123abcd", "--allow-unlabelled"}},
		{name: "a conversation with no container", spec: RunSpec{ConversationID: "c-none", Sandbox: "docker://feed"},
			errSubstr: []string{"berth.conversation=c-none", "no container"}},
		{name: "no conversation id", spec: RunSpec{Sandbox: "docker://feed"},
			errSubstr: []string{"needs the run's conversation_id", "berth.conversation=<conversation id>"}},
		{name: "allowed unlabelled", allow: true, spec: RunSpec{Sandbox: "docker://feed"}, wantRef: "docker://feed"},
		{name: "allowed another conversation's", allow: true, spec: RunSpec{ConversationID: "c-42", Sandbox: "docker://feed"}, wantRef: "docker://feed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rg := newRig(t, func(c *Config) { c.AllowUnlabelled = tt.allow })
			tt.spec.Workspace = "/workspace"
			r, err := rg.c.Open(context.Background(), tt.spec)
			if tt.wantRef != "" {
				if err != nil || r.Sandbox() != tt.wantRef {
					t.Fatalf("Open = %v, %v; want a run in %s", r, err, tt.wantRef)
				}
				return
			}
			if !errors.Is(err, ErrPlacement) {
				t.Fatalf("Open: %v; want ErrPlacement", err)
			}
			for _, s := range tt.errSubstr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("refusal %q does not say %q", err, s)
				}
			}
			for _, sb := range rg.docker.opened {
				if sb.closed.Load() != 1 {
					t.Errorf("the refused sandbox %s was closed %d times, want once", sb.ref, sb.closed.Load())
				}
			}
		})
	}
}

func TestSameContainer(t *testing.T) {
	tests := []struct {
		sch, opened, located string
		want                 bool
	}{
		{"docker", "docker://abc", "docker://abc", true},
		{"docker", "docker://abc", "docker://abd", false},
		{"containerd", "containerd://k8s.io/abc", "containerd://k8s.io/abc", true},
		{"containerd", "containerd://default/abc", "containerd://k8s.io/abc", false},
		{"kube", "kube://ns/pod/app", "kube://ns/pod/app", true},
		{"kube", "kube://ns/pod/sidecar", "kube://ns/pod/app", true}, // the label is the pod's
		{"kube", "kube://ns/pod2/app", "kube://ns/pod/app", false},
		{"kube", "kube://other/pod/app", "kube://ns/pod/app", false},
	}
	for _, tt := range tests {
		if got := sameContainer(tt.sch, tt.opened, tt.located); got != tt.want {
			t.Errorf("sameContainer(%s, %s, %s) = %v, want %v", tt.sch, tt.opened, tt.located, got, tt.want)
		}
	}
}

// tenantRig is a rig whose docker provider also has containers labelled
// with a tenant: a1 (conversation c1, tenant a), b2 (c2, b), and a3 and
// b3, both of conversation c3 (tenants a and b). 0123abcd (c-42) and feed
// (c-7) carry no tenant label.
func tenantRig(t *testing.T, mod func(*Config)) *rig {
	t.Helper()
	rg := newRig(t, mod)
	rg.docker.labelled = map[string]map[string]string{
		"a1": {"berth.conversation": "c1", "berth.tenant": "a"},
		"b2": {"berth.conversation": "c2", "berth.tenant": "b"},
		"a3": {"berth.conversation": "c3", "berth.tenant": "a"},
		"b3": {"berth.conversation": "c3", "berth.tenant": "b"},
	}
	return rg
}

// TestTenantLabels: with RequireTenantLabel a run is placed only in a
// container labelled with its tenant as well as its conversation, for
// auto and for an explicit reference alike; a refusal names both labels
// the platform must set and nothing of the other tenant's container.
func TestTenantLabels(t *testing.T) {
	tests := []struct {
		name      string
		spec      RunSpec
		wantRef   string
		wantErr   error
		errSubstr []string
	}{
		{name: "auto, own container", spec: RunSpec{Tenant: "a", ConversationID: "c1"}, wantRef: "docker://a1"},
		{name: "explicit, own container", spec: RunSpec{Tenant: "a", ConversationID: "c1", Sandbox: "docker://a1"}, wantRef: "docker://a1"},
		{name: "auto, one conversation id in two tenants", spec: RunSpec{Tenant: "b", ConversationID: "c3"}, wantRef: "docker://b3"},
		{name: "auto, the same id for the other tenant", spec: RunSpec{Tenant: "a", ConversationID: "c3"}, wantRef: "docker://a3"},
		{name: "auto, another tenant's conversation", spec: RunSpec{Tenant: "b", ConversationID: "c1"},
			wantErr: sandbox.ErrNotFound, errSubstr: []string{"berth.conversation=c1 and berth.tenant=b"}},
		{name: "explicit, another tenant's container", spec: RunSpec{Tenant: "b", ConversationID: "c1", Sandbox: "docker://a1"},
			wantErr: ErrPlacement, errSubstr: []string{"docker://a1 refused", "both labels berth.conversation=c1 and berth.tenant=b", "label the conversation's container berth.conversation=c1 and berth.tenant=b"}},
		{name: "explicit, another tenant's container of the same id", spec: RunSpec{Tenant: "b", ConversationID: "c3", Sandbox: "docker://a3"},
			wantErr: ErrPlacement, errSubstr: []string{"docker://a3 refused", "the container labelled so is docker://b3"}},
		{name: "auto, no tenant label", spec: RunSpec{Tenant: "a", ConversationID: "c-42"},
			wantErr: sandbox.ErrNotFound, errSubstr: []string{"berth.conversation=c-42 and berth.tenant=a"}},
		{name: "explicit, no tenant label", spec: RunSpec{Tenant: "a", ConversationID: "c-42", Sandbox: "docker://0123abcd"},
			wantErr: ErrPlacement, errSubstr: []string{"berth.conversation=c-42 and berth.tenant=a"}},
		{name: "explicit, no conversation", spec: RunSpec{Tenant: "a", Sandbox: "docker://a1"},
			wantErr: ErrPlacement, errSubstr: []string{"needs the run's conversation_id", "berth.conversation=<conversation id> and berth.tenant=a"}},
		{name: "auto, no tenant", spec: RunSpec{ConversationID: "c1"},
			wantErr: ErrPlacement, errSubstr: []string{"has no tenant", "berth.tenant=<tenant>"}},
		{name: "explicit, no tenant", spec: RunSpec{ConversationID: "c1", Sandbox: "docker://a1"},
			wantErr: ErrPlacement, errSubstr: []string{"has no tenant"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rg := tenantRig(t, func(c *Config) { c.RequireTenantLabel = true; c.HostPlacement = HostOff })
			tt.spec.Workspace = "/workspace"
			r, err := rg.c.Open(context.Background(), tt.spec)
			if tt.wantRef != "" {
				if err != nil || r.Sandbox() != tt.wantRef {
					t.Fatalf("Open = %v, %v; want a run in %s", r, err, tt.wantRef)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Open: %v; want %v", err, tt.wantErr)
			}
			for _, s := range tt.errSubstr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("refusal %q does not say %q", err, s)
				}
			}
			if tt.spec.Tenant == "b" && strings.Contains(err.Error(), "tenant=a") {
				t.Errorf("the refusal of tenant b names tenant a's label: %q", err)
			}
			for _, sb := range rg.docker.opened {
				if sb.closed.Load() != 1 {
					t.Errorf("the refused sandbox %s was closed %d times, want once", sb.ref, sb.closed.Load())
				}
			}
		})
	}
}

// TestTenantLabelsSingleTenant: without RequireTenantLabel (one tenant)
// the conversation label alone places a run, with or without a tenant
// label on the container, as before.
func TestTenantLabelsSingleTenant(t *testing.T) {
	for _, tt := range []struct {
		spec    RunSpec
		wantRef string
	}{
		{RunSpec{Tenant: "default", ConversationID: "c-42"}, "docker://0123abcd"},
		{RunSpec{Tenant: "default", ConversationID: "c-42", Sandbox: "docker://0123abcd"}, "docker://0123abcd"},
		{RunSpec{Tenant: "default", ConversationID: "c1"}, "docker://a1"}, // a tenant label is not asked for
		{RunSpec{Tenant: "default", ConversationID: "c2", Sandbox: "docker://b2"}, "docker://b2"},
		{RunSpec{ConversationID: "c-7", Sandbox: "docker://feed"}, "docker://feed"},
	} {
		rg := tenantRig(t, nil)
		tt.spec.Workspace = "/workspace"
		r, err := rg.c.Open(context.Background(), tt.spec)
		if err != nil || r.Sandbox() != tt.wantRef {
			t.Errorf("Open(%+v) = %v, %v; want a run in %s", tt.spec, r, err, tt.wantRef)
		}
	}
}
