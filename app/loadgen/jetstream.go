package loadgen

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Mode "jetstream" is the raw peer of mmmq's jetstream backend: the same
// client loop publishes the same message JSON as -mode publish (the body of
// POST /messages) straight to a NATS JetStream stream, each producer on its
// own NATS connection (as each HTTP producer has its own keep-alive
// connection), one synchronous publish at a time: js.Publish waits for the
// PubAck, which JetStream sends once a majority of the stream's replicas
// stored the message (on disk or in the page cache, as the servers'
// sync_interval decides). That is the point mmmq's DURABLE answers at on
// that backend.

// defaultNATSAddr is -addr's default in -mode jetstream.
const defaultNATSAddr = "nats://127.0.0.1:4222"

// jsPublishTimeout bounds one publish (the wait for its PubAck), as
// mmmq.jetstream.request-timeout's default bounds the broker's.
const jsPublishTimeout = 5 * time.Second

// jsSetupTimeout bounds connecting and finding or creating the stream
// before the run (an R3 stream needs its replicas placed and a leader).
const jsSetupTimeout = 30 * time.Second

// isJS tells the jetstream mode.
func isJS(mode string) bool { return mode == "jetstream" }

// validateJS checks the flags of -mode jetstream and sets its default
// -addr: comma-separated nats:// (or tls://) URLs with a port, -js-replicas
// 1..5, a -js-stream name JetStream accepts; no pipelining, no batches, no
// ack level but the PubAck.
func (c *benchConfig) validateJS() error {
	switch {
	case c.depth != 1:
		return fmt.Errorf("-depth %d: -mode jetstream publishes synchronously, one publish outstanding per connection", c.depth)
	case c.batch != 0:
		return fmt.Errorf("-batch %d: -mode jetstream publishes one message per publish", c.batch)
	case !strings.EqualFold(c.ack, "durable"):
		return fmt.Errorf("-ack %q: -mode jetstream waits for JetStream's PubAck, what mmmq's durable waits for (leave -ack at durable)", c.ack)
	case c.jsReplicas < 1 || c.jsReplicas > 5:
		return fmt.Errorf("-js-replicas %d: want 1..5", c.jsReplicas)
	case c.jsStream != "" && (len(c.jsStream) > 255 || strings.ContainsAny(c.jsStream, " \t\r\n.*>/\\")):
		return fmt.Errorf("-js-stream %q: a stream name has at most 255 characters, none of whitespace . * > / \\", c.jsStream)
	}
	if c.addr == "" {
		c.addr = defaultNATSAddr
	}
	for _, s := range strings.Split(c.addr, ",") {
		u, err := url.Parse(strings.TrimSpace(s))
		if err != nil || (u.Scheme != "nats" && u.Scheme != "tls") || u.Hostname() == "" || u.Port() == "" {
			return fmt.Errorf("-addr %q: want comma-separated nats://host:port (or tls://host:port) URLs", c.addr)
		}
	}
	return nil
}

// jsStreamName is the stream a run publishes to: -js-stream, else one per
// run named after its topics ("<topic-prefix>_<run-id>", dots as '_').
func jsStreamName(cfg benchConfig) string {
	if cfg.jsStream != "" {
		return cfg.jsStream
	}
	return strings.ReplaceAll(cfg.topicPrefix, ".", "_") + "_" + cfg.runID
}

// jsSubjects is the subject filter of a stream the run creates: every
// topic of the run (<topic-prefix>.<run-id>.<n>).
func jsSubjects(cfg benchConfig) string { return cfg.topicPrefix + "." + cfg.runID + ".>" }

// jsConnect opens one NATS connection to -addr (the client picks a server
// and fails over to the others), authenticated with -token when given.
func jsConnect(cfg benchConfig) (*nats.Conn, error) {
	opts := []nats.Option{nats.Name("mmmq bench"), nats.Timeout(5 * time.Second)}
	if cfg.token != "" {
		opts = append(opts, nats.Token(cfg.token))
	}
	nc, err := nats.Connect(cfg.addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", cfg.addr, err)
	}
	return nc, nil
}

// ensureStream finds the run's stream or creates it (file storage,
// -js-replicas copies, no limits). An existing stream must have file
// storage and -js-replicas replicas, so that a row never measures another
// setup under this one's name.
func ensureStream(ctx context.Context, cfg benchConfig) error {
	ctx, cancel := context.WithTimeout(ctx, jsSetupTimeout)
	defer cancel()
	nc, err := jsConnect(cfg)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	name := jsStreamName(cfg)
	s, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name: name, Description: "mmmq bench -mode jetstream", Subjects: []string{jsSubjects(cfg)},
			Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage, Replicas: cfg.jsReplicas,
			MaxMsgs: -1, MaxBytes: -1,
		})
		if err != nil {
			return fmt.Errorf("create stream %s (%d replicas, file storage): %w", name, cfg.jsReplicas, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("stream %s: %w", name, err)
	}
	if c := s.CachedInfo().Config; c.Storage != jetstream.FileStorage || c.Replicas != cfg.jsReplicas {
		return fmt.Errorf("stream %s exists with %s storage and %d replicas; -js-replicas %d and file storage are asked for: pick another -js-stream",
			name, c.Storage, c.Replicas, cfg.jsReplicas)
	}
	return nil
}

// runJetStream creates the stream when missing, then runs the producers.
func runJetStream(ctx context.Context, cfg benchConfig) (*benchResult, error) {
	res := newResult(cfg, cfg.addr)
	res.Stream, res.Replicas = jsStreamName(cfg), cfg.jsReplicas
	if err := ensureStream(ctx, cfg); err != nil {
		return nil, err
	}
	g := &loadGen{cfg: cfg, content: benchContent(cfg.size), js: true}
	g.run(ctx, res)
	if res.Messages == 0 {
		return res, fmt.Errorf("no message acknowledged; first error: %s", res.FirstError)
	}
	return res, nil
}

// jsProducer publishes on its own NATS connection, one message at a time,
// until the count is used up, the deadline passes or ctx is done. A
// connection that cannot be opened is tried again after 10 ms (until
// -idle-timeout without an acknowledged publish); once open, the NATS
// client reconnects by itself and the publishes meanwhile fail and are
// counted.
func (g *loadGen) jsProducer(ctx context.Context, id int, deadline time.Time, st *producerStats) {
	var nc *nats.Conn
	for nc == nil {
		if ctx.Err() != nil || g.nothingLeft(deadline) {
			return
		}
		var err error
		if nc, err = jsConnect(g.cfg); err != nil {
			g.failed(st, 1, err.Error())
			if g.idleTooLong() {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		g.failed(st, 1, err.Error())
		return
	}
	g.jsPublish(ctx, js, id%g.cfg.topics, deadline, st)
}

// jsPublish is jsProducer's loop: publish, wait for the PubAck, count.
func (g *loadGen) jsPublish(ctx context.Context, js jetstream.JetStream, topic int, deadline time.Time, st *producerStats) {
	subject := benchTopic(g.cfg, topic)
	data := benchBody(subject, g.content, 1, false)
	stream := jetstream.WithExpectStream(jsStreamName(g.cfg))
	for ctx.Err() == nil && g.take(1, deadline) == 1 {
		pctx, cancel := context.WithTimeout(ctx, jsPublishTimeout)
		start := time.Now()
		_, err := js.Publish(pctx, subject, data, stream)
		lat := time.Since(start)
		cancel()
		if err == nil {
			g.acked(st, 1, lat)
			continue
		}
		if ctx.Err() != nil {
			return
		}
		g.failed(st, 1, err.Error())
		if jsRefused(err) {
			g.noteErr("the stream refused the publish itself: stopping this producer")
			return
		}
		if g.idleTooLong() {
			return
		}
		if g.cfg.count > 0 {
			g.remaining.Add(1) // publish it again
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// jsRefused tells an error that the same publish would get again: a
// JetStream API error of the 4xx kind but 408 and 429 (wrong stream, a
// message over the stream's limits), or a message over max_payload.
func jsRefused(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Code >= 400 && apiErr.Code < 500 && apiErr.Code != http.StatusRequestTimeout && apiErr.Code != http.StatusTooManyRequests
	}
	return errors.Is(err, nats.ErrMaxPayload)
}
