package httpapi

import (
	"bytes"
	_ "embed"
	"net/http"
	"strconv"
)

// openAPIDocument is the OpenAPI 3.1 document of the HTTP API: every route
// of the default application, the server's own, the consumer groups' and
// the metrics plugin's. app/openapi_test.go fails when a route is missing
// from it or a documented path is not routed.
//
//go:embed openapi.yaml
var openAPIDocument []byte

// OpenAPIContentType is the Content-Type of GET /openapi.yaml (RFC 9512).
const OpenAPIContentType = "application/yaml"

// OpenAPI returns a copy of the OpenAPI 3.1 document (YAML) that
// GET /openapi.yaml serves.
func OpenAPI() []byte { return bytes.Clone(openAPIDocument) }

// handleOpenAPI serves GET /openapi.yaml (and HEAD, like every GET route).
func handleOpenAPI(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", OpenAPIContentType)
	h.Set("Content-Length", strconv.Itoa(len(openAPIDocument)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openAPIDocument)
}
