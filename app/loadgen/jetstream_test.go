package loadgen

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mmmq/mmmq/plugins/jetstream/jstest"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// startNATS runs an embedded single-node JetStream server on a random
// port, storing in t.TempDir, shut down at the end of the test.
func startNATS(t *testing.T) *server.Server {
	t.Helper()
	return jstest.Start(t, "", nil)
}

// runJS parses args after -mode jetstream and runs them.
func runJS(t *testing.T, args ...string) (*benchResult, error) {
	t.Helper()
	var stdout, stderr strings.Builder
	all := append([]string{"-mode", "jetstream", "-progress=false", "-idle-timeout", "20s"}, args...)
	cfg, code, ok := parseArgs(all, &stdout, &stderr)
	if !ok {
		t.Fatalf("parseArgs(%q): exit %d, %s", all, code, stderr.String())
	}
	return runJetStream(context.Background(), cfg)
}

// streamMsgs returns the messages stored in stream name and the data of
// the first.
func streamMsgs(t *testing.T, s *server.Server, name string) (uint64, jetstream.StreamConfig, []byte) {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetMsg(ctx, 1)
	if err != nil {
		t.Fatalf("stream %s: first message: %v", name, err)
	}
	return info.State.Msgs, info.Config, m.Data
}

// A count run creates the stream (file storage, the replicas asked for)
// and stores exactly -count messages, each the message JSON of -mode
// publish; every publish is acknowledged and measured.
func TestJetStreamModeCountRun(t *testing.T) {
	s := startNATS(t)
	res, err := runJS(t, "-addr", s.ClientURL(), "-js-replicas", "1", "-c", "3", "-count", "60",
		"-size", "120", "-topic-prefix", "b", "-run-id", "r1")
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if res.Messages != 60 || res.Requests != 60 || res.Errors != 0 || res.P50Ms <= 0 || res.MaxMs < res.P50Ms {
		t.Fatalf("result %+v: want 60 messages and requests, no error, latencies", res)
	}
	if res.Stream != "b_r1" || res.Replicas != 1 || res.Mode != "jetstream" {
		t.Fatalf("result %+v: want stream b_r1, 1 replica, mode jetstream", res)
	}
	n, cfg, data := streamMsgs(t, s, "b_r1")
	if n != 60 || cfg.Storage != jetstream.FileStorage || cfg.Replicas != 1 || len(cfg.Subjects) != 1 || cfg.Subjects[0] != "b.r1.>" {
		t.Fatalf("stream holds %d messages, config %+v; want 60, file storage, 1 replica, subjects b.r1.>", n, cfg)
	}
	if want := string(benchBody("b.r1.0", benchContent(120), 1, false)); string(data) != want {
		t.Fatalf("stored %q, want the message JSON %q", data, want)
	}
}

// A short timed run publishes something, into a new stream per run; a
// second run into an existing stream of the same setup adds to it.
func TestJetStreamModeDurationRun(t *testing.T) {
	s := startNATS(t)
	res, err := runJS(t, "-addr", s.ClientURL(), "-js-replicas", "1", "-c", "2", "-duration", "300ms", "-warmup", "100ms",
		"-js-stream", "S1")
	if err != nil || res.Messages == 0 || res.MsgsPerSec <= 0 {
		t.Fatalf("run: %+v, %v; want messages published", res, err)
	}
	before, _, _ := streamMsgs(t, s, "S1")
	res2, err := runJS(t, "-addr", s.ClientURL(), "-js-replicas", "1", "-c", "1", "-count", "5", "-js-stream", "S1",
		"-topic-prefix", "x", "-idle-timeout", "500ms")
	if err == nil || res2.Messages != 0 {
		// S1's subjects are those of the first run's topics: the publishes
		// of another run's topics are not taken.
		t.Fatalf("second run to another subject: %+v, %v; want no message acknowledged", res2, err)
	}
	after, _, _ := streamMsgs(t, s, "S1")
	if after != before {
		t.Fatalf("stream S1 went from %d to %d messages; want no change", before, after)
	}
}

// An existing stream of another setup (3 replicas asked, 1 there), or 3
// replicas on a single server, is refused before anything is published.
func TestJetStreamModeRefusesOtherSetups(t *testing.T) {
	s := startNATS(t)
	if _, err := runJS(t, "-addr", s.ClientURL(), "-js-replicas", "1", "-count", "1", "-js-stream", "S2"); err != nil {
		t.Fatal(err)
	}
	_, err := runJS(t, "-addr", s.ClientURL(), "-js-replicas", "3", "-count", "1", "-js-stream", "S2")
	if err == nil || !strings.Contains(err.Error(), "1 replicas") {
		t.Fatalf("existing R1 stream with -js-replicas 3: %v; want a refusal naming its replicas", err)
	}
	_, err = runJS(t, "-addr", s.ClientURL(), "-count", "1", "-js-stream", "S3")
	if err == nil || !strings.Contains(err.Error(), "create stream S3") {
		t.Fatalf("3 replicas on one server: %v; want the creation's failure", err)
	}
}

func TestJetStreamModeUsage(t *testing.T) {
	for _, args := range [][]string{
		{"-mode", "jetstream", "-depth", "2"},                            // synchronous
		{"-mode", "jetstream", "-batch", "10"},                           // one per publish
		{"-mode", "jetstream", "-ack", "accepted"},                       // the PubAck only
		{"-mode", "jetstream", "-js-replicas", "0"},                      // 1..5
		{"-mode", "jetstream", "-js-replicas", "6"},                      // 1..5
		{"-mode", "jetstream", "-js-stream", "a.b"},                      // no dots in a stream name
		{"-mode", "jetstream", "-addr", "127.0.0.1:4222"},                // a URL
		{"-mode", "jetstream", "-addr", "http://127.0.0.1:4222"},         // nats:// or tls://
		{"-mode", "jetstream", "-addr", "nats://127.0.0.1:4222,nats://"}, // every one with host and port
		{"-mode", "jetstream", "-server-pid", "1"},                       // which of the servers?
		{"-js-stream", "S"},                                              // jetstream only
		{"-mode", "line", "-js-replicas", "1"},                           // jetstream only
	} {
		var stdout, stderr strings.Builder
		if _, code, ok := parseArgs(args, &stdout, &stderr); ok || code != 2 || stderr.Len() == 0 {
			t.Errorf("parseArgs(%q): exit %d ok=%v, stderr %q; want a usage error", args, code, ok, stderr.String())
		}
	}
	var stdout, stderr strings.Builder
	cfg, _, ok := parseArgs([]string{"-mode", "jetstream", "-run-id", "r9"}, &stdout, &stderr)
	if !ok || cfg.addr != defaultNATSAddr || cfg.jsReplicas != 3 || jsStreamName(cfg) != "mmmq-bench_r9" {
		t.Errorf("-mode jetstream: addr %q, replicas %d, stream %q; want the defaults", cfg.addr, cfg.jsReplicas, jsStreamName(cfg))
	}
	if n := notice(cfg); !strings.Contains(n, "mmmq-bench_r9") || !strings.Contains(n, defaultNATSAddr) {
		t.Errorf("notice %q: want the stream and the servers", n)
	}
}
