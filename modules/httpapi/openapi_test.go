package httpapi

import (
	"bytes"
	"net/http"
	"strconv"
	"testing"

	"github.com/mmmq/mmmq/modules/contract"
)

// TestOpenAPIServed: GET /openapi.yaml serves the embedded document as
// application/yaml; other methods are 405 with Allow: GET, HEAD. (HEAD is
// in TestHeadWhereGet; app/openapi_test.go checks what the document says.)
func TestOpenAPIServed(t *testing.T) {
	e := startMethods(t)
	st, body, h := e.do(t, http.MethodGet, "/openapi.yaml", "")
	if st != http.StatusOK {
		t.Fatalf("GET /openapi.yaml: %d %s", st, body)
	}
	if ct := h.Get("Content-Type"); ct != OpenAPIContentType {
		t.Errorf("Content-Type %q, want %q", ct, OpenAPIContentType)
	}
	if cl := h.Get("Content-Length"); cl != strconv.Itoa(len(body)) {
		t.Errorf("Content-Length %q, body %d bytes", cl, len(body))
	}
	if !bytes.Equal([]byte(body), OpenAPI()) {
		t.Error("GET /openapi.yaml does not serve the embedded document")
	}
	if !bytes.HasPrefix(OpenAPI(), []byte("# ")) || !bytes.Contains(OpenAPI(), []byte("\nopenapi: 3.1.0\n")) {
		t.Error("openapi.yaml does not declare openapi: 3.1.0")
	}
	// OpenAPI returns a copy: changing it changes nothing served.
	doc := OpenAPI()
	doc[0] = 'X'
	if _, again, _ := e.do(t, http.MethodGet, "/openapi.yaml", ""); again != body {
		t.Error("changing OpenAPI's result changed the served document")
	}

	st, body, h = e.do(t, http.MethodPut, "/openapi.yaml", "x")
	if st != http.StatusMethodNotAllowed || h.Get("Allow") != "GET, HEAD" {
		t.Fatalf("PUT /openapi.yaml: %d Allow %q %s", st, h.Get("Allow"), body)
	}
	if eb := errorBody(t, h, body); eb.Code != contract.CodeMethod {
		t.Errorf("code %q, want %s", eb.Code, contract.CodeMethod)
	}
}
