package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// api is a Server over a registry of its own, called through its handler
// (no listener).
type api struct {
	t    *testing.T
	root string
	reg  *topicqueue.Registry
	s    *Server
}

// newAPI builds a server with opts over a registry with ropts; an empty
// ropts.Root is a new temp dir, and the registry's logger is the test's.
func newAPI(t *testing.T, opts Options, ropts topicqueue.Options) *api {
	t.Helper()
	log := zaptest.NewLogger(t)
	if ropts.Root == "" {
		ropts.Root = t.TempDir()
	}
	if ropts.Storage.Logger == nil {
		ropts.Storage.Logger = log
	}
	reg := topicqueue.New(ropts)
	t.Cleanup(func() {
		if err := reg.Close(); err != nil {
			t.Error(err)
		}
	})
	return &api{t: t, root: ropts.Root, reg: reg, s: New(opts, reg, nil, log)}
}

// call sends method target with body through the handler, with
// Content-Type ct when not empty.
func (a *api) call(method, target, ct, body string) *httptest.ResponseRecorder {
	a.t.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	rec := httptest.NewRecorder()
	a.s.Handler().ServeHTTP(rec, req)
	return rec
}

// publish stores payload (stored message JSON or not) in topic at Durable.
func (a *api) publish(topic string, payload string) {
	a.t.Helper()
	q, err := a.reg.GetOrCreate(topic)
	if err != nil {
		a.t.Fatal(err)
	}
	if _, err := q.Log().Append(context.Background(), []byte(payload), contract.Durable); err != nil {
		a.t.Fatal(err)
	}
}

// noTopics fails the test unless no topic is open and nothing was created
// under the data root.
func (a *api) noTopics() {
	a.t.Helper()
	if l := a.reg.List(); len(l) != 0 {
		a.t.Errorf("%d topics open, want none (first %s)", len(l), l[0].Name())
	}
	ents, err := os.ReadDir(a.root)
	if err != nil && !os.IsNotExist(err) {
		a.t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() != ".lock" {
			a.t.Errorf("%s created under the data root", e.Name())
		}
	}
}

// decodeJSON decodes rec's body into v, failing unless it is JSON with
// Content-Type application/json.
func decodeJSON(t *testing.T, rec *httptest.ResponseRecorder, v any) {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, want application/json (HTTP %d %q)", ct, rec.Code, rec.Body)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
		t.Fatalf("body %.300q is not JSON: %v", rec.Body, err)
	}
}

// wantNACK fails the test unless rec is status with the broker's JSON error
// body of code whose error contains each of texts.
func wantNACK(t *testing.T, rec *httptest.ResponseRecorder, status int, code string, texts ...string) {
	t.Helper()
	var eb contract.ErrorBody
	decodeJSON(t, rec, &eb)
	if rec.Code != status || eb.Acknowledgement != "NACK" || eb.Code != code || eb.Error == "" {
		t.Fatalf("HTTP %d %s, want %d NACK %s", rec.Code, rec.Body, status, code)
	}
	for _, s := range texts {
		if !strings.Contains(eb.Error, s) {
			t.Errorf("error %q does not say %q", eb.Error, s)
		}
	}
}

// failingBody is a request body that returns some bytes, then err.
type failingBody struct {
	data string
	err  error
}

func (b *failingBody) Read(p []byte) (int, error) {
	if b.data == "" {
		return 0, b.err
	}
	n := copy(p, b.data)
	b.data = b.data[n:]
	return n, nil
}

func (b *failingBody) Close() error { return nil }

var _ io.ReadCloser = (*failingBody)(nil)
