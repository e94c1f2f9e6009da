package httpapi

import (
	_ "embed"
	"net/http"
)

// OpenAPIPath is where the API's OpenAPI 3.1 document is served, without
// authentication: it describes the API and holds no secret, so a client
// generator can fetch it with no token. The checks every route shares
// (foreign origins, the loopback Host check) still apply.
const OpenAPIPath = "/v1/openapi.json"

// openAPI is the hand-written OpenAPI 3.1 document of every route New
// serves. The package's tests keep it true: every route registered in
// this package is in it and every operation in it is served, and every
// request and response the tests exchange validates against it.
//
//go:embed openapi.json
var openAPI []byte

func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write(openAPI)
}
