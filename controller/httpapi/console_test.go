package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"berth.dev/berth/controller/httpapi"
)

// TestConsoleOrigin: the console page is served without a token, and the
// API accepts browser requests from berth's own origin only.
func TestConsoleOrigin(t *testing.T) {
	rg := newRig(t, httpapi.Options{Token: token}, false)
	tests := []struct {
		name, origin string
		want         int
	}{
		{"same origin", rg.srv.URL, 200},
		{"same origin, other case", strings.ToUpper(rg.srv.URL), 200},
		{"foreign origin", "https://evil.example", 403},
		{"same host, other scheme", strings.Replace(rg.srv.URL, "http://", "https://", 1), 403},
		{"same host, other port", rg.srv.URL + "1", 403},
		{"opaque origin", "null", 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rg.do("GET", "/v1/runs", token, "", "Origin", tt.origin)
			if r.status != tt.want {
				t.Fatalf("Origin %s: %d %s, want %d", tt.origin, r.status, r.body, tt.want)
			}
			if tt.want == 403 && r.errorCode(t) != "forbidden_origin" {
				t.Errorf("Origin %s: %s", tt.origin, r.body)
			}
		})
	}
	if r := rg.do("GET", "/v1/runs", "", "", "Origin", rg.srv.URL); r.status != 401 {
		t.Errorf("same origin without a token: %d %s", r.status, r.body)
	}

	pages := []struct{ path, ctype, contains string }{
		{"/console/", "text/html", `src="console.js"`},
		{"/console/console.js", "javascript", "/v1/runs"},
		{"/console/console.css", "text/css", ".card"},
	}
	for _, p := range pages {
		r := rg.do("GET", p.path, "", "")
		if r.status != 200 || !strings.Contains(r.header.Get("Content-Type"), p.ctype) || !strings.Contains(string(r.body), p.contains) {
			t.Errorf("GET %s: %d %s", p.path, r.status, r.header.Get("Content-Type"))
		}
		if csp := r.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("GET %s: CSP %q", p.path, csp)
		}
		if strings.Contains(string(r.body), "https://") || strings.Contains(string(r.body), "http://") {
			t.Errorf("GET %s: the console must not load anything from elsewhere", p.path)
		}
	}
	req, _ := http.NewRequest("GET", rg.srv.URL+"/", nil)
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/console/" {
		t.Errorf("GET /: %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}
