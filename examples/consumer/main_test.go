package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/webhooks"
)

// push sends one dispatcher-style request to url and returns the status code
// and the acknowledgement ("" when the body is not an ack). Errors are
// reported with t.Errorf (it runs in goroutines) and return status 0.
func push(t *testing.T, url, topic string, offset, attempt int, body string) (int, string) {
	t.Helper()
	code, ack, _ := pushWith(t, url, topic, offset, attempt, body, nil)
	return code, ack
}

// pushWith is push with edit, when not nil, called on the request headers
// before sending (to sign them); it also returns the response body.
func pushWith(t *testing.T, url, topic string, offset, attempt int, body string, edit func(http.Header)) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Errorf("new request: %v", err)
		return 0, "", nil
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderConsumerID, "order-dispatcher")
	req.Header.Set(HeaderTopic, topic)
	req.Header.Set(HeaderOffset, strconv.Itoa(offset))
	req.Header.Set(HeaderAttempt, strconv.Itoa(attempt))
	req.Header.Set(HeaderMessageID, fmt.Sprintf("evt-%06d", offset+1))
	if edit != nil {
		edit(req.Header)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("push: %v", err)
		return 0, "", nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var ack struct {
		Acknowledgement string `json:"acknowledgement"`
	}
	if json.Unmarshal(b, &ack) != nil {
		return resp.StatusCode, "", b
	}
	return resp.StatusCode, ack.Acknowledgement, b
}

func message(topic string, offset int) string {
	return fmt.Sprintf(`{"topic":{"name":%q},"content":{"orderId": %d},"id":"evt-%06d","timestamp":1709283600000}`,
		topic, 1000+offset, offset+1)
}

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestACK(t *testing.T) {
	var out syncBuffer
	srv := httptest.NewServer(NewHandler(Config{Out: &out}))
	defer srv.Close()

	for off := range 3 {
		code, ack := push(t, srv.URL, "order.created", off, 1, message("order.created", off))
		if code != http.StatusOK || ack != "ACK" {
			t.Fatalf("offset %d: got %d %q, want 200 ACK", off, code, ack)
		}
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("printed %d lines, want 3:\n%s", len(lines), out.String())
	}
	want := `ACK  topic=order.created offset=1 attempt=1 id=evt-000002 dispatcher=order-dispatcher content={"orderId":1001}`
	if lines[1] != want {
		t.Errorf("line:\n got %s\nwant %s", lines[1], want)
	}
}

func TestNack(t *testing.T) {
	srv := httptest.NewServer(NewHandler(Config{Nack: 2}))
	defer srv.Close()

	// Two messages interleaved: each gets NACK, NACK, then ACK.
	for attempt := 1; attempt <= 3; attempt++ {
		for off := range 2 {
			want := "NACK"
			if attempt == 3 {
				want = "ACK"
			}
			code, ack := push(t, srv.URL, "payment.captured", off, attempt, message("payment.captured", off))
			if code != http.StatusOK || ack != want {
				t.Fatalf("offset %d attempt %d: got %d %q, want 200 %s", off, attempt, code, ack, want)
			}
		}
	}
	// The same offset of another topic is another message.
	if _, ack := push(t, srv.URL, "order.paid", 0, 1, message("order.paid", 0)); ack != "NACK" {
		t.Fatalf("other topic: got %q, want NACK", ack)
	}
}

func TestFailEvery(t *testing.T) {
	srv := httptest.NewServer(NewHandler(Config{FailEvery: 3}))
	defer srv.Close()

	for i := 1; i <= 9; i++ {
		code, ack := push(t, srv.URL, "order.created", i, 1, message("order.created", i))
		if i%3 == 0 {
			if code != http.StatusInternalServerError || ack != "" {
				t.Errorf("request %d: got %d %q, want 500", i, code, ack)
			}
			continue
		}
		if code != http.StatusOK || ack != "ACK" {
			t.Errorf("request %d: got %d %q, want 200 ACK", i, code, ack)
		}
	}
}

func TestBadRequests(t *testing.T) {
	srv := httptest.NewServer(NewHandler(Config{MaxBody: 64}))
	defer srv.Close()

	if code, _ := push(t, srv.URL, "t", 0, 1, "{not json"); code != http.StatusBadRequest {
		t.Errorf("bad JSON: got %d, want 400", code)
	}
	big := `{"content":"` + strings.Repeat("x", 100) + `"}`
	if code, _ := push(t, srv.URL, "t", 0, 1, big); code != http.StatusRequestEntityTooLarge {
		t.Errorf("big body: got %d, want 413", code)
	}
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: got %d, want 405", resp.StatusCode)
	}
}

func TestDelay(t *testing.T) {
	srv := httptest.NewServer(NewHandler(Config{Delay: 50 * time.Millisecond}))
	defer srv.Close()
	start := time.Now()
	if _, ack := push(t, srv.URL, "t", 0, 1, "{}"); ack != "ACK" {
		t.Fatalf("got %q, want ACK", ack)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("answered after %s, want >= 50ms", d)
	}
}

func TestRecordFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "got.jsonl")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(NewHandler(Config{Nack: 1, FailEvery: 4, Record: f}))

	// Concurrent topics, like a dispatcher with one worker per topic. Each
	// worker resends until ACK, as a dispatcher does.
	topics := []string{"order.created", "order.paid", "payment.authorized"}
	var wg sync.WaitGroup
	for _, topic := range topics {
		wg.Go(func() {
			for off := range 5 {
				for attempt := 1; attempt <= 10; attempt++ {
					code, ack := push(t, srv.URL, topic, off, attempt, message(topic, off))
					if code == 0 || code == http.StatusOK && ack == "ACK" {
						break
					}
				}
			}
		})
	}
	wg.Wait()
	srv.Close()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	acked := map[string][]int64{}
	answers := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var r Record
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("record %q: %v", sc.Text(), err)
		}
		answers[r.Answer]++
		if r.Dispatcher != "order-dispatcher" || r.Attempt < 1 || r.ID != fmt.Sprintf("evt-%06d", r.Offset+1) {
			t.Errorf("record fields: %+v", r)
		}
		var body struct {
			Topic struct {
				Name string `json:"name"`
			} `json:"topic"`
		}
		if err := json.Unmarshal(r.Body, &body); err != nil || body.Topic.Name != r.Topic {
			t.Errorf("record body %s does not match topic %s", r.Body, r.Topic)
		}
		if r.Answer == AnswerACK {
			acked[r.Topic] = append(acked[r.Topic], r.Offset)
		}
	}
	for _, topic := range topics {
		if got := fmt.Sprint(acked[topic]); got != "[0 1 2 3 4]" {
			t.Errorf("%s: ACKed offsets %s, want [0 1 2 3 4]", topic, got)
		}
	}
	if answers[AnswerACK] != 15 || answers[AnswerNACK] < 15 || answers[AnswerFail] == 0 {
		t.Errorf("answers %v: want 15 ACK, >= 15 NACK, some FAIL", answers)
	}
}

func TestContentOf(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"topic":{"name":"t"},"content": {"a" : [1, 2]}}`, `{"a":[1,2]}`},
		{`{"topic":{"name":"t"},"content":null}`, `null`},
		{`[1, 2]`, `[1,2]`},
		{`{"content":"` + strings.Repeat("y", 400) + `"}`, `"` + strings.Repeat("y", maxPrint-1) + "…"},
	} {
		if got := contentOf([]byte(tc.in)); got != tc.want {
			t.Errorf("contentOf(%.40s) = %.40s, want %.40s", tc.in, got, tc.want)
		}
	}
}

// TestSigned: with a Verifier, a signed push is handled as usual; a
// tampered, unsigned or stale one is answered 401 with the reason, recorded
// as UNSIGNED and not counted by -fail-every.
func TestSigned(t *testing.T) {
	secretText, err := webhooks.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	secret, err := webhooks.ParseSecret(secretText)
	if err != nil {
		t.Fatal(err)
	}
	signer := webhooks.NewSigner(secret)
	var out, rec syncBuffer
	srv := httptest.NewServer(NewHandler(Config{FailEvery: 2, Out: &out, Record: &rec,
		Verifier: webhooks.NewVerifier(0, secret)}))
	defer srv.Close()

	// sign returns a header editor signing body as of at, for message id.
	sign := func(id string, at time.Time, body string) func(http.Header) {
		return func(h http.Header) { signer.SetHeaders(h, id, at, []byte(body)) }
	}
	body0 := message("order.created", 0)
	code, ack, _ := pushWith(t, srv.URL, "order.created", 0, 1, body0, sign("evt-000001", time.Now(), body0))
	if code != http.StatusOK || ack != "ACK" {
		t.Fatalf("signed push: got %d %q, want 200 ACK", code, ack)
	}

	body1 := message("order.created", 1)
	tampered := strings.Replace(body1, "1001", "9999", 1)
	for _, tc := range []struct {
		name, body string
		edit       func(http.Header)
		reason     string
	}{
		{"tampered body", tampered, sign("evt-000002", time.Now(), body1), "webhooks: no matching signature"},
		{"unsigned", body1, nil, "webhooks: missing headers: webhook-id, webhook-timestamp, webhook-signature"},
		{"stale", body1, sign("evt-000002", time.Now().Add(-6*time.Minute), body1), "webhooks: timestamp too old"},
		{"not JSON", "{tampered", sign("evt-000002", time.Now(), body1), "webhooks: no matching signature"},
	} {
		code, ack, raw := pushWith(t, srv.URL, "order.created", 1, 1, tc.body, tc.edit)
		var answer struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal(raw, &answer); err != nil || code != http.StatusUnauthorized || ack != "" ||
			!strings.HasPrefix(answer.Error, tc.reason) {
			t.Errorf("%s: got %d %s, want 401 {\"error\":\"%s...\"}", tc.name, code, raw, tc.reason)
		}
	}
	// The 2nd well-formed push is the first -fail-every 2 fails: the
	// refused ones were not counted.
	code, _, _ = pushWith(t, srv.URL, "order.created", 1, 2, body1, sign("evt-000002", time.Now(), body1))
	if code != http.StatusInternalServerError {
		t.Errorf("second signed push: got %d, want 500 from -fail-every 2", code)
	}

	var answers []string
	sc := bufio.NewScanner(strings.NewReader(rec.String()))
	for sc.Scan() {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("record %q: %v", sc.Text(), err)
		}
		answers = append(answers, r.Answer)
		switch {
		case r.Answer == AnswerUnsigned && (r.Error == "" || r.Topic != "order.created" || r.Offset != 1):
			t.Errorf("UNSIGNED record without reason or headers: %s", sc.Text())
		case r.Answer == AnswerUnsigned && string(r.Body) != "null" && !jsonEqual(r.Body, tampered) && !jsonEqual(r.Body, body1):
			t.Errorf("UNSIGNED record body %s", r.Body)
		case r.Answer != AnswerUnsigned && r.Error != "":
			t.Errorf("%s record with an error: %s", r.Answer, sc.Text())
		}
	}
	if got := strings.Join(answers, " "); got != "ACK UNSIGNED UNSIGNED UNSIGNED UNSIGNED FAIL" {
		t.Errorf("recorded answers %s, want ACK, 4 UNSIGNED, FAIL", got)
	}
	if !strings.Contains(rec.String(), `"answer":"UNSIGNED","body":null,"error":`) {
		t.Errorf("the refused non-JSON body is not recorded as null:\n%s", rec.String())
	}
	if strings.Contains(out.String(), "UNSIGNED") || strings.Count(out.String(), "\n") != 2 {
		t.Errorf("printed lines (refusals are logged, not printed):\n%s", out.String())
	}
}

// jsonEqual reports whether raw is s compacted (the record file holds
// bodies compacted).
func jsonEqual(raw json.RawMessage, s string) bool {
	var b bytes.Buffer
	return json.Compact(&b, []byte(s)) == nil && b.String() == string(raw)
}

func TestSigningSecrets(t *testing.T) {
	a, _ := webhooks.NewSecret()
	b, _ := webhooks.NewSecret()
	fp := func(secrets []webhooks.Secret) string {
		var s []string
		for _, sec := range secrets {
			s = append(s, sec.Fingerprint())
		}
		return strings.Join(s, " ")
	}
	pa, _ := webhooks.ParseSecret(a)
	pb, _ := webhooks.ParseSecret(b)
	both := pa.Fingerprint() + " " + pb.Fingerprint()
	for _, tc := range []struct {
		name  string
		flags []string
		env   string
		want  string
	}{
		{"none", nil, "", ""},
		{"env", nil, a, pa.Fingerprint()},
		{"env, comma-separated with spaces", nil, " " + a + " , " + b + ",", both},
		{"flag repeated", []string{a, b}, "", both},
		{"flag comma-separated", []string{a + "," + b}, "", both},
		{"flag wins over env", []string{b}, a, pb.Fingerprint()},
	} {
		got, err := signingSecrets(tc.flags, tc.env)
		if err != nil || fp(got) != tc.want {
			t.Errorf("%s: got %q, %v; want %q", tc.name, fp(got), err, tc.want)
		}
	}
	bad := "whsec_" + strings.Repeat("Zm9v", 3) // 9 bytes: too short
	for _, tc := range []struct {
		flags []string
		env   string
		want  string
	}{
		{[]string{a, bad}, "", "-signing-secret: secret 2: webhooks: invalid secret: key is 9 bytes"},
		{nil, a + "," + strings.TrimPrefix(b, "whsec_"), "CONSUMER_SIGNING_SECRET: secret 2: webhooks: invalid secret: does not start"},
	} {
		_, err := signingSecrets(tc.flags, tc.env)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "Zm9v") ||
			strings.Contains(err.Error(), strings.TrimPrefix(b, "whsec_")[:10]) {
			t.Errorf("got %v, want an error starting %q without the secret", err, tc.want)
		}
	}
	// A -signing-secret given with nothing in it (an unset shell
	// variable) is a startup error, not signing off, even with the
	// environment variable set (the flag wins over it).
	for _, tc := range []struct {
		flags []string
		env   string
	}{
		{[]string{""}, ""},
		{[]string{""}, a},
		{[]string{" , "}, ""},
		{[]string{a, ""}, ""},
	} {
		got, err := signingSecrets(tc.flags, tc.env)
		if err == nil || !strings.HasPrefix(err.Error(), "-signing-secret is empty") ||
			!strings.Contains(err.Error(), "leave -signing-secret out") || strings.Contains(err.Error(), a) {
			t.Errorf("%q, env set %v: got %q, %v; want an error saying -signing-secret is empty and to leave it out", tc.flags, tc.env != "", fp(got), err)
		}
	}
	var l secretList
	_ = l.Set(a)
	if s := l.String(); strings.Contains(s, "whsec_") {
		t.Errorf("the flag prints %q", s)
	}
}

// newSigningKey is a fresh ed25519 signing key.
func newSigningKey(t *testing.T) webhooks.SigningKey {
	t.Helper()
	text, err := webhooks.NewSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	k, err := webhooks.ParseSigningKey(text)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestSignedPublicKey: with a KeyVerifier (-public-key) a push with a
// v1a signature by one of the keys (the second of a rotation too) is
// handled as usual; one signed by another key, with a tampered body,
// with a v1 (secret) signature only, or unsigned is answered 401 with the
// reason, as the -signing-secret check answers, and recorded as UNSIGNED.
func TestSignedPublicKey(t *testing.T) {
	old, current, other := newSigningKey(t), newSigningKey(t), newSigningKey(t)
	secretText, _ := webhooks.NewSecret()
	secret, err := webhooks.ParseSecret(secretText)
	if err != nil {
		t.Fatal(err)
	}
	var rec syncBuffer
	srv := httptest.NewServer(NewHandler(Config{Record: &rec,
		KeyVerifier: webhooks.NewPublicKeyVerifier(0, old.Public(), current.Public())}))
	defer srv.Close()
	sign := func(s *webhooks.Signer, id, body string) func(http.Header) {
		return func(h http.Header) { s.SetHeaders(h, id, time.Now(), []byte(body)) }
	}
	byKey := func(k webhooks.SigningKey) *webhooks.Signer {
		return webhooks.NewSignerWithKeys(nil, []webhooks.SigningKey{k})
	}

	for i, k := range []webhooks.SigningKey{current, old} {
		body := message("order.created", i)
		if code, ack, raw := pushWith(t, srv.URL, "order.created", i, 1, body, sign(byKey(k), fmt.Sprintf("evt-%06d", i+1), body)); code != http.StatusOK || ack != "ACK" {
			t.Fatalf("push signed by key %d of the rotation: got %d %s, want 200 ACK", i+1, code, raw)
		}
	}
	body := message("order.created", 2)
	tampered := strings.Replace(body, "1002", "9999", 1)
	for _, tc := range []struct {
		name, body string
		edit       func(http.Header)
		reason     string
	}{
		{"another key", body, sign(byKey(other), "evt-000003", body), "webhooks: no matching signature"},
		{"tampered body", tampered, sign(byKey(current), "evt-000003", body), "webhooks: no matching signature"},
		{"a v1 signature only", body, sign(webhooks.NewSigner(secret), "evt-000003", body), "webhooks: no matching signature"},
		{"unsigned", body, nil, "webhooks: missing headers"},
	} {
		code, ack, raw := pushWith(t, srv.URL, "order.created", 2, 1, tc.body, tc.edit)
		var answer struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal(raw, &answer); err != nil || code != http.StatusUnauthorized || ack != "" ||
			!strings.HasPrefix(answer.Error, tc.reason) {
			t.Errorf("%s: got %d %s, want 401 {\"error\":\"%s...\"}", tc.name, code, raw, tc.reason)
		}
	}
	if got := strings.Count(rec.String(), `"answer":"UNSIGNED"`); got != 4 {
		t.Errorf("%d UNSIGNED records, want 4:\n%s", got, rec.String())
	}
}

// TestSignedSecretAndPublicKey: with both checks a push must pass both:
// signed with the secret and the key it is accepted, with either alone
// refused 401.
func TestSignedSecretAndPublicKey(t *testing.T) {
	key := newSigningKey(t)
	secretText, _ := webhooks.NewSecret()
	secret, err := webhooks.ParseSecret(secretText)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(NewHandler(Config{Verifier: webhooks.NewVerifier(0, secret),
		KeyVerifier: webhooks.NewPublicKeyVerifier(0, key.Public())}))
	defer srv.Close()
	body := message("order.created", 0)
	for _, tc := range []struct {
		name   string
		signer *webhooks.Signer
		want   int
	}{
		{"secret and key", webhooks.NewSignerWithKeys([]webhooks.Secret{secret}, []webhooks.SigningKey{key}), http.StatusOK},
		{"secret only", webhooks.NewSigner(secret), http.StatusUnauthorized},
		{"key only", webhooks.NewSignerWithKeys(nil, []webhooks.SigningKey{key}), http.StatusUnauthorized},
	} {
		code, _, raw := pushWith(t, srv.URL, "order.created", 0, 1, body, func(h http.Header) {
			tc.signer.SetHeaders(h, "evt-000001", time.Now(), []byte(body))
		})
		if code != tc.want {
			t.Errorf("%s: got %d %s, want %d", tc.name, code, raw, tc.want)
		}
	}
}

// TestPublicKeys: -public-key values, repeated or comma-separated, and the
// errors naming the flag and the position of a bad key.
func TestPublicKeys(t *testing.T) {
	a, b := newSigningKey(t).Public(), newSigningKey(t).Public()
	kids := func(keys []webhooks.PublicKey) string {
		var s []string
		for _, k := range keys {
			s = append(s, k.KeyID())
		}
		return strings.Join(s, " ")
	}
	both := a.KeyID() + " " + b.KeyID()
	for _, tc := range []struct {
		name  string
		flags []string
		want  string
	}{
		{"none", nil, ""},
		{"one", []string{a.String()}, a.KeyID()},
		{"flag repeated", []string{a.String(), b.String()}, both},
		{"comma-separated with spaces", []string{" " + a.String() + " , " + b.String() + ","}, both},
	} {
		got, err := publicKeys(tc.flags)
		if err != nil || kids(got) != tc.want {
			t.Errorf("%s: got %q, %v; want %q", tc.name, kids(got), err, tc.want)
		}
	}
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{[]string{a.String(), "whpk_" + strings.Repeat("Zm9v", 3)}, "-public-key: key 2: webhooks: invalid key: public key is 9 bytes"},
		{[]string{strings.TrimPrefix(a.String(), "whpk_")}, "-public-key: key 1: webhooks: invalid key: does not start"},
		{[]string{newSigningKey(t).String()}, "-public-key: key 1: webhooks: invalid key: does not start"},
	} {
		if _, err := publicKeys(tc.flags); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want an error starting %q", tc.flags, err, tc.want)
		}
	}
	// A -public-key given with nothing in it is a startup error.
	for _, flags := range [][]string{{""}, {","}, {a.String(), " "}} {
		if got, err := publicKeys(flags); err == nil || !strings.HasPrefix(err.Error(), "-public-key is empty") ||
			!strings.Contains(err.Error(), "leave -public-key out") {
			t.Errorf("%q: got %q, %v; want an error saying -public-key is empty and to leave it out", flags, kids(got), err)
		}
	}
}
