// Command consumer is an example push consumer for mmmq dispatchers.
//
// A dispatcher POSTs every message to <consumer base URL><path> (path default
// /mmmq/messages) with the headers mmmq-consumer-id (the dispatcher name),
// mmmq-topic, mmmq-offset, mmmq-attempt and mmmq-message-id, and the stored
// message JSON as body. This program prints one line per message and answers
// {"acknowledgement":"ACK"}. Flags make it misbehave on purpose, to watch the
// dispatcher's NACK resends (by default at most 3, the original Java mmmq's
// rule) and its backoff after abnormal answers (1 s doubling up to 60 s):
//
//	go run ./examples/consumer                              # listen on :8081, ACK everything
//	go run ./examples/consumer -addr :9090 -path /events    # other address and path
//	go run ./examples/consumer -nack 2                      # NACK attempts 1 and 2 of each message, ACK the 3rd
//	go run ./examples/consumer -fail-every 10               # answer 500 on every 10th request
//	go run ./examples/consumer -delay 200ms                 # slow consumer
//	go run ./examples/consumer -record /tmp/got.jsonl -quiet  # what `make demo` and tests use
//	CONSUMER_SIGNING_SECRET=whsec_... go run ./examples/consumer   # refuse pushes without a valid signature
//	go run ./examples/consumer -public-key whpk_...        # refuse pushes without a valid ed25519 (v1a) signature
//
// Matching broker configuration (configs/mmmq.yaml):
//
//	mmmq:
//	  broker:
//	    dispatchers:
//	      - name: order-dispatcher
//	        host: http://localhost:8081
//	        patterns: ["order.**", "payment.*"]
//
// With -record FILE every received message is appended to FILE as one JSON
// line, written before the answer is sent:
//
//	{"dispatcher":"order-dispatcher","topic":"order.created","offset":0,"attempt":1,
//	 "id":"evt-000001","answer":"ACK","body":{"topic":{"name":"order.created"},...}}
//
// "answer" is what this consumer replied (ACK, NACK, FAIL for a 500 from
// -fail-every, GONE when the dispatcher hung up during -delay, UNSIGNED for
// a 401, see below), so a checker keeps the ACK lines to see what was
// delivered.
// offset and attempt are -1 when the header is missing or not a number.
// Delivery is at-least-once: the same (topic, offset) can be recorded more
// than once, for instance when an ACK is lost; deduplicate by id.
//
// # Signed pushes
//
// With -signing-secret whsec_... (or the environment variable
// CONSUMER_SIGNING_SECRET, used when the flag is not given) every push must
// carry a valid Standard Webhooks signature (https://www.standardwebhooks.com,
// package github.com/mmmq/mmmq/modules/webhooks): the headers webhook-id,
// webhook-timestamp (Unix seconds, at most -signing-tolerance, default 5m,
// away from this machine's clock) and webhook-signature ("v1,<base64
// HMAC-SHA256 of id.timestamp.body>", one entry per sender secret). Several
// secrets, the flag repeated or separated by commas, are for a key rotation:
// a push signed with any of them is accepted. Prefer the environment
// variable (command lines are visible to every user of the machine), set
// for this command only as in the example above: mmmq serve refuses to
// start when the environment holds an MMMQ_ variable that names none of its
// configuration keys.
// A -signing-secret (or -public-key) given with no secret (key) in it,
// such as "$SECRET" of an unset shell variable, stops the program at
// startup naming the flag: to run without verification leave the flag
// out.
//
// The signature is checked before anything else; only a wrong method (405)
// and a body that cannot be read whole (413 over -max-body, 400 on a read
// error) are answered first, because the signature covers the whole body. A push that fails is answered 401 with
// {"error":"<why>"}, logged, and recorded with answer UNSIGNED and the reason
// in "error" (body is null when it is not JSON); it is counted by neither
// -nack nor -fail-every. Only webhook-id, webhook-timestamp and the body are
// signed: the mmmq-* headers are not (the body names the topic too), and a
// push sent again within the tolerance passes again (deduplicate by
// webhook-id or the message id).
//
// With -public-key whpk_... (the dispatcher's signing-keys, whose public
// halves the broker lists at GET /.well-known/mmmq/webhook-keys) every
// push must carry a "v1a,<base64 ed25519 signature of id.timestamp.body>"
// entry in webhook-signature made by one of the keys, with the same
// headers and -signing-tolerance; "v1," entries do not count for it.
// Several keys, the flag repeated or separated by commas, are for a
// rotation. A public key is no secret: there is no environment variable
// for it. A push that fails is refused exactly as above (401
// {"error":"<why>"}, logged, recorded as UNSIGNED). With both
// -signing-secret (or CONSUMER_SIGNING_SECRET) and -public-key a push
// must pass both checks, the secret's first: sign with both
// signing-secrets and signing-keys, or give the consumer only the one the
// dispatcher uses.
//
// The program stops on SIGINT or SIGTERM, letting requests in progress finish
// (at most 10 s).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mmmq/mmmq/modules/webhooks"
)

// Push headers set by mmmq dispatchers, in the lower case they are sent in.
const (
	HeaderConsumerID = "mmmq-consumer-id"
	HeaderTopic      = "mmmq-topic"
	HeaderOffset     = "mmmq-offset"
	HeaderAttempt    = "mmmq-attempt"
	HeaderMessageID  = "mmmq-message-id"
)

// DefaultMaxBody is the default request body limit in bytes (8 MiB); larger
// bodies are answered 413.
const DefaultMaxBody = 8 << 20

// Answers written to the record file.
const (
	AnswerACK  = "ACK"
	AnswerNACK = "NACK"
	AnswerFail = "FAIL"
	// AnswerGone: the client went away during -delay; nothing was answered.
	AnswerGone = "GONE"
	// AnswerUnsigned: the signature check failed; answered 401.
	AnswerUnsigned = "UNSIGNED"
)

// EnvSigningSecret is read for the signing secrets when -signing-secret is
// not given (comma-separated).
const EnvSigningSecret = "CONSUMER_SIGNING_SECRET"

// Config controls how a Handler answers.
type Config struct {
	// Nack is how many deliveries of each message are answered NACK before
	// the next one is answered ACK; 0 ACKs at once. Deliveries are counted by
	// this process per (dispatcher, topic, offset), so the count does not
	// depend on how the dispatcher numbers attempts and restarts at 0 when
	// the consumer restarts.
	Nack int
	// FailEvery answers HTTP 500 to every FailEvery-th request (counting
	// well-formed pushes since start); 0 never fails. A 500 is an abnormal answer: the
	// dispatcher backs off and resends.
	FailEvery int
	// Delay is slept before answering (cut short if the client goes away).
	Delay time.Duration
	// MaxBody is the request body limit in bytes; 0 means DefaultMaxBody.
	MaxBody int64
	// Out receives one line per message; nil prints nothing.
	Out io.Writer
	// Record, when not nil, receives one Record JSON line per message.
	Record io.Writer
	// Verifier, when not nil, checks every push's Standard Webhooks
	// signature before anything else; a push that fails is answered 401
	// {"error":"..."}, logged and recorded as AnswerUnsigned.
	Verifier *webhooks.Verifier
	// KeyVerifier, when not nil, checks every push's v1a (ed25519)
	// signature against public keys (webhooks.NewPublicKeyVerifier),
	// after Verifier when both are set: a push must pass both. A push
	// that fails is answered as for Verifier.
	KeyVerifier *webhooks.Verifier
}

// Record is one line of the -record file.
type Record struct {
	Dispatcher string          `json:"dispatcher"`
	Topic      string          `json:"topic"`
	Offset     int64           `json:"offset"`
	Attempt    int64           `json:"attempt"`
	ID         string          `json:"id"`
	Answer     string          `json:"answer"`
	Body       json.RawMessage `json:"body"`
	// Error is why a push was refused (answer UNSIGNED); omitted otherwise.
	Error string `json:"error,omitempty"`
}

// Handler is the http.Handler that receives dispatcher pushes. It is safe for
// concurrent use: a dispatcher runs one worker per topic, so requests of
// different topics arrive in parallel.
type Handler struct {
	cfg      Config
	requests atomic.Int64

	mu    sync.Mutex // guards nacks, Out and Record
	nacks map[deliveryKey]int
}

// deliveryKey names one message of one dispatcher.
type deliveryKey struct {
	dispatcher, topic string
	offset            int64
	id                string
}

// NewHandler returns a Handler answering as cfg says.
func NewHandler(cfg Config) *Handler {
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	return &Handler{cfg: cfg, nacks: map[deliveryKey]int{}}
}

// ServeHTTP handles one push. Status codes: 200 with an ACK/NACK body;
// 400 body is not JSON; 401 signature check failed (with a Verifier or a
// KeyVerifier; body {"error":"..."}); 405 not a POST; 413 body over the limit; 500 on purpose
// (-fail-every).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, fmt.Sprintf("body over %d bytes", tooBig.Limit), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	for _, v := range []*webhooks.Verifier{h.cfg.Verifier, h.cfg.KeyVerifier} {
		if v == nil {
			continue
		}
		if err := v.Verify(r.Header, body); err != nil {
			h.refuse(w, r, body, err)
			return
		}
	}
	if !json.Valid(body) {
		http.Error(w, "body is not JSON", http.StatusBadRequest)
		return
	}
	n := h.requests.Add(1) // -fail-every counts well-formed pushes only
	rec := Record{
		Dispatcher: r.Header.Get(HeaderConsumerID),
		Topic:      r.Header.Get(HeaderTopic),
		Offset:     headerInt(r.Header, HeaderOffset),
		Attempt:    headerInt(r.Header, HeaderAttempt),
		ID:         r.Header.Get(HeaderMessageID),
		Body:       body,
	}

	fail := h.cfg.FailEvery > 0 && n%int64(h.cfg.FailEvery) == 0
	switch {
	case fail:
		rec.Answer = AnswerFail
	case h.nack(rec):
		rec.Answer = AnswerNACK
	default:
		rec.Answer = AnswerACK
	}
	if h.cfg.Delay > 0 {
		t := time.NewTimer(h.cfg.Delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			// The dispatcher gave up (per-attempt timeout); nobody reads
			// the answer.
			t.Stop()
			rec.Answer = AnswerGone
			h.report(rec)
			return
		}
	}
	// Record before answering: once the dispatcher has the ACK, the line
	// is in the record file.
	h.report(rec)
	if fail {
		http.Error(w, fmt.Sprintf("failing request %d on purpose (-fail-every %d)", n, h.cfg.FailEvery),
			http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"acknowledgement":%q}`+"\n", rec.Answer)
}

// refuse answers 401 to a push whose signature check failed with err, and
// logs and records it.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, body []byte, err error) {
	rec := Record{
		Dispatcher: r.Header.Get(HeaderConsumerID),
		Topic:      r.Header.Get(HeaderTopic),
		Offset:     headerInt(r.Header, HeaderOffset),
		Attempt:    headerInt(r.Header, HeaderAttempt),
		ID:         r.Header.Get(HeaderMessageID),
		Answer:     AnswerUnsigned,
		Error:      err.Error(),
	}
	if json.Valid(body) {
		rec.Body = body
	}
	log.Printf("refused push from %s (401): %v (dispatcher=%q topic=%q offset=%d webhook-id=%q)",
		r.RemoteAddr, err, rec.Dispatcher, rec.Topic, rec.Offset, r.Header.Get(webhooks.HeaderID))
	h.report(rec)
	answer, _ := json.Marshal(struct {
		Error string `json:"error"`
	}{err.Error()})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = w.Write(append(answer, '\n'))
}

// nack reports whether this delivery of rec is answered NACK, counting it.
func (h *Handler) nack(rec Record) bool {
	if h.cfg.Nack <= 0 {
		return false
	}
	k := deliveryKey{dispatcher: rec.Dispatcher, topic: rec.Topic, offset: rec.Offset, id: rec.ID}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.nacks[k] < h.cfg.Nack {
		h.nacks[k]++
		return true
	}
	delete(h.nacks, k) // ACKed: forget it, a later redelivery starts over
	return false
}

// report prints and records rec.
func (h *Handler) report(rec Record) {
	var line []byte
	if h.cfg.Record != nil {
		var err error
		line, err = json.Marshal(rec)
		if err != nil { // cannot happen: Body is valid JSON or nil
			log.Printf("consumer: encode record: %v", err)
		}
		line = append(line, '\n')
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cfg.Out != nil && rec.Answer != AnswerUnsigned { // refusals are logged instead
		fmt.Fprintf(h.cfg.Out, "%-4s topic=%s offset=%d attempt=%d id=%s dispatcher=%s content=%s\n",
			rec.Answer, rec.Topic, rec.Offset, rec.Attempt, rec.ID, rec.Dispatcher, contentOf(rec.Body))
	}
	if line != nil {
		if _, err := h.cfg.Record.Write(line); err != nil {
			log.Printf("consumer: write record: %v", err)
		}
	}
}

// maxPrint caps the printed content.
const maxPrint = 300

// contentOf returns the "content" member of a stored message, compacted and
// cut to maxPrint bytes; the whole body when it has no content member.
func contentOf(body []byte) string {
	var msg struct {
		Content json.RawMessage `json:"content"`
	}
	raw := body
	if json.Unmarshal(body, &msg) == nil && msg.Content != nil {
		raw = msg.Content
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return "?"
	}
	s := b.String()
	if len(s) > maxPrint {
		s = s[:maxPrint] + "…"
	}
	return s
}

// secretList is the -signing-secret flag (and -public-key): repeatable,
// each value one or more secrets (keys) separated by commas. It never
// prints the values.
type secretList []string

func (l *secretList) String() string {
	if l == nil || len(*l) == 0 {
		return ""
	}
	return fmt.Sprintf("(%d values)", len(*l))
}

func (l *secretList) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// signingSecrets parses the -signing-secret values, or env (the value of
// CONSUMER_SIGNING_SECRET) when there are none: secrets separated by commas,
// spaces around them ignored, empty entries skipped. No secret at all is
// no error (nil: signatures are not checked), but a -signing-secret value
// with no secret in it ("", typically an unset shell variable) is: the
// flag was given (secretList records every time it is), so verification
// was asked for. An error names the source and the secret's position,
// never its text.
func signingSecrets(flagValues []string, env string) ([]webhooks.Secret, error) {
	if len(flagValues) == 0 {
		return parseList([]string{env}, EnvSigningSecret, "secret", "", webhooks.ParseSecret)
	}
	return parseList(flagValues, "-signing-secret", "secret",
		"give a whsec_ secret, or leave -signing-secret out (and "+EnvSigningSecret+" unset) to run without signature verification", webhooks.ParseSecret)
}

// publicKeys parses the -public-key values: whpk_ keys separated by
// commas, spaces around them ignored, empty entries skipped. No key at all
// (the flag not given) is no error (nil: v1a signatures are not checked);
// a value with no key in it is, as for -signing-secret. An error names the
// flag and the key's position ("-public-key: key 2: webhooks: invalid
// key: ...").
func publicKeys(flagValues []string) ([]webhooks.PublicKey, error) {
	return parseList(flagValues, "-public-key", "key",
		"give a whpk_ key, or leave -public-key out to run without v1a signature verification", webhooks.ParsePublicKey)
}

// parseList parses comma-separated entries of values with parse (spaces
// around them ignored, empty entries skipped); an error names source and
// the entry's position as "<what> <n>", never its text. With ifEmpty
// (values are those of a flag given on the command line; ifEmpty says how
// to run without verification) a value without any entry is an error:
// "<source> is empty (...): <ifEmpty>".
func parseList[T any](values []string, source, what, ifEmpty string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for _, v := range values {
		n := 0
		for entry := range strings.SplitSeq(v, ",") {
			entry = strings.TrimSpace(entry)
			if entry == "" {
				continue
			}
			x, err := parse(entry)
			if err != nil {
				return nil, fmt.Errorf("%s: %s %d: %w", source, what, len(out)+1, err)
			}
			out = append(out, x)
			n++
		}
		if ifEmpty != "" && n == 0 {
			return nil, fmt.Errorf("%s is empty (%q has no %s: an unset shell variable?): %s", source, v, what, ifEmpty)
		}
	}
	return out, nil
}

// headerInt parses a decimal header; -1 when missing or invalid.
func headerInt(h http.Header, name string) int64 {
	v, err := strconv.ParseInt(strings.TrimSpace(h.Get(name)), 10, 64)
	if err != nil {
		return -1
	}
	return v
}

func main() {
	if err := run(); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("addr", ":8081", "listen address")
	path := flag.String("path", "/mmmq/messages", "path the dispatcher POSTs to")
	nack := flag.Int("nack", 0, "NACK the first `N` deliveries of each message")
	failEvery := flag.Int("fail-every", 0, "answer 500 on every `K`-th request (0: never)")
	delay := flag.Duration("delay", 0, "sleep `D` before answering")
	record := flag.String("record", "", "append one JSON line per received message to `FILE`")
	maxBody := flag.Int64("max-body", DefaultMaxBody, "request body limit in `bytes`")
	quiet := flag.Bool("quiet", false, "do not print a line per message")
	var secretFlag secretList
	flag.Var(&secretFlag, "signing-secret", "refuse pushes not signed with this Standard Webhooks `secret` (whsec_...); "+
		"repeat it or separate several with commas (key rotation); default $"+EnvSigningSecret)
	var keyFlag secretList
	flag.Var(&keyFlag, "public-key", "refuse pushes without a v1a (ed25519) signature by this Standard Webhooks public `key` (whpk_..., "+
		"from the broker's /.well-known/mmmq/webhook-keys); repeat it or separate several with commas (key rotation)")
	tolerance := flag.Duration("signing-tolerance", webhooks.DefaultTolerance,
		"largest difference between a signed push's webhook-timestamp and this clock")
	flag.Parse()
	log.SetPrefix("consumer: ")
	log.SetFlags(log.LstdFlags | log.Lmsgprefix)

	if !strings.HasPrefix(*path, "/") || flag.NArg() > 0 || *nack < 0 || *failEvery < 0 || *delay < 0 || *maxBody <= 0 || *tolerance <= 0 {
		flag.Usage()
		os.Exit(2)
	}
	secrets, err := signingSecrets(secretFlag, os.Getenv(EnvSigningSecret))
	if err != nil {
		return err
	}
	keys, err := publicKeys(keyFlag)
	if err != nil {
		return err
	}
	cfg := Config{Nack: *nack, FailEvery: *failEvery, Delay: *delay, MaxBody: *maxBody}
	var checks []string
	if len(secrets) > 0 {
		cfg.Verifier = webhooks.NewVerifier(*tolerance, secrets...)
		checks = append(checks, fmt.Sprintf("%d secret(s), fingerprints %s", len(secrets), strings.Join(cfg.Verifier.Fingerprints(), " ")))
	}
	if len(keys) > 0 {
		cfg.KeyVerifier = webhooks.NewPublicKeyVerifier(*tolerance, keys...)
		kids := make([]string, len(keys))
		for i, k := range keys {
			kids[i] = k.KeyID()
		}
		checks = append(checks, fmt.Sprintf("%d public key(s), kids %s", len(keys), strings.Join(kids, " ")))
	}
	signing := "off"
	if len(checks) > 0 {
		signing = fmt.Sprintf("%s, tolerance %s", strings.Join(checks, " and "), *tolerance)
	}
	if !*quiet {
		cfg.Out = os.Stdout
	}
	if *record != "" {
		f, err := os.OpenFile(*record, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		cfg.Record = f
	}

	mux := http.NewServeMux()
	mux.Handle(*path, NewHandler(cfg))
	srv := &http.Server{
		Addr:              *addr,
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// Bind first, so "listening" is only printed once it is true.
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Printf("listening on %s, POST %s (nack=%d fail-every=%d delay=%s record=%q signing=%s)",
		ln.Addr(), *path, *nack, *failEvery, *delay, *record, signing)

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	stop() // a second signal kills the process
	log.Print("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}
