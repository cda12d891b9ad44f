package app_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"go.uber.org/fx"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/tracing"
)

// otlpReceiver is an OTLP trace receiver run by the test: it keeps every
// span it is sent, over gRPC or HTTP (protobuf), with its service name.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []receivedSpan
}

type receivedSpan struct {
	service string
	span    *tracepb.Span
}

func (r *otlpReceiver) take(req *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, receivedSpan{service, s})
			}
		}
	}
}

// inTrace returns the spans of trace id tid (hex) received so far.
func (r *otlpReceiver) inTrace(tid string) []receivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []receivedSpan
	for _, s := range r.spans {
		if fmt.Sprintf("%x", s.span.GetTraceId()) == tid {
			out = append(out, s)
		}
	}
	return out
}

// serveHTTP answers OTLP/HTTP export requests (POST /v1/traces).
func (r *otlpReceiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	var m coltracepb.ExportTraceServiceRequest
	if req.URL.Path != "/v1/traces" || proto.Unmarshal(b, &m) != nil {
		http.Error(w, "bad export request", http.StatusBadRequest)
		return
	}
	r.take(&m)
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

type grpcTraceService struct {
	coltracepb.UnimplementedTraceServiceServer
	r *otlpReceiver
}

func (g grpcTraceService) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	g.r.take(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// startHTTPReceiver runs an OTLP/HTTP receiver; its URL is returned.
func startHTTPReceiver(t *testing.T, r *otlpReceiver) string {
	srv := httptest.NewServer(http.HandlerFunc(r.serveHTTP))
	t.Cleanup(srv.Close)
	return srv.URL
}

// startGRPCReceiver runs an OTLP/gRPC receiver; its host:port is returned.
func startGRPCReceiver(t *testing.T, r *otlpReceiver) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(s, grpcTraceService{r: r})
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	return ln.Addr().String()
}

// tracedConsumer is a push consumer that is itself traced: for every push
// it starts a span of its own ("consume") as the child of the push's
// traceparent header and exports it over OTLP/HTTP to receiverURL.
func tracedConsumer(t *testing.T, receiverURL string) (*httptest.Server, *sdktrace.TracerProvider) {
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(receiverURL+"/v1/traces"))
	require.NoError(t, err)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	prop := propagation.TraceContext{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		_, span := tp.Tracer("consumer").Start(ctx, "consume")
		io.Copy(io.Discard, r.Body)
		span.End()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"acknowledgement":"ACK"}`)
	}))
	t.Cleanup(srv.Close)
	return srv, tp
}

// With OTLP on (gRPC and HTTP), a publish carrying the producer's
// traceparent, its push, and the consumer's own span make one trace, in
// parent order: producer → publish → push → consume, as the receiver got
// them; the stored message keeps the producer's traceparent.
func TestTracingOneTraceThroughTheBroker(t *testing.T) {
	const producer = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, exporter := range []string{tracing.ExporterOTLPGRPC, tracing.ExporterOTLPHTTP} {
		t.Run(exporter, func(t *testing.T) {
			rcv := &otlpReceiver{}
			httpURL := startHTTPReceiver(t, rcv)
			// Given as http:// URLs without insecure: the scheme decides
			// (plain text), for gRPC too.
			endpoint := httpURL
			if exporter == tracing.ExporterOTLPGRPC {
				endpoint = "http://" + startGRPCReceiver(t, rcv)
			}
			cons, _ := tracedConsumer(t, httpURL)
			h, err := dispatcher.ParseHost(cons.URL)
			require.NoError(t, err)
			cfg := testConfig(t, t.TempDir())
			config.SetSectionValue(cfg, tracing.ConfigSection, tracing.Config{Exporter: exporter, Endpoint: endpoint,
				SamplingRatio: 1, ServiceName: "mmmq-test", QueueSize: 2048})
			a, base := startBroker(t, cfg, provideDispatcher(dispatcher.New("traced", h, dispatcher.MustPattern("tt.**"))))
			defer a.RequireStop()
			c := newAPIClient(t, base)
			c.do(exchange{method: "POST", path: "/messages", header: map[string]string{"traceparent": producer},
				body: `{"topic":"tt.a","content":{"n":1}}`, status: 200})

			var spans []receivedSpan
			deadline := time.Now().Add(30 * time.Second)
			for {
				spans = rcv.inTrace("4bf92f3577b34da6a3ce929d0e0e4736")
				if len(spans) >= 3 || time.Now().After(deadline) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			byName := map[string]receivedSpan{}
			for _, s := range spans {
				byName[s.span.GetName()] = s
			}
			require.Len(t, spans, 3, "spans of the trace: %v", spans)
			pub, push, consume := byName["publish tt.a"], byName["push tt.a"], byName["consume"]
			require.NotNil(t, pub.span)
			require.NotNil(t, push.span)
			require.NotNil(t, consume.span)
			assert.Equal(t, "00f067aa0ba902b7", fmt.Sprintf("%x", pub.span.GetParentSpanId()), "publish is the producer's child")
			assert.Equal(t, pub.span.GetSpanId(), push.span.GetParentSpanId(), "push is the publish's child")
			assert.Equal(t, push.span.GetSpanId(), consume.span.GetParentSpanId(), "the consumer's span is the push's child")
			assert.Equal(t, "mmmq-test", pub.service)
			assert.Equal(t, "mmmq-test", push.service)
			attrs := map[string]string{}
			for _, kv := range append(pub.span.GetAttributes(), push.span.GetAttributes()...) {
				attrs[kv.GetKey()] = kv.GetValue().String()
			}
			assert.Contains(t, attrs[tracing.AttrAckLevel], "DURABLE")
			assert.Contains(t, attrs[tracing.AttrOutcome], "ACK")
			assert.Contains(t, attrs[tracing.AttrStatus], "200")

			// The stored message keeps the producer's traceparent.
			ans := c.do(exchange{method: "GET", path: "/topics/tt.a/messages?offset=0&limit=1", status: 200})
			assert.Contains(t, string(ans.body), producer)
		})
	}
}

var spansRe = regexp.MustCompile(`(?m)^mmmq_tracing_spans_total\{outcome="(exported|dropped|failed)"\} (\d+)$`)

// A collector that is down holds nothing up: every publish is answered and
// every message pushed, and the spans are counted as failed or dropped
// (none exported) by the time the broker has stopped.
func TestTracingCollectorDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	down := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now

	cons := newConsumer(t)
	h, err := dispatcher.ParseHost(cons.srv.URL)
	require.NoError(t, err)
	cfg := testConfig(t, t.TempDir())
	config.SetSectionValue(cfg, tracing.ConfigSection, tracing.Config{Exporter: tracing.ExporterOTLPHTTP, Endpoint: down,
		SamplingRatio: 1, ServiceName: "mmmq", QueueSize: 8})
	var tr *tracing.Tracer
	a, base := startBroker(t, cfg, fx.Populate(&tr), provideDispatcher(dispatcher.New("d", h, dispatcher.MustPattern("down.**"))))
	require.NotNil(t, tr)
	const n = 30
	for i := range n {
		code, out := publish(t, base, "down.t", i)
		require.Equal(t, 200, code, "%v", out)
	}
	cons.waitFor(t, n)
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	got := map[string]int{}
	for _, m := range spansRe.FindAllStringSubmatch(string(b), -1) {
		got[m[1]], _ = strconv.Atoi(m[2])
	}
	require.Len(t, got, 3, "mmmq_tracing_spans_total series:\n%s", grepLines(string(b), "mmmq_tracing"))
	assert.Zero(t, got["exported"])
	a.RequireStop()
	st := tr.Stats()
	assert.Zero(t, st.Exported)
	assert.GreaterOrEqual(t, st.Dropped, uint64(2*n-8-8), "a queue of 8 cannot hold %d spans: %+v", 2*n, st)
	assert.Equal(t, uint64(2*n), st.Dropped+st.Failed, "every publish and push span counted: %+v", st)
}

func grepLines(s, sub string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
