package httpapi_test

import (
	"strings"
	"testing"

	"berth.dev/berth/controller"
	"berth.dev/berth/tools/permission"
)

// TestVibePlatformRunner: a run opened with vibe gets the vibe_* tools;
// a spawn is published on the event stream, the platform reports the
// result over the API, and vibe_wait returns it. A run without vibe has no
// vibe tools.
func TestVibePlatformRunner(t *testing.T) {
	rg := newAskRig(t, controller.Config{Mode: permission.ModeLocal, Tools: []controller.Binder{controller.FileTools, controller.VibeTools(controller.VibeConfig{})}})
	plain := rg.openHost()
	if r := rg.do("GET", "/v1/runs/"+plain+"/tools", token, ""); strings.Contains(string(r.body), "vibe_spawn") {
		t.Fatalf("a run without vibe lists vibe tools: %s", r.body)
	}
	id := rg.open(`{"sandbox":"host","workspace":"` + rg.dir + `","vibe":true}`)
	if r := rg.do("GET", "/v1/runs/"+id+"/tools", token, ""); !strings.Contains(string(r.body), "vibe_spawn") {
		t.Fatalf("a vibe run lacks vibe_spawn: %s", r.body)
	}
	ev := rg.subscribe(id, "")
	spawn := wait(t, rg.call(id, "vibe_spawn", `{"brief":"count the Go files","label":"counter"}`))
	if spawn.status != 200 || spawn.isError {
		t.Fatalf("spawn: %+v", spawn)
	}
	e := ev.next("vibe.spawn")
	wid, _ := e.data["worker_id"].(string)
	if wid == "" {
		t.Fatalf("spawn event without worker_id: %v", e.data)
	}
	if r := rg.do("GET", "/v1/runs/"+id+"/resources", token, ""); r.status != 200 || !strings.Contains(string(r.body), `"kind":"worker"`) || !strings.Contains(string(r.body), "counter") {
		t.Fatalf("resources: %d %s", r.status, r.body)
	}
	list := wait(t, rg.call(id, "vibe_list", `{}`))
	if !strings.Contains(list.text, "running") {
		t.Fatalf("list: %s", list.text)
	}
	waiting := rg.call(id, "vibe_wait", `{"worker_id":"`+wid+`","timeout_seconds":60}`)
	if r := rg.do("POST", "/v1/runs/"+id+"/workers/"+wid, token, `{"status":"done","result":"42 Go files"}`); r.status != 200 {
		t.Fatalf("report: %d %s", r.status, r.body)
	}
	if got := wait(t, waiting); got.isError || !strings.Contains(got.text, "42 Go files") {
		t.Fatalf("wait: %+v", got)
	}
	if r := rg.do("POST", "/v1/runs/"+id+"/workers/nope", token, `{"status":"done"}`); r.status != 404 {
		t.Fatalf("report for an unknown worker: %d %s", r.status, r.body)
	}
	if r := rg.do("GET", "/v1/runs/"+id+"/workers", token, ""); r.status != 200 || !strings.Contains(string(r.body), "counter") {
		t.Fatalf("workers: %d %s", r.status, r.body)
	}
}
