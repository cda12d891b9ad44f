// Package loadgen is the load tool behind `mmmq bench`. It drives a broker
// over HTTP with N keep-alive producers and prints msgs/s and per-request
// latency quantiles. Modes "line" and "redis" publish the same messages over
// one TCP connection per producer, with up to -depth requests outstanding on
// each: "line" with PUB of mmmq's line protocol, "redis" with XADD to a Redis
// server, so that both are measured by the same client code. Mode
// "jetstream" publishes the same message JSON as the HTTP mode straight to a
// NATS JetStream stream, synchronously (the PubAck awaited), one NATS
// connection per producer: the raw peer of mmmq's jetstream backend. Mode "plain" drives a net/http handler that only
// answers (the HTTP ceiling, same tool, same run): in-process, or in its own
// process ("plain-server") like the broker, which is the like-for-like
// figure. Mode "deliver" runs a consumer that ACKs at once and measures
// end-to-end delivery. With -server-pid the tool also reports the server
// process's CPU time per message.
//
// Main is the whole command; the package has no other exported API.
package loadgen

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
)

// benchConfig holds the flags of mmmq bench.
type benchConfig struct {
	mode         string
	url          string
	producers    int
	size         int
	duration     time.Duration
	warmup       time.Duration
	count        int64
	ack          string
	topics       int
	topicPrefix  string
	runID        string // second segment of every topic name; generated when -run-id is not given
	batch        int
	consumerAddr string
	noPublish    bool
	idleTimeout  time.Duration
	jsonOut      bool
	progress     bool
	listen       string
	dir          string // disk modes: the directory (filesystem) measured
	serverPID    int
	urlSet       bool   // -url given explicitly (plain: drive that server; line: read the broker's fsync count there)
	addr         string // line, redis: TCP address
	depth        int    // line, redis: requests outstanding per connection
	token        string // line, redis: sent with AUTH first; jetstream: the NATS token
	jsStream     string // jetstream: the stream ("" = one per run)
	jsReplicas   int    // jetstream: replicas of a stream the run creates
}

// benchResult is what one run measured; -json prints it as one line.
// Latencies are per request (HTTP request, or PUB / XADD from its write
// to its reply), in milliseconds.
type benchResult struct {
	Mode      string `json:"mode"`
	URL       string `json:"url"`
	Producers int    `json:"producers"`
	Size      int    `json:"size"`
	Ack       string `json:"ack,omitempty"`
	Topics    int    `json:"topics"`
	Batch     int    `json:"batch,omitempty"`
	// Depth is the pipelining depth of the line and redis modes: requests
	// outstanding per connection (a sliding window).
	Depth int `json:"depth,omitempty"`
	// Stream and Replicas are the JetStream stream of the jetstream mode
	// and its replica count.
	Stream   string  `json:"stream,omitempty"`
	Replicas int     `json:"replicas,omitempty"`
	Seconds  float64 `json:"seconds"`
	Requests int64   `json:"requests"`
	Messages int64   `json:"messages"`
	Errors   int64   `json:"errors"`
	// MsgsPerSec is published msgs/s (publish, plain) or delivered msgs/s
	// from first to last arrival (deliver).
	MsgsPerSec float64 `json:"msgsPerSec"`
	P50Ms      float64 `json:"p50Ms"`
	P99Ms      float64 `json:"p99Ms"`
	P999Ms     float64 `json:"p999Ms"`
	MaxMs      float64 `json:"maxMs"`
	// FsyncsPerMsg is the broker's fsync count delta over the run divided
	// by the messages published; absent when the broker does not expose
	// fsyncs (GET /topics field "fsyncs", else a /metrics counter).
	FsyncsPerMsg *float64 `json:"fsyncsPerMsg,omitempty"`
	FsyncSource  string   `json:"fsyncSource,omitempty"`
	// ServerCPUUsPerMsg is the user+system CPU time of -server-pid over
	// the measured window divided by the messages acknowledged in it, in
	// microseconds (Linux /proc; absent without -server-pid). Less noisy
	// than msgs/s on a shared machine.
	ServerCPUUsPerMsg *float64 `json:"serverCpuUsPerMsg,omitempty"`
	// ServerReadCallsPerMsg and ServerWriteCallsPerMsg are the read-like
	// and write-like system calls of -server-pid over the measured window
	// (/proc/<pid>/io syscr and syscw: read, readv, pread…; write,
	// writev, pwrite…, every thread) divided by the messages acknowledged
	// in it (Linux; absent without -server-pid). A server that answers one
	// request per connection at a time needs one of each per message; a
	// read that finds nothing (EAGAIN) counts too.
	ServerReadCallsPerMsg  *float64 `json:"serverReadCallsPerMsg,omitempty"`
	ServerWriteCallsPerMsg *float64 `json:"serverWriteCallsPerMsg,omitempty"`
	// Deliver mode.
	PublishMsgsPerSec float64 `json:"publishMsgsPerSec,omitempty"`
	Delivered         int64   `json:"delivered,omitempty"`
	Duplicates        int64   `json:"duplicates,omitempty"`
	OrderViolations   int64   `json:"orderViolations,omitempty"`
	DeliverSeconds    float64 `json:"deliverSeconds,omitempty"`
	FirstError        string  `json:"firstError,omitempty"`
}

// Main runs `mmmq bench` with args (the arguments after "bench") and
// returns the process exit code: 0 when the run succeeded (plain-server:
// when it stopped on SIGINT or SIGTERM) and for -h (the usage, on standard
// output), 1 when it failed, 2 for bad usage (an unknown or invalid flag, a
// stray argument). The publishing modes first say on standard error which
// topics they write to (see the usage). The result goes to standard output
// (text, or one JSON line with -json), also after a failed run that measured
// something; progress, warnings and the one-line failure reason
// ("mmmq bench: ...") go to standard error. SIGINT and SIGTERM end a run
// early.
func Main(args []string) int {
	cfg, code, ok := parseArgs(args, os.Stdout, os.Stderr)
	if !ok {
		return code
	}
	if n := notice(cfg); n != "" {
		fmt.Fprintln(os.Stderr, n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	var res *benchResult
	var err error
	switch cfg.mode {
	case "publish", "line", "redis":
		res, err = runPublish(ctx, cfg)
	case "jetstream":
		res, err = runJetStream(ctx, cfg)
	case "plain":
		res, err = runPlain(ctx, cfg)
	case "plain-server":
		err = servePlain(ctx, cfg.listen)
	case "deliver":
		res, err = runDeliver(ctx, cfg)
	case diskAppend, diskOverwrite:
		res, err = runDisk(ctx, cfg)
	}
	if res != nil {
		if cfg.jsonOut {
			b, _ := json.Marshal(res)
			fmt.Println(string(b))
		} else {
			printResult(os.Stdout, res)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mmmq bench:", err)
		return 1
	}
	return 0
}

// defaultTopicPrefix is the first segment of the topics mmmq bench writes
// to, so that they are easy to find and delete in a broker's data.
const defaultTopicPrefix = "mmmq-bench"

// parseArgs parses and validates the flags. -h prints the usage on stdout
// and returns (0, false); a bad flag or value prints why on stderr and
// returns (2, false).
func parseArgs(args []string, stdout, stderr io.Writer) (benchConfig, int, bool) {
	var cfg benchConfig
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	defineFlags(fs, &cfg)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: mmmq bench [-mode publish|line|redis|jetstream|plain|plain-server|deliver|disk-append|disk-overwrite] [flags]

  mmmq bench -url http://127.0.0.1:8080 -c 32 -duration 10s -ack durable
  mmmq bench -mode line -addr 127.0.0.1:7070 -c 32 -depth 16 -ack durable
  mmmq bench -mode redis -addr 127.0.0.1:6379 -c 32 -depth 16   # same client, XADD
  mmmq bench -mode jetstream -addr nats://127.0.0.1:4222,nats://127.0.0.1:4223 -c 32
                                                     # raw JetStream, same client and message
  mmmq bench -mode plain -c 32                       # HTTP ceiling, same tool, in-process
  mmmq bench -mode plain-server -listen 127.0.0.1:18090 &
  mmmq bench -mode plain -url http://127.0.0.1:18090 -c 32   # ceiling, separate process
  mmmq bench -c 4 -batch 1000 -count 1000000         # batch publish
  mmmq bench -mode disk-append -c 1 -dir ./data -duration 5s     # the disk alone: append + fsync
  mmmq bench -mode disk-overwrite -c 1 -dir ./data -duration 5s  # overwrite preallocated + fdatasync
  mmmq bench -mode deliver -count 100000 -consumer-addr 127.0.0.1:18081
      (the broker needs a dispatcher with host http://127.0.0.1:18081 and
       patterns ["mmmq-bench.**"])

Publishing modes write to the topics <topic-prefix>.<run-id>.<n> of the
broker (redis: the streams of those keys), warm-up messages included, and
say so on stderr; the messages stay in the broker's data.

line and redis keep -depth requests outstanding on each of the -c
connections: they write -depth requests, then one new request for every
reply read (a sliding window; replies come in order). An error reply
(ERR <CODE>, -ERR) counts as an error; one that refuses the request itself
(line: the codes of HTTP 4xx but 408 and 429; Redis: all but LOADING,
BUSY, MISCONF, OOM, TRYAGAIN, MASTERDOWN, CLUSTERDOWN) stops that
connection, others are retried after 10 ms. A reply that is not the one
expected (another ack level, no entry id) ends the connection and the run
reports it.

jetstream publishes the body of -mode publish (the message JSON) to the
subject <topic-prefix>.<run-id>.<n> of the stream -js-stream (created when
missing: file storage, -js-replicas copies), one NATS connection per
producer, one publish at a time (js.Publish waits for the PubAck: a
majority of the replicas stored it). A 4xx JetStream error (wrong stream,
over a limit) stops that producer; other failures (timeouts, no stream
leader yet) are counted and retried after 10 ms.

flags:
`)
		fs.PrintDefaults()
	}
	var buf strings.Builder
	fs.SetOutput(&buf)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		io.WriteString(stdout, buf.String())
		return cfg, 0, false
	case err != nil:
		io.WriteString(stderr, buf.String())
		return cfg, 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mmmq bench: unexpected argument %q\n", fs.Arg(0))
		return cfg, 2, false
	}
	cSet := false
	fs.Visit(func(f *flag.Flag) {
		cfg.urlSet = cfg.urlSet || f.Name == "url"
		cSet = cSet || f.Name == "c"
	})
	if isDisk(cfg.mode) && !cSet {
		cfg.producers = 1 // one writer: -c's default of 8 is the broker modes'
	}
	if err := cfg.validate(); err != nil {
		fmt.Fprintln(stderr, "mmmq bench:", err)
		return cfg, 2, false
	}
	return cfg, 0, true
}

// defineFlags declares the flags of mmmq bench on fs, into cfg.
func defineFlags(fs *flag.FlagSet, cfg *benchConfig) {
	fs.StringVar(&cfg.mode, "mode", "publish", "publish (HTTP POST /messages) | line (PUB over the line protocol at -addr) | redis (XADD to the Redis server at -addr) | jetstream (synchronous JetStream publish to the NATS servers at -addr) | plain (answer-only handler: the HTTP ceiling; in-process unless -url is given) | plain-server (serve that handler on -listen until stopped) | deliver (end-to-end to a local consumer) | disk-append (append -size bytes + fsync, one writer, in -dir: no broker, the filesystem's floor) | disk-overwrite (overwrite preallocated zeros + fdatasync, likewise)")
	fs.StringVar(&cfg.url, "url", "http://127.0.0.1:8080", "broker base URL (publish, deliver); plain: a plain-server's URL; line: read the broker's fsync count there (only when given)")
	fs.StringVar(&cfg.addr, "addr", "", "line, redis: TCP host:port of the broker's line protocol (mmmq.lineproto.addr; default 127.0.0.1:7070) or of the Redis server (default 127.0.0.1:6379); jetstream: comma-separated nats:// URLs of the NATS servers (default nats://127.0.0.1:4222)")
	fs.IntVar(&cfg.depth, "depth", 1, "line, redis: requests outstanding per connection, 1..4096 (a sliding window: a new request is written for every reply read)")
	fs.StringVar(&cfg.token, "token", "", "line, redis: send AUTH <token> first on every connection (line: a bearer token; Redis: the password); jetstream: the NATS token")
	fs.StringVar(&cfg.jsStream, "js-stream", "", "jetstream: the stream to publish to, created when missing with the subjects <topic-prefix>.<run-id>.> (default <topic-prefix>_<run-id>, dots as '_': a new stream per run); an existing one must have file storage and -js-replicas replicas")
	fs.IntVar(&cfg.jsReplicas, "js-replicas", 3, "jetstream: replicas of the stream, 1..5 (file storage; a PubAck means a majority of them stored the message)")
	fs.IntVar(&cfg.producers, "c", 8, "concurrent producers (one keep-alive connection each)")
	fs.IntVar(&cfg.size, "size", 200, "bytes of message content JSON")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "measured run time (ignored with -count)")
	fs.DurationVar(&cfg.warmup, "warmup", time.Second, "unmeasured time before -duration starts (ignored with -count)")
	fs.Int64Var(&cfg.count, "count", 0, "publish exactly this many messages instead of running for -duration; deliver: messages to publish and wait for")
	fs.StringVar(&cfg.ack, "ack", "durable", "ack level: accepted | written | durable (publish, deliver, line; Redis's durability is its appendfsync setting; jetstream: durable only, the PubAck)")
	fs.IntVar(&cfg.topics, "topics", 1, "spread messages over this many topics (<prefix>.<run-id>.0 .. <prefix>.<run-id>.K-1)")
	fs.StringVar(&cfg.topicPrefix, "topic-prefix", defaultTopicPrefix, "first segments of the topic names (the topics stay in the broker's data; redis: the stream keys)")
	fs.StringVar(&cfg.runID, "run-id", "", "segment after -topic-prefix in the topic names, [A-Za-z0-9_-]+ (default: UTC time and a random suffix, new for every run)")
	fs.IntVar(&cfg.batch, "batch", 0, "messages per request via POST /messages/batch (0 = single POST /messages; deliver defaults to 1000)")
	fs.StringVar(&cfg.consumerAddr, "consumer-addr", "127.0.0.1:18081", "deliver: listen address of the local consumer")
	fs.BoolVar(&cfg.noPublish, "no-publish", false, "deliver: publish nothing, wait for -count deliveries of stored messages (replay)")
	fs.DurationVar(&cfg.idleTimeout, "idle-timeout", 60*time.Second, "give up after this long without an acknowledged publish (deliver: without an arrival)")
	fs.BoolVar(&cfg.jsonOut, "json", false, "print one JSON result line instead of text")
	fs.BoolVar(&cfg.progress, "progress", true, "print progress to stderr every second")
	fs.StringVar(&cfg.listen, "listen", "127.0.0.1:18090", "plain-server: listen address")
	fs.StringVar(&cfg.dir, "dir", ".", "disk-append, disk-overwrite: a directory on the filesystem to measure (the broker's data directory's); a scratch file is written there and removed")
	fs.IntVar(&cfg.serverPID, "server-pid", 0, "publish, line, redis, plain -url: report this local server process's CPU time per message over the measured window (Linux)")
}

// notice is the stderr line that says which topics a publishing run writes
// to and that its warm-up messages are stored too; "" for the modes that
// publish nothing to a broker.
func notice(cfg benchConfig) string {
	if cfg.mode != "publish" && cfg.mode != "deliver" && !isWire(cfg.mode) && !isJS(cfg.mode) || cfg.noPublish {
		return ""
	}
	topics := benchTopic(cfg, 0)
	if cfg.topics > 1 {
		topics += " .. " + benchTopic(cfg, cfg.topics-1)
	}
	var n string
	switch cfg.mode {
	case "line":
		n = fmt.Sprintf("mmmq bench: publishing with the line protocol to %s on topic(s) %s; the messages stay in the broker's data", cfg.addr, topics)
	case "redis":
		n = fmt.Sprintf("mmmq bench: XADD to the Redis server at %s on stream(s) %s; the entries stay in its data", cfg.addr, topics)
	case "jetstream":
		n = fmt.Sprintf("mmmq bench: JetStream publish to %s on subject(s) %s of stream %s (created when missing, %d replicas, file storage); the messages stay in it",
			cfg.addr, topics, jsStreamName(cfg), cfg.jsReplicas)
	default:
		n = fmt.Sprintf("mmmq bench: publishing to %s on topic(s) %s; the messages stay in the broker's data", cfg.url, topics)
	}
	if cfg.mode != "deliver" && cfg.count == 0 && cfg.warmup > 0 {
		n += fmt.Sprintf(" (the warm-up messages of the first %v too, stored but not counted)", cfg.warmup)
	}
	return n
}

func (c *benchConfig) validate() error {
	switch c.mode {
	case "publish", "line", "redis", "jetstream", "plain", "plain-server", "deliver", diskAppend, diskOverwrite:
	default:
		return fmt.Errorf("-mode %q: want publish, line, redis, jetstream, plain, plain-server, deliver, disk-append or disk-overwrite", c.mode)
	}
	if err := c.validateDisk(); err != nil {
		return err
	}
	if c.serverPID < 0 {
		return fmt.Errorf("-server-pid %d: want a process id", c.serverPID)
	}
	if c.serverPID > 0 && !(c.mode == "publish" || isWire(c.mode) || c.mode == "plain" && c.urlSet) {
		return errors.New("-server-pid needs -mode publish, line or redis, or -mode plain with -url (a server in another process)")
	}
	if err := c.validateWire(); err != nil {
		return err
	}
	if c.mode == "plain-server" {
		if _, _, err := net.SplitHostPort(c.listen); err != nil {
			return fmt.Errorf("-listen %q: want host:port: %v", c.listen, err)
		}
		return nil // the load flags do not apply
	}
	if c.serverPID > 0 {
		if _, err := processCPU(c.serverPID); err != nil {
			return fmt.Errorf("-server-pid %d: %w", c.serverPID, err)
		}
	}
	switch strings.ToLower(c.ack) {
	case "accepted", "written", "durable":
		c.ack = strings.ToLower(c.ack)
	default:
		return fmt.Errorf("-ack %q: want accepted, written or durable", c.ack)
	}
	if c.producers < 1 {
		return fmt.Errorf("-c %d: want at least 1", c.producers)
	}
	if c.size < 0 || c.size > 1<<20 {
		return fmt.Errorf("-size %d: want 0..1048576", c.size)
	}
	if c.topics < 1 {
		return fmt.Errorf("-topics %d: want at least 1", c.topics)
	}
	if c.runID == "" {
		var r [2]byte
		_, _ = rand.Read(r[:])
		c.runID = time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(r[:])
	}
	for _, ch := range c.runID {
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '_' || ch == '-') {
			return fmt.Errorf("-run-id %q: want letters, digits, '_' and '-' only (one topic name segment)", c.runID)
		}
	}
	if err := contract.ValidateTopic(c.topicPrefix + "." + c.runID + ".0"); err != nil {
		return fmt.Errorf("-topic-prefix %q: the topic names would be invalid: %v", c.topicPrefix, err)
	}
	if c.batch < 0 {
		return fmt.Errorf("-batch %d: want 0 or more", c.batch)
	}
	if c.count < 0 {
		return fmt.Errorf("-count %d: want 0 or more", c.count)
	}
	if c.count == 0 && c.duration <= 0 {
		return errors.New("-duration must be > 0 without -count")
	}
	if c.mode == "deliver" {
		if c.count == 0 {
			return errors.New("-mode deliver needs -count")
		}
		if c.batch == 0 {
			c.batch = 1000
		}
	}
	c.url = strings.TrimRight(c.url, "/")
	return nil
}

// isWire tells the modes that publish over a TCP connection per producer.
func isWire(mode string) bool { return mode == "line" || mode == "redis" }

// validateWire checks -addr, -depth, -token, -batch and the -js flags
// against the mode, and sets the default -addr of line, redis and
// jetstream.
func (c *benchConfig) validateWire() error {
	if isJS(c.mode) {
		return c.validateJS()
	}
	if c.jsStream != "" || c.jsReplicas != 3 {
		return errors.New("-js-stream and -js-replicas are for -mode jetstream only")
	}
	if !isWire(c.mode) {
		if c.depth != 1 {
			return fmt.Errorf("-depth %d: pipelining is for -mode line and redis only", c.depth)
		}
		if c.addr != "" || c.token != "" {
			return errors.New("-addr and -token are for -mode line, redis and jetstream only")
		}
		return nil
	}
	if c.depth < 1 || c.depth > 4096 {
		return fmt.Errorf("-depth %d: want 1..4096", c.depth)
	}
	if c.batch != 0 {
		return fmt.Errorf("-batch %d: -mode %s publishes one message per request", c.batch, c.mode)
	}
	if strings.ContainsAny(c.token, "\r\n") {
		return errors.New("-token: no line ends")
	}
	if c.addr == "" {
		c.addr = map[string]string{"line": "127.0.0.1:7070", "redis": "127.0.0.1:6379"}[c.mode]
	}
	if _, _, err := net.SplitHostPort(c.addr); err != nil {
		return fmt.Errorf("-addr %q: want host:port: %v", c.addr, err)
	}
	return nil
}

// content returns a JSON object of exactly size bytes when size >= 8
// ({"p":"xxx..."}), else the smallest object {}.
func benchContent(size int) []byte {
	const frame = `{"p":""}`
	if size < len(frame) {
		return []byte(`{}`)
	}
	b := make([]byte, 0, size)
	b = append(b, `{"p":"`...)
	for i := 0; i < size-len(frame); i++ {
		b = append(b, "0123456789abcdefghijklmnopqrstuvwxyz"[i%36])
	}
	return append(b, `"}`...)
}

// benchBody returns the request body for n messages to topic: one publish
// object, or a JSON array of n of them for the batch endpoint.
func benchBody(topic string, content []byte, n int, batch bool) []byte {
	one := make([]byte, 0, len(content)+len(topic)+32)
	one = append(one, `{"topic":"`...)
	one = append(one, topic...)
	one = append(one, `","content":`...)
	one = append(one, content...)
	one = append(one, '}')
	if !batch {
		return one
	}
	b := make([]byte, 0, n*(len(one)+1)+2)
	b = append(b, '[')
	for i := 0; i < n; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, one...)
	}
	return append(b, ']')
}

func benchTopic(cfg benchConfig, i int) string {
	return cfg.topicPrefix + "." + cfg.runID + "." + strconv.Itoa(i%cfg.topics)
}

// loadGen is the producer side shared by every mode.
type loadGen struct {
	cfg      benchConfig
	codec    wireCodec // line, redis; nil for HTTP
	js       bool      // jetstream
	client   *http.Client
	endpoint string // full URL with path and query
	content  []byte
	bodies   []map[int][]byte // per topic: messages per request -> body

	remaining atomic.Int64 // count mode: messages not yet taken
	total     atomic.Int64 // messages acknowledged, warmup included (progress)
	measuring atomic.Bool

	lastOK atomic.Int64 // UnixNano of the last acknowledged request (or the start)

	mu       sync.Mutex
	firstErr string
}

// producerStats is one producer's measured share.
type producerStats struct {
	requests, messages, errors int64
	hist                       latencyHistogram
}

func newLoadGen(cfg benchConfig, baseURL string) *loadGen {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        cfg.producers,
		MaxIdleConnsPerHost: cfg.producers,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	path := "/messages"
	if cfg.batch > 0 {
		path = "/messages/batch"
	}
	g := &loadGen{
		cfg:      cfg,
		client:   &http.Client{Transport: tr, Timeout: 60 * time.Second},
		endpoint: baseURL + path + "?ack=" + cfg.ack,
		content:  benchContent(cfg.size),
		bodies:   make([]map[int][]byte, cfg.topics),
	}
	per := 1
	if cfg.batch > 0 {
		per = cfg.batch
	}
	for t := range g.bodies {
		g.bodies[t] = map[int][]byte{per: benchBody(benchTopic(cfg, t), g.content, per, cfg.batch > 0)}
	}
	return g
}

func (g *loadGen) body(topic, n int) []byte {
	if b, ok := g.bodies[topic][n]; ok {
		return b
	}
	// The last, partial batch of a count run; built once per producer.
	return benchBody(benchTopic(g.cfg, topic), g.content, n, true)
}

func (g *loadGen) noteErr(s string) {
	g.mu.Lock()
	if g.firstErr == "" {
		g.firstErr = s
	}
	g.mu.Unlock()
}

// take returns how many messages the next request carries, 0 when done.
// In count mode the count never goes below zero, so messages given back by
// a failed request (remaining.Add) can be taken again by the producer that
// retries them, even after other producers found nothing left.
func (g *loadGen) take(per int, deadline time.Time) int {
	if g.cfg.count > 0 {
		for {
			left := g.remaining.Load()
			if left <= 0 {
				return 0
			}
			n := min(int64(per), left)
			if g.remaining.CompareAndSwap(left, left-n) {
				return int(n)
			}
		}
	}
	if !time.Now().Before(deadline) {
		return 0
	}
	return per
}

// producer sends requests until the count is used up, the deadline passes
// or ctx is done.
func (g *loadGen) producer(ctx context.Context, id int, deadline time.Time, st *producerStats) {
	per := 1
	if g.cfg.batch > 0 {
		per = g.cfg.batch
	}
	topic := id % g.cfg.topics
	var resp bytes.Buffer
	want := []byte(`"acknowledgement":"ACK"`)
	for ctx.Err() == nil {
		n := g.take(per, deadline)
		if n == 0 {
			return
		}
		body := g.body(topic, n)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.endpoint, bytes.NewReader(body))
		if err != nil {
			g.noteErr(err.Error())
			return
		}
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		r, err := g.client.Do(req)
		ok := false
		if err == nil {
			resp.Reset()
			_, err = resp.ReadFrom(r.Body)
			r.Body.Close()
			switch {
			case err != nil:
			case r.StatusCode != http.StatusOK:
				err = fmt.Errorf("HTTP %d: %s", r.StatusCode, truncate(resp.Bytes(), 200))
			case !bytes.Contains(resp.Bytes()[:min(resp.Len(), 64)], want):
				err = fmt.Errorf("HTTP 200 without ACK: %s", truncate(resp.Bytes(), 200))
			default:
				ok = true
			}
		}
		lat := time.Since(start)
		if ok {
			g.acked(st, int64(n), lat)
			continue
		}
		if ctx.Err() != nil {
			return
		}
		g.failed(st, 1, err.Error())
		if r != nil && r.StatusCode >= 400 && r.StatusCode < 500 && r.StatusCode != http.StatusRequestTimeout && r.StatusCode != http.StatusTooManyRequests {
			// The broker refused the request itself: sending it again
			// would be refused again.
			g.noteErr(fmt.Sprintf("HTTP %d is not retried: stopping this producer", r.StatusCode))
			return
		}
		if g.idleTooLong() {
			return
		}
		if g.cfg.count > 0 {
			g.remaining.Add(int64(n)) // retry these messages
		}
		time.Sleep(10 * time.Millisecond) // no hot loop against a dead broker
	}
}

// acked counts a request of n messages acknowledged after lat.
func (g *loadGen) acked(st *producerStats, n int64, lat time.Duration) {
	g.total.Add(n)
	g.lastOK.Store(time.Now().UnixNano())
	if g.measuring.Load() {
		st.requests++
		st.messages += n
		st.hist.Record(lat)
	}
}

// failed notes msg (the run's first error) and counts n failed requests
// when measuring.
func (g *loadGen) failed(st *producerStats, n int64, msg string) {
	g.noteErr(msg)
	if g.measuring.Load() {
		st.errors += n
	}
}

// idleTooLong reports (and notes) that nothing was acknowledged for
// -idle-timeout: the producer gives up.
func (g *loadGen) idleTooLong() bool {
	if idle := time.Since(time.Unix(0, g.lastOK.Load())); idle > g.cfg.idleTimeout {
		g.noteErr(fmt.Sprintf("nothing acknowledged for %s (-idle-timeout): giving up", idle.Round(time.Second)))
		return true
	}
	return false
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// run drives the producers and fills res with throughput and latencies.
func (g *loadGen) run(ctx context.Context, res *benchResult) {
	cfg := g.cfg
	g.remaining.Store(cfg.count)
	var deadline time.Time
	start := time.Now()
	g.lastOK.Store(start.UnixNano())
	measureFrom := start
	if cfg.count == 0 {
		measureFrom = start.Add(cfg.warmup)
		deadline = measureFrom.Add(cfg.duration)
	}
	// The server's CPU time is read when measuring starts and at the end.
	var cpuStart atomic.Int64
	cpuStart.Store(-1)
	var io0 atomic.Pointer[[2]int64] // the server's syscr, syscw then
	beginMeasuring := func() {
		if cfg.serverPID > 0 {
			if d, err := processCPU(cfg.serverPID); err == nil {
				cpuStart.Store(int64(d))
			}
			if r, w, err := processIOCalls(cfg.serverPID); err == nil {
				io0.Store(&[2]int64{r, w})
			}
		}
		g.measuring.Store(true)
	}
	if !measureFrom.After(start) {
		beginMeasuring()
	} else {
		t := time.AfterFunc(cfg.warmup, beginMeasuring)
		defer t.Stop()
	}
	stopProgress := g.startProgress(start)
	stats := make([]producerStats, cfg.producers)
	var wg sync.WaitGroup
	for i := 0; i < cfg.producers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch {
			case g.js:
				g.jsProducer(ctx, i, deadline, &stats[i])
			case g.codec != nil:
				g.wireProducer(ctx, i, deadline, &stats[i])
			default:
				g.producer(ctx, i, deadline, &stats[i])
			}
		}()
	}
	wg.Wait()
	end := time.Now()
	if c0 := cpuStart.Load(); c0 >= 0 {
		var msgs int64
		for i := range stats {
			msgs += stats[i].messages
		}
		g.serverCPU(res, time.Duration(c0), msgs)
		if c := io0.Load(); c != nil && msgs > 0 {
			if r, w, err := processIOCalls(cfg.serverPID); err == nil {
				pr := math.Round(float64(r-c[0])/float64(msgs)*100) / 100
				pw := math.Round(float64(w-c[1])/float64(msgs)*100) / 100
				res.ServerReadCallsPerMsg, res.ServerWriteCallsPerMsg = &pr, &pw
			}
		}
	}
	stopProgress()
	if g.client != nil {
		g.client.CloseIdleConnections()
	}

	var h latencyHistogram
	for i := range stats {
		res.Requests += stats[i].requests
		res.Messages += stats[i].messages
		res.Errors += stats[i].errors
		h.Merge(&stats[i].hist)
	}
	res.Seconds = end.Sub(measureFrom).Seconds()
	if res.Seconds > 0 {
		res.MsgsPerSec = float64(res.Messages) / res.Seconds
	}
	res.P50Ms = ms(h.Quantile(0.50))
	res.P99Ms = ms(h.Quantile(0.99))
	res.P999Ms = ms(h.Quantile(0.999))
	res.MaxMs = ms(h.Max())
	res.FirstError = g.firstErr
}

// serverCPU sets res.ServerCPUUsPerMsg from the server's CPU time now,
// c0 when measuring started and the msgs acknowledged in between.
func (g *loadGen) serverCPU(res *benchResult, c0 time.Duration, msgs int64) {
	c1, err := processCPU(g.cfg.serverPID)
	if err != nil {
		g.noteErr("server CPU time: " + err.Error())
		return
	}
	if msgs == 0 {
		return
	}
	used := c1 - c0
	v := math.Round(float64(used)/1e3/float64(msgs)*10) / 10
	res.ServerCPUUsPerMsg = &v
	if used < 100*time.Millisecond {
		fmt.Fprintf(os.Stderr, "bench: server CPU time is counted in 10 ms ticks and only %v was used: the per-message figure is coarse (is -server-pid the server?)\n", used)
	}
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

// startProgress prints msgs/s to stderr every second until the returned
// function is called.
func (g *loadGen) startProgress(start time.Time) func() {
	if !g.cfg.progress {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		var last int64
		lastAt := start
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				n := g.total.Load()
				fmt.Fprintf(os.Stderr, "bench: %4.0fs %10.0f msgs/s now %10.0f msgs/s avg %12d msgs\n",
					now.Sub(start).Seconds(), float64(n-last)/now.Sub(lastAt).Seconds(),
					float64(n)/now.Sub(start).Seconds(), n)
				last, lastAt = n, now
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

func newResult(cfg benchConfig, url string) *benchResult {
	r := &benchResult{Mode: cfg.mode, URL: url, Producers: cfg.producers, Size: cfg.size,
		Topics: cfg.topics, Batch: cfg.batch}
	if cfg.mode != "plain" && cfg.mode != "redis" && !isJS(cfg.mode) {
		r.Ack = strings.ToUpper(cfg.ack)
	}
	if isWire(cfg.mode) {
		r.Depth = cfg.depth
	}
	return r
}

// runPublish runs the publishing modes: publish (HTTP), line and redis.
// The broker's fsync count is read before and after from -url (publish;
// line when -url is given).
func runPublish(ctx context.Context, cfg benchConfig) (*benchResult, error) {
	var g *loadGen
	var res *benchResult
	switch cfg.mode {
	case "line":
		g = &loadGen{cfg: cfg, codec: newLineCodec(cfg)}
		res = newResult(cfg, "tcp://"+cfg.addr)
	case "redis":
		g = &loadGen{cfg: cfg, codec: newRedisCodec(cfg)}
		res = newResult(cfg, "tcp://"+cfg.addr)
	default:
		g = newLoadGen(cfg, cfg.url)
		res = newResult(cfg, cfg.url)
	}
	var before int64
	var src string
	haveFsyncs := false
	if cfg.mode == "publish" || cfg.mode == "line" && cfg.urlSet {
		before, src, haveFsyncs = fetchFsyncs(cfg.url)
	}
	g.run(ctx, res)
	if haveFsyncs && res.Messages > 0 {
		if after, src2, ok := fetchFsyncs(cfg.url); ok && src2 == src {
			// Warmup messages are in the delta too; divide by all of them.
			v := float64(after-before) / float64(g.total.Load())
			res.FsyncsPerMsg, res.FsyncSource = &v, src
		}
	}
	if res.Messages == 0 {
		return res, fmt.Errorf("no message acknowledged; first error: %s", res.FirstError)
	}
	return res, nil
}

// plainHandler is the HTTP ceiling: read the body, answer like a broker.
func plainHandler(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(`{"acknowledgement":"ACK"}`))
}

// runPlain drives the plain handler: the server at -url when it was given
// (a plain-server process), else one served in this process.
func runPlain(ctx context.Context, cfg benchConfig) (*benchResult, error) {
	url := cfg.url
	if !cfg.urlSet {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("listen: %w", err)
		}
		srv := newPlainServer()
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		url = "http://" + ln.Addr().String()
	}
	res := newResult(cfg, url)
	g := newLoadGen(cfg, url)
	g.run(ctx, res)
	if res.Messages == 0 {
		return res, fmt.Errorf("no message acknowledged; first error: %s", res.FirstError)
	}
	return res, nil
}

func newPlainServer() *http.Server {
	return &http.Server{Handler: http.HandlerFunc(plainHandler), ReadHeaderTimeout: 5 * time.Second}
}

// servePlain serves the plain handler on addr until ctx ends (SIGINT,
// SIGTERM), so the HTTP ceiling can be measured against a separate process,
// as the broker is.
func servePlain(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("-listen %s: %w", addr, err)
	}
	srv := newPlainServer()
	fmt.Fprintf(os.Stderr, "bench: plain handler on http://%s (stop with Ctrl-C)\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		// Finish answered requests for a moment, then cut the rest (a
		// half-sent body must not hold the process): it is a load target.
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			_ = srv.Close()
		}
		return nil
	case err := <-errc:
		return err
	}
}

// processIOCalls returns the read-like and write-like system calls made
// so far by process pid, all its threads, from /proc/<pid>/io (syscr,
// syscw). Errors: the file cannot be read (another user's process, not
// Linux) or lacks the two fields.
func processIOCalls(pid int) (reads, writes int64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/io")
	if err != nil {
		return 0, 0, fmt.Errorf("read system call counts: %w", err)
	}
	found := 0
	for _, line := range strings.Split(string(b), "\n") {
		name, v, ok := strings.Cut(line, ": ")
		n, perr := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if !ok || perr != nil {
			continue
		}
		switch name {
		case "syscr":
			reads, found = n, found|1
		case "syscw":
			writes, found = n, found|2
		}
	}
	if found != 3 {
		return 0, 0, errors.New("read system call counts: no syscr and syscw in /proc io")
	}
	return reads, writes, nil
}

// processCPU returns the user+system CPU time consumed so far by process
// pid, from /proc/<pid>/stat (fields 14 and 15, in clock ticks of 1/100 s,
// the USER_HZ of every Linux architecture Go supports).
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("read CPU time: %w", err)
	}
	// The command name (field 2) may hold spaces; fields restart after ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("read CPU time: malformed /proc stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("read CPU time: short /proc stat")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("read CPU time: malformed /proc stat")
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// fetchFsyncs returns the broker's fsync count: the sum of the per-topic
// "fsyncs" field of GET /topics when present, else a fsync counter from
// /metrics. ok is false when neither is available.
func fetchFsyncs(base string) (n int64, source string, ok bool) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}
	defer c.CloseIdleConnections()
	if resp, err := c.Get(base + "/topics"); err == nil {
		var body struct {
			Topics []map[string]json.RawMessage `json:"topics"`
		}
		derr := json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if derr == nil && resp.StatusCode == http.StatusOK {
			found := false
			for _, t := range body.Topics {
				if raw, has := t["fsyncs"]; has {
					v, err := strconv.ParseInt(string(raw), 10, 64)
					if err == nil {
						n += v
						found = true
					}
				}
			}
			// An empty topic list says nothing; look at /metrics then.
			if found {
				return n, "topics", true
			}
		}
	}
	resp, err := c.Get(base + "/metrics")
	if err != nil {
		return 0, "", false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, "", false
	}
	text, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return 0, "", false
	}
	name, v, ok := fsyncsFromMetrics(string(text))
	if !ok {
		return 0, "", false
	}
	return int64(v), "metrics:" + name, true
}

// fsyncsFromMetrics finds a fsync counter in Prometheus text exposition:
// a family named *fsyncs_total, else the _count of a fsync duration
// histogram, else any *_total or *_count whose name mentions fsync. Series
// of the chosen family are summed (all topics).
func fsyncsFromMetrics(text string) (name string, total float64, ok bool) {
	sums := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		end := strings.IndexAny(line, "{ ")
		if end < 0 {
			continue
		}
		metric := line[:end]
		if !strings.Contains(metric, "fsync") {
			continue
		}
		rest := line[end:]
		if i := strings.LastIndexByte(line, '}'); i >= end {
			rest = line[i+1:]
		}
		fields := strings.Fields(rest) // value [timestamp]
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		sums[metric] += v
	}
	names := make([]string, 0, len(sums))
	for n := range sums {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, pick := range []func(string) bool{
		func(n string) bool { return strings.HasSuffix(n, "fsyncs_total") },
		func(n string) bool { return strings.HasSuffix(n, "_seconds_count") },
		func(n string) bool { return strings.HasSuffix(n, "_total") || strings.HasSuffix(n, "_count") },
	} {
		for _, n := range names {
			if pick(n) && !strings.Contains(n, "checkpoint") {
				return n, sums[n], true
			}
		}
	}
	return "", 0, false
}

func printResult(w io.Writer, r *benchResult) {
	fmt.Fprintf(w, "mode %s  url %s  producers %d  content %d B  topics %d", r.Mode, r.URL, r.Producers, r.Size, r.Topics)
	if r.Ack != "" {
		fmt.Fprintf(w, "  ack %s", r.Ack)
	}
	if r.Depth > 0 {
		fmt.Fprintf(w, "  depth %d", r.Depth)
	}
	if r.Stream != "" {
		fmt.Fprintf(w, "  stream %s (%d replicas)", r.Stream, r.Replicas)
	}
	if r.Batch > 0 {
		fmt.Fprintf(w, "  batch %d", r.Batch)
	}
	fmt.Fprintln(w)
	if r.Mode == "deliver" {
		if r.Requests > 0 {
			fmt.Fprintf(w, "published  %d msgs at %.0f msgs/s\n", r.Messages, r.PublishMsgsPerSec)
		}
		fmt.Fprintf(w, "delivered  %d msgs in %.2fs (first to last arrival): %.0f msgs/s\n", r.Delivered, r.DeliverSeconds, r.MsgsPerSec)
		fmt.Fprintf(w, "duplicates %d  order violations %d  errors %d\n", r.Duplicates, r.OrderViolations, r.Errors)
	} else {
		fmt.Fprintf(w, "%.2fs  %d requests  %d msgs  %d errors\n", r.Seconds, r.Requests, r.Messages, r.Errors)
		fmt.Fprintf(w, "throughput %.0f msgs/s\n", r.MsgsPerSec)
		fmt.Fprintf(w, "latency per request: p50 %.3f ms  p99 %.3f ms  p999 %.3f ms  max %.3f ms\n", r.P50Ms, r.P99Ms, r.P999Ms, r.MaxMs)
		if r.FsyncsPerMsg != nil {
			fmt.Fprintf(w, "fsyncs/message %.4f (%s)\n", *r.FsyncsPerMsg, r.FsyncSource)
		}
		if r.ServerCPUUsPerMsg != nil && isDisk(r.Mode) {
			fmt.Fprintf(w, "CPU %.1f µs/operation (user+system of this process: the write and sync calls)\n", *r.ServerCPUUsPerMsg)
		} else if r.ServerCPUUsPerMsg != nil {
			fmt.Fprintf(w, "server CPU %.1f µs/message (user+system of the -server-pid process)\n", *r.ServerCPUUsPerMsg)
		}
		if r.ServerReadCallsPerMsg != nil && r.ServerWriteCallsPerMsg != nil {
			fmt.Fprintf(w, "server system calls per message: %.2f read, %.2f write (/proc io syscr, syscw)\n", *r.ServerReadCallsPerMsg, *r.ServerWriteCallsPerMsg)
		}
	}
	if r.FirstError != "" {
		fmt.Fprintf(w, "first error: %s\n", r.FirstError)
	}
}
