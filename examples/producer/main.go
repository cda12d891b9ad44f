// Command producer publishes a JSONL file of publish requests to an mmmq
// broker, with several concurrent connections, and reports what was
// acknowledged.
//
// Each non-empty line of the input is sent as is as the body of
// POST <url><path>?ack=<level> (level accepted, written or durable), for
// example
//
//	{"topic":"order.created","content":{"orderId":1001},"id":"evt-000001"}
//
// The default input is examples/data/orders-events.jsonl (see
// examples/data/gen). Usage, from the repository root:
//
//	go run ./examples/producer                                  # 4 producers, ack=durable, localhost:8080
//	go run ./examples/producer -c 8 -ack written                # 8 producers, WRITTEN acks
//	go run ./examples/producer -url http://broker:8080 -path /mmmq/messages
//	go run ./examples/producer -file my.jsonl -acks /tmp/acks.jsonl -progress
//
// Ordering: mmmq dispatches each topic in offset order, so the lines of one
// topic must reach the broker in file order. Every topic is owned by exactly
// one producer goroutine (topics are dealt round-robin in order of first
// appearance), which sends its lines one after the other and waits for each
// answer. Different topics go in parallel, so at most min(-c, number of
// topics) requests are in flight.
//
// Output: a progress line on stderr every 500 ms (when stderr is a terminal or
// with -progress), failures on stderr, and a final summary on stdout:
//
//	sent=3000 acked=3000 failed=0 elapsed=1.52s msgs/s=1973.7
//
// sent counts messages with a final outcome, acked those answered ACK,
// failed the rest; msgs/s is acked per second. With -acks FILE one JSON line
// per acknowledged message is written, in the order the answers arrived:
//
//	{"id":"evt-000001","topic":"order.created","offset":0,"level":"DURABLE"}
//
// offset is null for ACCEPTED, which has no final offset (the entry is only
// queued in memory when it is answered). The exit status is 0 when every
// message was acknowledged, 1 when any failed or the run was interrupted
// (SIGINT, SIGTERM), 2 for bad flags or input.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Config controls a Run.
type Config struct {
	// URL is the broker base URL, scheme://host:port.
	URL string
	// Path is the publish path, /messages or /mmmq/messages.
	Path string
	// Ack is the requested ack level: accepted, written or durable.
	Ack string
	// Concurrency is the number of producer goroutines (and kept-alive
	// connections); at least 1.
	Concurrency int
	// Timeout bounds one request, from connect to the end of the answer.
	Timeout time.Duration
	// Retries is how many times a request that failed with a connection
	// error, a timeout or 503 is sent again; 0 sends once.
	Retries int
	// Backoff is the first pause before a retry; it doubles per retry, up
	// to maxBackoff. 0 means 100 ms.
	Backoff time.Duration
	// MaxFailed stops the run after that many failed messages; 0 never stops.
	MaxFailed int64
	// Progress, when not nil, gets a progress line every ProgressEvery
	// (0: 500 ms); on a terminal (ProgressInline) the line is rewritten in
	// place.
	Progress       io.Writer
	ProgressInline bool
	ProgressEvery  time.Duration
	// Log gets one line per failed message (the first maxLoggedFailures) and
	// the retry note; nil discards.
	Log io.Writer
	// Acks, when not nil, gets one AckRecord JSON line per ACKed message.
	Acks io.Writer
	// Client is the HTTP client to use; nil builds one with NewClient.
	Client *http.Client
}

const (
	maxBackoff        = 2 * time.Second
	maxResponseBytes  = 1 << 20 // answers are small; read at most this much
	maxLoggedFailures = 20
)

// Message is one input line.
type Message struct {
	Line  int    // 1-based line number in the input
	Topic string // the topic name, from "topic" or "topic.name"
	ID    string // the producer message id, "" when absent
	Body  []byte // the line, sent as is
}

// Summary is the outcome of a Run.
type Summary struct {
	Sent, Acked, Failed int64
	// Retries counts requests sent again after a connection error, timeout
	// or 503.
	Retries int64
	// Unsent counts messages not sent because the run was stopped.
	Unsent  int64
	Elapsed time.Duration
}

// String formats the summary line:
// sent=N acked=N failed=N elapsed=1.234s msgs/s=N.
func (s Summary) String() string {
	rate := 0.0
	if s.Elapsed > 0 {
		rate = float64(s.Acked) / s.Elapsed.Seconds()
	}
	return fmt.Sprintf("sent=%d acked=%d failed=%d elapsed=%s msgs/s=%.1f",
		s.Sent, s.Acked, s.Failed, s.Elapsed.Round(time.Millisecond), rate)
}

// AckRecord is one line of the -acks file.
type AckRecord struct {
	ID     string `json:"id"`
	Topic  string `json:"topic"`
	Offset *int64 `json:"offset"` // null for ACCEPTED
	Level  string `json:"level"`
}

// publishResponse is the broker's answer: {"acknowledgement":"ACK",
// "topic":…,"offset":…,"level":…,"id":…} on success (no offset for
// ACCEPTED), {"acknowledgement":"NACK","error":…,"code":…} with an error
// status otherwise.
type publishResponse struct {
	Acknowledgement string `json:"acknowledgement"`
	Topic           string `json:"topic"`
	Offset          *int64 `json:"offset"`
	Level           string `json:"level"`
	Error           string `json:"error"`
}

// ReadMessages reads a JSONL file of publish requests. Empty lines are
// skipped; a line that is not a JSON object with a topic (string or
// {"name": ...}) is an error naming the line.
func ReadMessages(r io.Reader) ([]Message, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var msgs []Message
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var req struct {
			Topic json.RawMessage `json:"topic"`
			ID    string          `json:"id"`
		}
		if err := json.Unmarshal(line, &req); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		topic, err := topicName(req.Topic)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		msgs = append(msgs, Message{Line: n, Topic: topic, ID: req.ID, Body: bytes.Clone(line)})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read input: %w", err)
	}
	return msgs, nil
}

// topicName accepts "t" and {"name": "t"} (the Java mmmq client form).
func topicName(raw json.RawMessage) (string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil && s != "" {
		return s, nil
	}
	var obj struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(raw, &obj) == nil && obj.Name != "" {
		return obj.Name, nil
	}
	return "", errors.New(`missing topic (want "topic":"name" or "topic":{"name":"name"})`)
}

// NewClient returns a keep-alive client for n concurrent producers. It does
// not follow redirects (a redirect is a failure, as for dispatchers).
func NewClient(n int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = n
	tr.MaxIdleConnsPerHost = n
	return &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// producer is the state of one Run.
type producer struct {
	cfg      Config
	endpoint string
	client   *http.Client
	stop     context.CancelFunc // stops the run after MaxFailed

	sent, acked, failed, retries, unsent atomic.Int64

	mu     sync.Mutex // guards logged, cfg.Log and cfg.Acks
	logged int
}

// Run publishes msgs and returns the counts. Lines of one topic are sent in
// slice order, one at a time; topics are spread over cfg.Concurrency
// goroutines. Run returns an error only for a bad configuration; failed
// messages are counted in the Summary.
func Run(ctx context.Context, cfg Config, msgs []Message) (Summary, error) {
	if cfg.Concurrency < 1 {
		return Summary{}, fmt.Errorf("concurrency %d: want at least 1", cfg.Concurrency)
	}
	switch cfg.Ack {
	case "accepted", "written", "durable":
	default:
		return Summary{}, fmt.Errorf("ack level %q: want accepted, written or durable", cfg.Ack)
	}
	u, err := url.Parse(strings.TrimRight(cfg.URL, "/") + cfg.Path)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Summary{}, fmt.Errorf("url %q with path %q: want http://host:port and /path", cfg.URL, cfg.Path)
	}
	q := u.Query()
	q.Set("ack", cfg.Ack)
	u.RawQuery = q.Encode()
	if cfg.Backoff <= 0 {
		cfg.Backoff = 100 * time.Millisecond
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = 500 * time.Millisecond
	}
	if cfg.Client == nil {
		cfg.Client = NewClient(cfg.Concurrency)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p := &producer{cfg: cfg, endpoint: u.String(), client: cfg.Client, stop: cancel}

	// Deal the topics round-robin, in order of first appearance; each
	// goroutine gets its messages in file order.
	owner := map[string]int{}
	queues := make([][]Message, cfg.Concurrency)
	for _, m := range msgs {
		w, ok := owner[m.Topic]
		if !ok {
			w = len(owner) % cfg.Concurrency
			owner[m.Topic] = w
		}
		queues[w] = append(queues[w], m)
	}

	start := time.Now()
	progressDone := make(chan struct{})
	var progressWG sync.WaitGroup
	if cfg.Progress != nil {
		progressWG.Go(func() { p.progress(start, len(msgs), progressDone) })
	}
	var wg sync.WaitGroup
	for _, queue := range queues {
		if len(queue) == 0 {
			continue
		}
		wg.Go(func() {
			for i, m := range queue {
				if ctx.Err() != nil {
					p.unsent.Add(int64(len(queue) - i))
					return
				}
				p.send(ctx, m)
			}
		})
	}
	wg.Wait()
	close(progressDone)
	progressWG.Wait()

	s := p.summary(time.Since(start))
	if s.Retries > 0 {
		// See send: a retry can store a message twice.
		p.logf("%d requests were retried; a retry after a lost reply can store a message twice (deduplicate by id)", s.Retries)
	}
	return s, nil
}

func (p *producer) summary(elapsed time.Duration) Summary {
	return Summary{
		Sent: p.sent.Load(), Acked: p.acked.Load(), Failed: p.failed.Load(),
		Retries: p.retries.Load(), Unsent: p.unsent.Load(), Elapsed: elapsed,
	}
}

// send publishes m, retrying connection errors, timeouts and 503 up to
// cfg.Retries times with a doubling pause (cfg.Backoff .. maxBackoff, with
// jitter).
//
// A retry is not idempotent: when the broker stored the message but its reply
// was lost (connection cut, timeout, crash after fsync and before the reply),
// the retry stores it a second time at the next offset. The log-queue study
// observed this in its crash_forced_before_reply_dup experiment (evt-000011
// at offsets 10 and 11). The producer cannot tell "not written" from
// "written, reply lost", so consumers deduplicate by message id.
func (p *producer) send(ctx context.Context, m Message) {
	var lastErr error
	for attempt := 0; ; attempt++ {
		resp, retryable, err := p.publish(ctx, m)
		if err == nil {
			p.sent.Add(1)
			p.acked.Add(1)
			p.recordAck(m, resp)
			return
		}
		lastErr = err
		if !retryable || attempt >= p.cfg.Retries || ctx.Err() != nil {
			break
		}
		pause := min(p.cfg.Backoff<<attempt, maxBackoff)
		pause = pause/2 + rand.N(pause/2+1) // jitter: [pause/2, pause]
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		if ctx.Err() != nil {
			break
		}
		p.retries.Add(1)
	}
	p.sent.Add(1)
	if n := p.failed.Add(1); p.cfg.MaxFailed > 0 && n >= p.cfg.MaxFailed {
		p.stop()
	}
	p.logFailure(m, lastErr)
}

// publish sends m once. retryable reports whether the failure may go away
// on a resend: connection errors, timeouts and 503.
func (p *producer) publish(ctx context.Context, m Message) (resp publishResponse, retryable bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.endpoint, bytes.NewReader(m.Body))
	if err != nil {
		return resp, false, err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := p.client.Do(req)
	if err != nil {
		return resp, true, err
	}
	body, err := io.ReadAll(io.LimitReader(res.Body, maxResponseBytes))
	// Drain a little more so the connection can be reused, then close.
	_, _ = io.CopyN(io.Discard, res.Body, 4<<10)
	res.Body.Close()
	if err != nil {
		return resp, true, fmt.Errorf("read answer: %w", err)
	}
	jsonErr := json.Unmarshal(body, &resp)
	switch {
	case res.StatusCode == http.StatusOK && jsonErr == nil && resp.Acknowledgement == "ACK":
		return resp, false, nil
	case jsonErr == nil && resp.Acknowledgement == "NACK":
		err = fmt.Errorf("%s NACK: %s", res.Status, resp.Error)
	default:
		err = fmt.Errorf("%s: %s", res.Status, bytes.TrimSpace(body[:min(len(body), 200)]))
	}
	return resp, res.StatusCode == http.StatusServiceUnavailable, err
}

func (p *producer) recordAck(m Message, resp publishResponse) {
	if p.cfg.Acks == nil {
		return
	}
	rec := AckRecord{ID: m.ID, Topic: m.Topic, Offset: resp.Offset, Level: resp.Level}
	if resp.Topic != "" {
		rec.Topic = resp.Topic
	}
	line, _ := json.Marshal(rec) // cannot fail: strings and an int
	line = append(line, '\n')
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := p.cfg.Acks.Write(line); err != nil && p.cfg.Log != nil {
		fmt.Fprintf(p.cfg.Log, "producer: write acks: %v\n", err)
	}
}

func (p *producer) logFailure(m Message, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cfg.Log == nil || p.logged > maxLoggedFailures {
		return
	}
	p.logged++
	if p.logged > maxLoggedFailures {
		fmt.Fprintf(p.cfg.Log, "producer: more failures, not shown\n")
		return
	}
	p.clearProgressLocked()
	fmt.Fprintf(p.cfg.Log, "producer: line %d (id %q, topic %s): %v\n", m.Line, m.ID, m.Topic, err)
}

func (p *producer) logf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cfg.Log != nil {
		p.clearProgressLocked()
		fmt.Fprintf(p.cfg.Log, "producer: "+format+"\n", args...)
	}
}

// clearProgressLocked blanks an in-place progress line so that a log line
// does not run into it. p.mu must be held.
func (p *producer) clearProgressLocked() {
	if p.cfg.Progress != nil && p.cfg.ProgressInline {
		fmt.Fprint(p.cfg.Progress, "\r\033[K")
	}
}

// progress prints sent/acked/failed and the rate of the last interval until
// done is closed, then clears an in-place line.
func (p *producer) progress(start time.Time, total int, done <-chan struct{}) {
	tick := time.NewTicker(p.cfg.ProgressEvery)
	defer tick.Stop()
	last, lastAt := int64(0), start
	for {
		select {
		case <-done:
			p.mu.Lock()
			p.clearProgressLocked()
			p.mu.Unlock()
			return
		case now := <-tick.C:
			s := p.summary(now.Sub(start))
			rate := float64(s.Acked-last) / now.Sub(lastAt).Seconds()
			last, lastAt = s.Acked, now
			p.mu.Lock()
			if p.cfg.ProgressInline {
				fmt.Fprintf(p.cfg.Progress, "\r\033[Ksent=%d/%d acked=%d failed=%d msgs/s=%.0f",
					s.Sent, total, s.Acked, s.Failed, rate)
			} else {
				fmt.Fprintf(p.cfg.Progress, "sent=%d/%d acked=%d failed=%d msgs/s=%.0f\n",
					s.Sent, total, s.Acked, s.Failed, rate)
			}
			p.mu.Unlock()
		}
	}
}

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func main() {
	os.Exit(run())
}

func run() int {
	var cfg Config
	file := flag.String("file", "examples/data/orders-events.jsonl", "JSONL `file` of publish requests, - for stdin")
	flag.StringVar(&cfg.URL, "url", "http://localhost:8080", "broker base `URL`")
	flag.StringVar(&cfg.Path, "path", "/messages", "publish `path` (/messages or /mmmq/messages)")
	flag.StringVar(&cfg.Ack, "ack", "durable", "ack `level`: accepted, written or durable")
	flag.IntVar(&cfg.Concurrency, "c", 4, "concurrent producers (`N` connections); a topic always uses one")
	flag.DurationVar(&cfg.Timeout, "timeout", 10*time.Second, "per-request timeout")
	flag.IntVar(&cfg.Retries, "retries", 3, "resends after a connection error, timeout or 503 (`N`)")
	flag.Int64Var(&cfg.MaxFailed, "max-failed", 0, "stop after `N` failed messages (0: never)")
	acks := flag.String("acks", "", "write one JSON line per acknowledged message to `FILE`")
	progress := flag.Bool("progress", false, "print progress to stderr even when it is not a terminal")
	flag.Parse()
	if flag.NArg() > 0 || cfg.Concurrency < 1 || cfg.Retries < 0 || cfg.Timeout <= 0 {
		flag.Usage()
		return 2
	}

	var in io.Reader = os.Stdin
	if *file != "-" {
		f, err := os.Open(*file)
		if err != nil {
			fmt.Fprintln(os.Stderr, "producer:", err)
			return 2
		}
		defer f.Close()
		in = f
	}
	msgs, err := ReadMessages(in)
	if err != nil {
		fmt.Fprintf(os.Stderr, "producer: %s: %v\n", *file, err)
		return 2
	}

	cfg.Log = os.Stderr
	if tty := isTerminal(os.Stderr); tty || *progress {
		cfg.Progress, cfg.ProgressInline = os.Stderr, tty
	}
	var ackFile *os.File
	var ackBuf *bufio.Writer
	if *acks != "" {
		if ackFile, err = os.Create(*acks); err != nil {
			fmt.Fprintln(os.Stderr, "producer:", err)
			return 2
		}
		ackBuf = bufio.NewWriter(ackFile)
		cfg.Acks = ackBuf
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sum, err := Run(ctx, cfg, msgs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "producer:", err)
		return 2
	}
	code := 0
	if ackFile != nil {
		if err := errors.Join(ackBuf.Flush(), ackFile.Close()); err != nil {
			fmt.Fprintln(os.Stderr, "producer: write acks:", err)
			code = 1
		}
	}
	if sum.Unsent > 0 {
		fmt.Fprintf(os.Stderr, "producer: stopped, %d messages not sent\n", sum.Unsent)
		code = 1
	}
	if sum.Failed > 0 {
		code = 1
	}
	fmt.Println(sum)
	return code
}
