package kubestore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"berth.dev/berth/runstore"
)

// These tests need no cluster: they cover what the store refuses before
// it calls the API server (the fake client is never called), and, with
// the fake client's storage, the records' MACs.

func TestCheckID(t *testing.T) {
	tests := []struct {
		id string
		ok bool
	}{
		{"0123456789abcdef0123456789abcdef", true}, // controller.newID: 32 hex digits
		{"run-1", true},
		{"", false},
		{"UPPER", false}, // not a DNS name
		{"a_b", false},   // a label value, not a DNS name
		{"a/b", false},   // neither
		{"-a", false},    // neither
		{strings.Repeat("a", 63), true},
		{strings.Repeat("a", 64), false}, // over a label value's 63
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			if err := checkID(tt.id); (err == nil) != tt.ok {
				t.Errorf("checkID(%q) = %v, want ok=%v", tt.id, err, tt.ok)
			}
		})
	}
}

func TestNewOptions(t *testing.T) {
	tests := []struct {
		name      string
		namespace string
		identity  string
		opts      Options
		want      string // in the error; "" for none
		duration  time.Duration
		interval  time.Duration
	}{
		{"defaults", "berth", "berth-0", Options{}, "", DefaultLeaseDuration, DefaultLeaseDuration / 3},
		{"short", "berth", "berth-0", Options{LeaseDuration: 2 * time.Second, RenewInterval: time.Second}, "", 2 * time.Second, time.Second},
		{"no identity", "berth", "", Options{}, "identity", 0, 0},
		{"bad namespace", "Berth", "berth-0", Options{}, "namespace", 0, 0},
		{"fractional lease", "berth", "berth-0", Options{LeaseDuration: 1500 * time.Millisecond}, "whole seconds", 0, 0},
		{"sub-second lease", "berth", "berth-0", Options{LeaseDuration: 500 * time.Millisecond}, "whole seconds", 0, 0},
		{"renew too slow", "berth", "berth-0", Options{LeaseDuration: 2 * time.Second, RenewInterval: 2 * time.Second}, "shorter", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(fake.NewClientset(), tt.namespace, tt.identity, tt.opts)
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("New = %v, want an error about %q", err, tt.want)
				}
				if s != nil {
					s.Close()
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			defer s.Close()
			if s.duration != tt.duration || s.interval != tt.interval {
				t.Errorf("duration %v interval %v, want %v %v", s.duration, s.interval, tt.duration, tt.interval)
			}
		})
	}
	if _, err := New(nil, "berth", "berth-0", Options{}); err == nil {
		t.Error("New with no client succeeded")
	}
}

// TestPutTooLargeOffline: the size check comes before any call.
func TestPutTooLargeOffline(t *testing.T) {
	s, err := New(fake.NewClientset(), "berth", "berth-0", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.maxRecord = 100
	r := runstore.Record{ID: "abc", Workspace: strings.Repeat("w", 200)}
	if err := s.Put(context.Background(), r); !errors.Is(err, runstore.ErrTooLarge) {
		t.Errorf("Put = %v, want ErrTooLarge", err)
	}
	if err := s.Put(context.Background(), runstore.Record{ID: "Bad_ID"}); err == nil {
		t.Error("Put of an id that cannot name a Secret succeeded")
	}
}

func TestRulesLeast(t *testing.T) {
	for _, r := range Rules() {
		for _, v := range r.Verbs {
			if v == "*" || v == "watch" || v == "patch" || v == "deletecollection" {
				t.Errorf("rule %v grants %s, which the store never uses", r, v)
			}
		}
		if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			t.Errorf("rule %v", r)
		}
		for _, res := range r.Resources {
			if res != "secrets" && res != "leases" {
				t.Errorf("rule %v names %s, which the store never touches", r, res)
			}
		}
	}
}

// TestSealedRecords: with a key, a record is stored with its MAC; one
// changed in its Secret (its tenant), or whose MAC was removed, is
// refused by Get and List with runstore.ErrForged. The fake client
// stands in for the API server's storage.
func TestSealedRecords(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	key := runstore.DeriveKey([]byte(strings.Repeat("k", 32)))
	s, err := New(cs, "berth", "berth-0", Options{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, id := range []string{"run-a", "run-b", "run-c"} {
		if err := s.Put(ctx, runstore.Record{ID: id, Tenant: "acme", Sandbox: "docker://x", Opened: time.Unix(0, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	secrets := cs.CoreV1().Secrets("berth")
	tamper := func(id string, change func(map[string][]byte)) {
		sec, err := secrets.Get(ctx, Name(id), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		change(sec.Data)
		if _, err := secrets.Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tamper("run-a", func(d map[string][]byte) {
		d[RecordKey] = []byte(strings.Replace(string(d[RecordKey]), `"acme"`, `"mallory"`, 1))
	})
	tamper("run-b", func(d map[string][]byte) { delete(d, MACKey) })

	list, bad, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != "run-c" {
		t.Errorf("List returned %v; want run-c only", list)
	}
	if len(bad) != 2 || !errors.Is(bad[0].Err, runstore.ErrForged) || !errors.Is(bad[1].Err, runstore.ErrForged) {
		t.Errorf("List: unreadable %v; want run-a and run-b refused with ErrForged", bad)
	}
	for _, id := range []string{"run-a", "run-b"} {
		if _, err := s.Get(ctx, id); !errors.Is(err, runstore.ErrForged) {
			t.Errorf("Get(%s) = %v; want ErrForged", id, err)
		}
	}
	if r, err := s.Get(ctx, "run-c"); err != nil || r.Tenant != "acme" {
		t.Errorf("Get(run-c) = %v, %v", r, err)
	}
}
