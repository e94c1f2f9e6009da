package kubeauth_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"berth.dev/berth/controller/httpapi"
	"berth.dev/berth/kubeauth"
)

func TestParseMappings(t *testing.T) {
	got, err := kubeauth.ParseMappings(strings.NewReader(`
# harnesses
agents/harness team-a harness
agents/console * operator
monitoring/prometheus * metrics
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []kubeauth.Mapping{
		{Namespace: "agents", ServiceAccount: "harness", Tenant: "team-a", Scopes: []httpapi.Scope{httpapi.ScopeHarness}},
		{Namespace: "agents", ServiceAccount: "console", Tenant: "*", Scopes: []httpapi.Scope{httpapi.ScopeOperator}},
		{Namespace: "monitoring", ServiceAccount: "prometheus", Tenant: "*", Scopes: []httpapi.Scope{httpapi.ScopeMetrics}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseMappings = %+v\nwant %+v", got, want)
	}
	if u := got[0].Username(); u != "system:serviceaccount:agents:harness" {
		t.Errorf("Username = %q", u)
	}
	for _, bad := range []struct{ file, want string }{
		{"", "maps no service account"},
		{"agents/harness team-a", "want 3"},
		{"harness team-a harness", "NAMESPACE/SERVICEACCOUNT"},
		{"Agents/harness team-a harness", "not a namespace name"},
		{"agents/Harness team-a harness", "not a service account name"},
		{"agents/harness team-a root", "unknown scope"},
		{"agents/harness * harness", "a harness opens runs"},
		{"agents/h a harness\nagents/h b harness", "line 1 already"},
	} {
		if _, err := kubeauth.ParseMappings(strings.NewReader(bad.file)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ParseMappings(%q) = %v; want an error containing %q", bad.file, err, bad.want)
		}
	}
}

// TestUnreachableAPIServer: a token berth cannot have reviewed is not a
// refusal (the caller gets 503 and retries), and is not cached; a token
// that is no JWT is refused without asking.
func TestUnreachableAPIServer(t *testing.T) {
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1", TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := kubeauth.New(cs, []kubeauth.Mapping{{Namespace: "a", ServiceAccount: "b", Tenant: "t", Scopes: []httpapi.Scope{httpapi.ScopeHarness}}}, kubeauth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = r.Authenticate(ctx, "aaa.bbb.ccc")
	if err == nil || errors.Is(err, httpapi.ErrUnauthenticated) || !strings.Contains(err.Error(), "TokenReview") {
		t.Errorf("Authenticate with the API server down = %v; want an error that is not a refusal, naming the TokenReview", err)
	}
	if n := r.Cached(); n != 0 {
		t.Errorf("an unanswered review was cached (%d entries)", n)
	}
	if _, err := r.Authenticate(ctx, "static-token"); !errors.Is(err, httpapi.ErrUnauthenticated) || !strings.Contains(err.Error(), `audience "berth"`) {
		t.Errorf("Authenticate(a token that is no JWT) = %v; want a refusal naming the audience", err)
	}
}
