package agent

import (
	"reflect"
	"testing"
	"time"
)

func TestParseRun(t *testing.T) {
	o, rest, err := parseRun([]string{"--wait-delay=3s", "--direct-stdout", "--user=65534:65534:100,200", "--nproc=64", "--cgroup=/sys/fs/cgroup/a", "--cgroup=/sys/fs/cgroup/pids/b", "--", "sh"})
	if err != nil {
		t.Fatal(err)
	}
	if o.delay != 3*time.Second || !o.direct || o.nproc != 64 || !reflect.DeepEqual(rest, []string{"--", "sh"}) {
		t.Fatalf("parseRun = %+v %q", o, rest)
	}
	if !reflect.DeepEqual(o.cgroups, []string{"/sys/fs/cgroup/a", "/sys/fs/cgroup/pids/b"}) {
		t.Fatalf("cgroups = %q", o.cgroups)
	}
	if c := o.cred; c == nil || c.Uid != 65534 || c.Gid != 65534 || !reflect.DeepEqual(c.Groups, []uint32{100, 200}) {
		t.Fatalf("cred = %+v", o.cred)
	}
	// No groups given: the child gets none (not the agent's).
	o, _, err = parseRun([]string{"--user=1000:1000:", "--"})
	if err != nil || o.cred == nil || o.cred.Groups == nil || len(o.cred.Groups) != 0 {
		t.Fatalf("--user without groups: %+v %v", o.cred, err)
	}
	for _, bad := range []string{"--user=1000", "--user=a:b", "--user=1:2:x", "--nproc=0", "--nproc=-1", "--wait-delay=0s", "--cgroup=relative", "--other"} {
		if _, _, err := parseRun([]string{bad, "--", "sh"}); err == nil {
			t.Errorf("parseRun(%q) accepted it", bad)
		}
	}
}

func TestIsFileServer(t *testing.T) {
	tests := []struct {
		args []string
		want bool
	}{
		{[]string{"/.berth/shim-1/berth-shim", "fs", "/work"}, true},
		{[]string{"/.berth/shim-1/berth-shim", "fs", "--user=1:1", "/work"}, true},
		{[]string{"/.berth/shim-1/berth-shim", "fs", "/work/sub"}, false},
		{[]string{"/.berth/shim-1/berth-shim", "run", "--", "/work"}, false},
		{[]string{"sleep", "100"}, false},
		{[]string{""}, false},
	}
	for _, tt := range tests {
		if got := isFileServer(tt.args, "/work"); got != tt.want {
			t.Errorf("isFileServer(%q) = %v, want %v", tt.args, got, tt.want)
		}
	}
}
