package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/httpapi/client"
)

// validatingDoer is the generated client's HTTP transport in these tests:
// it validates every request the client builds and every answer the
// broker sends (status, headers, body) against the OpenAPI document, and
// fails the call, with the reason, when either does not match. So the
// typed client and the strict schema agree on every exchange.
type validatingDoer struct {
	router routers.Router
	http   *http.Client
	calls  atomic.Int64
}

func (d *validatingDoer) Do(req *http.Request) (*http.Response, error) {
	d.calls.Add(1)
	name := req.Method + " " + req.URL.RequestURI()
	var body []byte
	if req.Body != nil {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	// The validator reads the body it is given: a copy of the request.
	check := req.Clone(req.Context())
	check.Body = io.NopCloser(bytes.NewReader(body))
	route, params, err := d.router.FindRoute(check)
	if err != nil {
		return nil, fmt.Errorf("%s: no operation of %s matches: %w", name, openAPIFile, err)
	}
	in := &openapi3filter.RequestValidationInput{Request: check, PathParams: params, Route: route, Options: validation}
	if err := openapi3filter.ValidateRequest(req.Context(), in); err != nil {
		return nil, fmt.Errorf("%s: the generated client sent a request %s refuses: %w", name, openAPIFile, err)
	}
	resp, err := d.http.Do(req)
	if err != nil {
		return nil, err
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(got))
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header, Options: validation}
	out.SetBodyBytes(got)
	if err := openapi3filter.ValidateResponse(req.Context(), out); err != nil {
		return nil, fmt.Errorf("%s: answer %d does not match %s: %w: %s", name, resp.StatusCode, openAPIFile, err, got)
	}
	return resp, nil
}

// newGeneratedClient returns the generated client of the broker at base,
// its exchanges validated by a validatingDoer.
func newGeneratedClient(t *testing.T, base string) (*client.ClientWithResponses, *validatingDoer) {
	t.Helper()
	router, err := gorillamux.NewRouter(loadOpenAPI(t))
	require.NoError(t, err)
	d := &validatingDoer{router: router, http: rawClient(t)}
	c, err := client.NewClientWithResponses(base, client.WithHTTPClient(d))
	require.NoError(t, err)
	return c, d
}

// status requires the reply's status to be want, naming the operation and
// the body otherwise.
func status(t *testing.T, want int, r interface{ StatusCode() int }, body []byte, op string) {
	t.Helper()
	require.Equal(t, want, r.StatusCode(), "%s: %s", op, body)
}

// TestGeneratedClient drives a running broker through the Go client that
// oapi-codegen generates from the OpenAPI document (modules/httpapi/client):
// publish (both topic forms, an id, a key, headers, a duplicate), batch,
// read back, an exclusive group's fetch and ack, a shared group's fetch,
// ack and nack into its dead letters and their redrive, and a dispatcher's
// create, pause, seek, resume and the redrive of its dead letters, plus
// errors decoded into their documented types. Every call checks the typed
// answer; every request and answer is also validated against the document
// (validatingDoer), so any mismatch between document and server fails.
func TestGeneratedClient(t *testing.T) {
	// The consumer NACKs a message whose content has "fail": true (with no
	// resends, dead-lettered at once) and ACKs every other.
	var pushes atomic.Int64
	cons := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m struct {
			Content any `json:"content"`
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &m); err != nil {
			t.Errorf("consumer got non-JSON body %q", b)
		}
		pushes.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if c, ok := m.Content.(map[string]any); ok && c["fail"] == true {
			io.WriteString(w, `{"acknowledgement":"NACK"}`)
			return
		}
		io.WriteString(w, `{"acknowledgement":"ACK"}`)
	}))
	defer cons.Close()

	cfg := testConfig(t, t.TempDir())
	config.EditSection(cfg, dispatcher.ConfigSection, func(d *dispatcher.Config) { d.MaxResends = 0 })
	config.EditSection(cfg, groups.ConfigSection, func(g *groups.Config) { g.MaxDeliveries = 1 })
	a, base := startBroker(t, cfg)
	defer a.RequireStop()
	c, doer := newGeneratedClient(t, base)
	ctx := context.Background()
	const topic = "order.created"

	// Publish: the topic as a name, then in the object form with an id, a
	// key and headers; the same id again is a duplicate.
	var name client.PublishRequest_Topic
	require.NoError(t, name.FromTopicName(topic))
	pub, err := c.PublishWithResponse(ctx, nil, client.PublishJSONRequestBody{Topic: name, Content: map[string]any{"orderId": 42}})
	require.NoError(t, err)
	status(t, 200, pub, pub.Body, "publish")
	require.NotNil(t, pub.JSON200)
	assert.Equal(t, client.ACK, pub.JSON200.Acknowledgement)
	assert.Equal(t, client.AckLevelDURABLE, pub.JSON200.Level)
	require.NotNil(t, pub.JSON200.Offset)
	assert.Equal(t, int64(0), *pub.JSON200.Offset)
	assert.NotEmpty(t, pub.JSON200.Id)

	var obj client.PublishRequest_Topic
	require.NoError(t, obj.FromPublishRequestTopic1(client.PublishRequestTopic1{Name: topic}))
	id, key, headers := "evt-1", client.MessageKey("customer-7"), map[string]string{"k": "v"}
	full := client.PublishJSONRequestBody{Topic: obj, Content: map[string]any{"orderId": 43}, Id: &id, Key: &key, Headers: &headers}
	ack := client.PublishParamsAckWritten
	first, err := c.PublishWithResponse(ctx, &client.PublishParams{Ack: &ack}, full)
	require.NoError(t, err)
	status(t, 200, first, first.Body, "publish with id")
	assert.Equal(t, client.AckLevelWRITTEN, first.JSON200.Level)
	assert.Nil(t, first.JSON200.Duplicate)
	dup, err := c.PublishMmmqPathWithResponse(ctx, nil, full)
	require.NoError(t, err)
	status(t, 200, dup, dup.Body, "duplicate publish")
	require.NotNil(t, dup.JSON200.Duplicate)
	assert.Equal(t, first.JSON200.Offset, dup.JSON200.Offset)

	// Batch: three members, one of them to fail at the dispatcher below.
	batch := make(client.PublishBatchJSONRequestBody, 0, 3)
	for _, content := range []any{"two", 3.5, map[string]any{"fail": true}} {
		batch = append(batch, client.PublishRequest{Topic: name, Content: content})
	}
	br, err := c.PublishBatchWithResponse(ctx, nil, batch)
	require.NoError(t, err)
	status(t, 200, br, br.Body, "batch")
	require.Len(t, br.JSON200.Results, 3)
	assert.Equal(t, 3, br.JSON200.Count)
	assert.Equal(t, 0, br.JSON200.Failed)
	for i, res := range br.JSON200.Results {
		require.NotNil(t, res.Offset, "result %d", i)
		assert.Equal(t, int64(2+i), *res.Offset, "result %d", i)
	}
	// A bad batch (a ttl under 1ms, which the document's pattern lets
	// through) is the documented 400 with each member's error.
	zero := client.MessageTTL("0s")
	bad, err := c.PublishBatchWithResponse(ctx, nil, client.PublishBatchJSONRequestBody{{Topic: name, Content: 1}, {Topic: name, Content: 2, Ttl: &zero}})
	require.NoError(t, err)
	status(t, 400, bad, bad.Body, "bad batch")
	require.NotNil(t, bad.JSON400)
	failed, err := bad.JSON400.AsBatchResponse()
	require.NoError(t, err)
	require.Len(t, failed.Results, 2)
	require.NotNil(t, failed.Results[0].Error)
	assert.Contains(t, *failed.Results[0].Error, "not stored")
	require.NotNil(t, failed.Results[1].Status)
	assert.Equal(t, 400, *failed.Results[1].Status)
	require.NotNil(t, failed.Results[1].Error)
	assert.Contains(t, *failed.Results[1].Error, "ttl")
	assert.Equal(t, 1, failed.Failed)

	// Read back: five messages, the second with its id, key and headers.
	limit := 10
	page, err := c.ReadTopicWithResponse(ctx, topic, &client.ReadTopicParams{Limit: &limit})
	require.NoError(t, err)
	status(t, 200, page, page.Body, "read back")
	require.Len(t, page.JSON200.Messages, 5)
	assert.Equal(t, int64(5), page.JSON200.NextOffset)
	assert.Equal(t, int64(5), page.JSON200.HighWatermark)
	second := storedObject(t, page.JSON200.Messages[1].Message)
	assert.Equal(t, map[string]any{"orderId": 43.0}, second.Content)
	assert.Equal(t, &id, second.Id)
	assert.Equal(t, "customer-7", *second.Key)
	assert.Equal(t, &headers, second.Headers)
	require.NotNil(t, second.IdFromProducer)
	assert.Equal(t, 3.5, storedObject(t, page.JSON200.Messages[3].Message).Content)
	missing, err := c.ReadTopicWithResponse(ctx, "no.such.topic", nil)
	require.NoError(t, err)
	status(t, 404, missing, missing.Body, "read unknown topic")
	assert.Equal(t, client.ErrorCode("NOT_FOUND"), missing.JSON404.Code)

	// An exclusive group: fetch everything, ack through the last offset.
	maxN := 10
	f, err := c.GroupFetchWithResponse(ctx, topic, "audit", &client.GroupFetchParams{Max: &maxN})
	require.NoError(t, err)
	status(t, 200, f, f.Body, "group fetch")
	require.Len(t, f.JSON200.Messages, 5)
	assert.Equal(t, "audit", f.JSON200.Group)
	session := f.JSON200.Session
	var through client.AckRequest
	require.NoError(t, through.FromAckRequest0(client.AckRequest0{Offset: 4}))
	acked, err := c.GroupAckWithResponse(ctx, topic, "audit", &client.GroupAckParams{MmmqSession: session}, through)
	require.NoError(t, err)
	status(t, 200, acked, acked.Body, "group ack")
	assert.Equal(t, int64(5), acked.JSON200.Committed)

	// A shared group: ack one offset, nack another (max-deliveries 1: it
	// goes to dead-letter.workers), then redrive it into the topic.
	shared := client.GroupFetchParamsModeShared
	sf, err := c.GroupFetchWithResponse(ctx, topic, "workers", &client.GroupFetchParams{Mode: &shared, Max: &maxN})
	require.NoError(t, err)
	status(t, 200, sf, sf.Body, "shared fetch")
	require.Len(t, sf.JSON200.Messages, 5)
	require.NotNil(t, sf.JSON200.Mode)
	assert.Equal(t, client.GroupMode("shared"), *sf.JSON200.Mode)
	for _, m := range sf.JSON200.Messages {
		require.NotNil(t, m.Deliveries)
		assert.Equal(t, int64(1), *m.Deliveries)
	}
	var some client.AckRequest
	require.NoError(t, some.FromAckRequest1(client.AckRequest1{Offsets: client.OffsetList{0, 1, 2, 3}}))
	sa, err := c.GroupAckWithResponse(ctx, topic, "workers", &client.GroupAckParams{MmmqSession: sf.JSON200.Session}, some)
	require.NoError(t, err)
	status(t, 200, sa, sa.Body, "shared ack")
	require.NotNil(t, sa.JSON200.Acked)
	assert.Equal(t, 4, *sa.JSON200.Acked)
	nk, err := c.GroupNackWithResponse(ctx, topic, "workers", &client.GroupNackParams{MmmqSession: sf.JSON200.Session}, client.GroupNackJSONRequestBody{Offsets: client.OffsetList{4}})
	require.NoError(t, err)
	status(t, 200, nk, nk.Body, "shared nack")
	// The next fetch writes the dead letter (the nacked message was handed
	// out max-deliveries times) and hands out nothing.
	noWait := int64(0)
	again, err := c.GroupFetchWithResponse(ctx, topic, "workers", &client.GroupFetchParams{Max: &maxN, Wait: &noWait, MmmqSession: &sf.JSON200.Session})
	require.NoError(t, err)
	status(t, 200, again, again.Body, "shared fetch again")
	assert.Empty(t, again.JSON200.Messages)
	assert.Equal(t, int64(5), again.JSON200.Committed)
	gr, err := c.GroupRedriveWithResponse(ctx, topic, "workers", client.GroupRedriveJSONRequestBody{})
	require.NoError(t, err)
	status(t, 200, gr, gr.Body, "group redrive")
	require.Len(t, gr.JSON200.Redriven, 1, "%s", gr.Body)
	assert.Equal(t, int64(5), gr.JSON200.Redriven[0].Offset)

	// A dispatcher of the topic: it delivers the six messages, the two
	// that fail dead-lettered.
	signingKeys := []string{"whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk="}
	created, err := c.CreateDispatcherWithResponse(ctx, client.CreateDispatcherJSONRequestBody{Name: "billing", Host: cons.URL, Patterns: []client.TopicPattern{"order.**"},
		SigningKeys: &signingKeys})
	require.NoError(t, err)
	status(t, 201, created, created.Body, "create dispatcher")
	keys, err := c.WebhookKeysWithResponse(ctx)
	require.NoError(t, err)
	status(t, 200, keys, keys.Body, "webhook keys")
	require.Len(t, keys.JSON200.Keys, 1, "%s", keys.Body)
	assert.Equal(t, client.WebhookPublicKey{Dispatcher: "billing", Kid: "808d1060236c20d2", Alg: client.Ed25519, Key: "whpk_ZlN4eg7dSSqi0moX9hQUk3orrOouK3QVQSlJa248c/g="}, keys.JSON200.Keys[0])
	assert.Equal(t, "billing", created.JSON201.Name)
	assert.Equal(t, client.DispatcherFieldsSource("api"), created.JSON201.Source)
	taken, err := c.CreateDispatcherWithResponse(ctx, client.CreateDispatcherJSONRequestBody{Name: "billing", Host: cons.URL, Patterns: []client.TopicPattern{"x"}})
	require.NoError(t, err)
	status(t, 409, taken, taken.Body, "create dispatcher again")
	assert.Equal(t, client.ErrorCode("NAME_TAKEN"), taken.JSON409.Code)
	var st *client.DispatcherStatus
	require.Eventually(t, func() bool {
		got, err := c.GetDispatcherWithResponse(ctx, "billing")
		if err != nil || got.JSON200 == nil {
			t.Errorf("get dispatcher: %v %s", err, got.Body)
			return true
		}
		st = got.JSON200
		return len(st.Topics) == 1 && st.Topics[0].Committed == 6
	}, 20*time.Second, 10*time.Millisecond)
	require.Len(t, st.Topics, 1)
	assert.Equal(t, int64(6), st.Topics[0].Committed)
	assert.Equal(t, int64(2), st.Topics[0].DeadLettered)
	assert.Equal(t, "dead-letter.billing", st.DeadLetterTopic)

	// Pause, seek back to the start, resume: delivered again.
	paused, err := c.PauseDispatcherWithResponse(ctx, "billing")
	require.NoError(t, err)
	status(t, 200, paused, paused.Body, "pause")
	require.NotNil(t, paused.JSON200.Paused)
	var earliest client.SeekTarget
	require.NoError(t, earliest.FromSeekTarget0(client.SeekTarget0Earliest))
	sought, err := c.SeekDispatcherWithResponse(ctx, "billing", client.SeekDispatcherJSONRequestBody{To: earliest})
	require.NoError(t, err)
	status(t, 200, sought, sought.Body, "seek")
	require.Len(t, sought.JSON200.Topics, 1)
	assert.Equal(t, int64(6), sought.JSON200.Topics[0].Previous)
	assert.Equal(t, int64(0), sought.JSON200.Topics[0].Offset)
	before := pushes.Load()
	resumed, err := c.ResumeDispatcherWithResponse(ctx, "billing")
	require.NoError(t, err)
	status(t, 200, resumed, resumed.Body, "resume")
	assert.Nil(t, resumed.JSON200.Paused)
	require.Eventually(t, func() bool { return pushes.Load() >= before+6 }, 20*time.Second, 10*time.Millisecond)

	// Redrive the first two dead letters: back in the topic at new offsets.
	from, to := int64(0), int64(2)
	rd, err := c.RedriveDispatcherWithResponse(ctx, "billing", client.RedriveDispatcherJSONRequestBody{From: &from, To: &to})
	require.NoError(t, err)
	status(t, 200, rd, rd.Body, "redrive")
	require.Len(t, rd.JSON200.Redriven, 2, "%s", rd.Body)
	assert.Equal(t, "dead-letter.billing", rd.JSON200.DeadLetterTopic)
	for i, r := range rd.JSON200.Redriven {
		assert.Equal(t, int64(i), r.DeadLetterOffset)
		assert.Equal(t, topic, r.Topic)
		assert.GreaterOrEqual(t, r.Offset, int64(6))
	}
	nope, err := c.PauseDispatcherWithResponse(ctx, "nope")
	require.NoError(t, err)
	status(t, 404, nope, nope.Body, "pause unknown")
	assert.Equal(t, client.ErrorCode("NOT_FOUND"), nope.JSON404.Code)

	// The doer saw every call, so every one was validated.
	assert.GreaterOrEqual(t, doer.calls.Load(), int64(20))
}

// mustTopic is a publish request's topic as a name.
func mustTopic(t *testing.T, name string) client.PublishRequest_Topic {
	t.Helper()
	var tp client.PublishRequest_Topic
	require.NoError(t, tp.FromTopicName(name))
	return tp
}

// storedObject is a read-back entry's message as the broker stores it (a
// JSON object).
func storedObject(t *testing.T, m *client.StoredMessage) client.StoredMessageObject {
	t.Helper()
	require.NotNil(t, m)
	o, err := m.AsStoredMessageObject()
	require.NoError(t, err)
	return o
}

// TestGeneratedClientFailsOnMismatch: a broker answer that breaks the
// document (here a publish answer without its offset type, served by a
// fake broker) makes the generated client's call fail through the
// validating transport, and so does a request the document refuses.
func TestGeneratedClientFailsOnMismatch(t *testing.T) {
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"acknowledgement":"ACK","topic":"t","offset":"zero","id":"x","level":"DURABLE"}`)
	}))
	defer fake.Close()
	c, _ := newGeneratedClient(t, fake.URL)
	ctx := context.Background()
	_, err := c.PublishWithResponse(ctx, nil, client.PublishJSONRequestBody{Topic: mustTopic(t, "t"), Content: 1})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "does not match")
	_, err = c.PublishWithResponse(ctx, nil, client.PublishJSONRequestBody{Topic: mustTopic(t, "a..b"), Content: 1})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "refuses")
}
