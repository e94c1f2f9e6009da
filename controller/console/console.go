// Package console is berth's operator console: a small web page, embedded
// in the binary (no external URLs), that lists the open runs with their
// placement, shows the selected run's live resources (language servers,
// kernels, debug session, workers) and its pending cards, and answers them.
//
// The page is static: it asks for the bearer token (kept in the tab's
// sessionStorage) and calls the /v1 API with fetch, following the run's
// event stream with a streaming fetch so it can send the Authorization
// header (EventSource cannot). While the page follows a run, the run counts
// as having someone to ask, as with any event-stream client.
//
// [Handler] serves the assets; controller/httpapi mounts it at /console/.
package console

import (
	"embed"
	"io/fs"
	"net/http"
)

// Path is where the console is mounted; "/" redirects to it.
const Path = "/console/"

//go:embed assets
var assets embed.FS

// securityHeaders keep the page to its own origin: no inline or foreign
// scripts, no framing (the page approves tool calls, so it must not be
// clickjacked), no referrer.
var securityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
	"X-Frame-Options":         "DENY",
	"X-Content-Type-Options":  "nosniff",
	"Referrer-Policy":         "no-referrer",
	"Cache-Control":           "no-cache",
}

// Handler serves the console's assets under [Path]. It needs no token: the
// assets hold no data; every call the page makes is authenticated.
func Handler() http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded directory is fixed at build time
	}
	files := http.StripPrefix(Path, http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range securityHeaders {
			w.Header().Set(k, v)
		}
		files.ServeHTTP(w, r)
	})
}
