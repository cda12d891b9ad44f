package webhooks_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/webhooks"
)

// The Standard Webhooks test vector: the signing test of the specification
// repository's reference libraries (github.com/standard-webhooks/
// standard-webhooks, libraries/go/webhook_test.go TestWebhookSign; the Svix
// libraries test the same values). The expected signature was checked
// independently before it was written here:
//
//	python3 -c 'import hmac,hashlib,base64; k=base64.b64decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"); print(base64.b64encode(hmac.new(k, b"msg_p5jXN8AQM9LWM0D4loKWxJek.1614265330.{\"test\": 2432232314}", hashlib.sha256).digest()).decode())'
//	g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorUnix      = 1614265330
	vectorBody      = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func mustSecret(t testing.TB, s string) webhooks.Secret {
	t.Helper()
	sec, err := webhooks.ParseSecret(s)
	if err != nil {
		t.Fatalf("ParseSecret: %v", err)
	}
	return sec
}

func newSecret(t testing.TB) (string, webhooks.Secret) {
	t.Helper()
	s, err := webhooks.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	return s, mustSecret(t, s)
}

// fixedClock returns a clock stopped at unix seconds.
func fixedClock(unix int64) func() time.Time {
	return func() time.Time { return time.Unix(unix, 0) }
}

func TestSpecVector(t *testing.T) {
	signer := webhooks.NewSigner(mustSecret(t, vectorSecret))
	// The nanoseconds are dropped: only whole seconds are signed.
	ts := time.Unix(vectorUnix, 999_999_999)
	if got := signer.Sign(vectorID, ts, []byte(vectorBody)); got != vectorSignature {
		t.Fatalf("Sign = %s, want %s", got, vectorSignature)
	}

	h := http.Header{}
	h.Set("Webhook-Id", vectorID)
	h.Set("Webhook-Timestamp", strconv.Itoa(vectorUnix))
	h.Set("Webhook-Signature", vectorSignature)
	v := webhooks.NewVerifier(0, mustSecret(t, vectorSecret))
	v.Now = fixedClock(vectorUnix + 10)
	if err := v.Verify(h, []byte(vectorBody)); err != nil {
		t.Fatalf("Verify of the spec vector: %v", err)
	}
}

func TestSetHeaders(t *testing.T) {
	signer := webhooks.NewSigner(mustSecret(t, vectorSecret))
	req, err := http.NewRequest(http.MethodPost, "http://consumer.example/mmmq/messages", strings.NewReader(vectorBody))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Webhook-Id", "stale") // must not go out a second time
	signer.SetHeaders(req.Header, vectorID, time.Unix(vectorUnix, 0), []byte(vectorBody))
	for k, want := range map[string]string{
		webhooks.HeaderID:        vectorID,
		webhooks.HeaderTimestamp: "1614265330",
		webhooks.HeaderSignature: vectorSignature,
	} {
		if got := req.Header[k]; len(got) != 1 || got[0] != want {
			t.Errorf("h[%q] = %q, want [%q]", k, got, want)
		}
	}
	if _, ok := req.Header["Webhook-Id"]; ok {
		t.Errorf("canonical Webhook-Id still set: %v", req.Header)
	}
	wire, err := httputil.DumpRequestOut(req, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"\r\nwebhook-id: " + vectorID + "\r\n",
		"\r\nwebhook-timestamp: 1614265330\r\n",
		"\r\nwebhook-signature: " + vectorSignature + "\r\n",
	} {
		if !strings.Contains(string(wire), line) {
			t.Errorf("request on the wire lacks %q:\n%s", strings.TrimSpace(line), wire)
		}
	}
	if strings.Count(strings.ToLower(string(wire)), "webhook-id:") != 1 {
		t.Errorf("webhook-id sent more than once:\n%s", wire)
	}
}

// signed returns headers for body signed by signer at unix seconds.
func signed(signer *webhooks.Signer, id string, unix int64, body []byte) http.Header {
	h := http.Header{}
	signer.SetHeaders(h, id, time.Unix(unix, 0), body)
	return h
}

func TestVerifyFailures(t *testing.T) {
	const now = 1_700_000_000
	_, sec := newSecret(t)
	signer := webhooks.NewSigner(sec)
	body := []byte(`{"topic":{"name":"order.created"},"content":{"orderId":42}}`)
	good := func() http.Header { return signed(signer, "msg_1", now, body) }
	sigFor := func(id string, unix int64, b []byte) string { return signer.Sign(id, time.Unix(unix, 0), b) }
	_, other := newSecret(t)
	otherSig := webhooks.NewSigner(other).Sign("msg_1", time.Unix(now, 0), body)

	for _, tc := range []struct {
		name string
		edit func(h http.Header) []byte // changes h, returns the body to verify
		want error                      // nil: accepted
	}{
		{"untouched", func(http.Header) []byte { return body }, nil},
		{"canonical header names", func(h http.Header) []byte {
			for _, k := range []string{webhooks.HeaderID, webhooks.HeaderTimestamp, webhooks.HeaderSignature} {
				h.Set(k, h[k][0])
				delete(h, k)
			}
			return body
		}, nil},
		{"odd header case", func(h http.Header) []byte {
			h["WEBHOOK-signature"] = h[webhooks.HeaderSignature]
			delete(h, webhooks.HeaderSignature)
			return body
		}, nil},
		{"tampered body", func(http.Header) []byte {
			return []byte(strings.Replace(string(body), "42", "43", 1))
		}, webhooks.ErrNoMatchingSignature},
		{"body with a trailing newline", func(http.Header) []byte { return append(append([]byte{}, body...), '\n') }, webhooks.ErrNoMatchingSignature},
		{"body re-encoded with spaces", func(http.Header) []byte {
			return []byte(strings.ReplaceAll(string(body), ":", ": "))
		}, webhooks.ErrNoMatchingSignature},
		{"tampered id", func(h http.Header) []byte { h[webhooks.HeaderID] = []string{"msg_2"}; return body }, webhooks.ErrNoMatchingSignature},
		{"tampered timestamp", func(h http.Header) []byte {
			h[webhooks.HeaderTimestamp] = []string{strconv.Itoa(now + 1)}
			return body
		}, webhooks.ErrNoMatchingSignature},
		{"timestamp with leading zero", func(h http.Header) []byte {
			h[webhooks.HeaderTimestamp] = []string{"0" + strconv.Itoa(now)}
			return body
		}, nil}, // the same number; the decimal value is signed, as the reference libraries do
		{"stale timestamp", func(h http.Header) []byte {
			ts := now - 5*60 - 1
			h[webhooks.HeaderTimestamp] = []string{strconv.Itoa(ts)}
			h[webhooks.HeaderSignature] = []string{sigFor("msg_1", int64(ts), body)}
			return body
		}, webhooks.ErrTimestampTooOld},
		{"timestamp too far in the future", func(h http.Header) []byte {
			ts := now + 5*60 + 1
			h[webhooks.HeaderTimestamp] = []string{strconv.Itoa(ts)}
			h[webhooks.HeaderSignature] = []string{sigFor("msg_1", int64(ts), body)}
			return body
		}, webhooks.ErrTimestampTooNew},
		{"timestamp exactly tolerance old", func(h http.Header) []byte {
			ts := now - 5*60
			h[webhooks.HeaderTimestamp] = []string{strconv.Itoa(ts)}
			h[webhooks.HeaderSignature] = []string{sigFor("msg_1", int64(ts), body)}
			return body
		}, nil},
		{"timestamp exactly tolerance ahead", func(h http.Header) []byte {
			ts := now + 5*60
			h[webhooks.HeaderTimestamp] = []string{strconv.Itoa(ts)}
			h[webhooks.HeaderSignature] = []string{sigFor("msg_1", int64(ts), body)}
			return body
		}, nil},
		{"timestamp not a number", func(h http.Header) []byte { h[webhooks.HeaderTimestamp] = []string{"soon"}; return body }, webhooks.ErrInvalidTimestamp},
		{"timestamp in milliseconds is too new", func(h http.Header) []byte {
			h[webhooks.HeaderTimestamp] = []string{strconv.Itoa(now * 1000)}
			return body
		}, webhooks.ErrTimestampTooNew},
		{"timestamp with a sign", func(h http.Header) []byte {
			h[webhooks.HeaderTimestamp] = []string{"+" + strconv.Itoa(now)}
			return body
		}, webhooks.ErrInvalidTimestamp},
		{"timestamp with a fraction", func(h http.Header) []byte {
			h[webhooks.HeaderTimestamp] = []string{strconv.Itoa(now) + ".5"}
			return body
		}, webhooks.ErrInvalidTimestamp},
		{"timestamp overflowing int64", func(h http.Header) []byte {
			h[webhooks.HeaderTimestamp] = []string{strings.Repeat("9", 30)}
			return body
		}, webhooks.ErrInvalidTimestamp},
		{"missing id", func(h http.Header) []byte { delete(h, webhooks.HeaderID); return body }, webhooks.ErrMissingHeaders},
		{"empty id", func(h http.Header) []byte { h[webhooks.HeaderID] = []string{""}; return body }, webhooks.ErrMissingHeaders},
		{"missing timestamp", func(h http.Header) []byte { delete(h, webhooks.HeaderTimestamp); return body }, webhooks.ErrMissingHeaders},
		{"missing signature", func(h http.Header) []byte { delete(h, webhooks.HeaderSignature); return body }, webhooks.ErrMissingHeaders},
		{"blank signature", func(h http.Header) []byte { h[webhooks.HeaderSignature] = []string{"  "}; return body }, webhooks.ErrMissingHeaders},
		{"no headers at all", func(h http.Header) []byte { clear(h); return body }, webhooks.ErrMissingHeaders},
		{"signature of another secret", func(h http.Header) []byte { h[webhooks.HeaderSignature] = []string{otherSig}; return body }, webhooks.ErrNoMatchingSignature},
		{"garbage entries only", func(h http.Header) []byte {
			h[webhooks.HeaderSignature] = []string{"v1 v1, v1,!!!! ,,, v1,AAAA v1,====" + " v1," + strings.Repeat("A", 44) + " v1," + strings.Repeat("A", 100)}
			return body
		}, webhooks.ErrNoMatchingSignature},
		{"garbage entries around the good one", func(h http.Header) []byte {
			h[webhooks.HeaderSignature] = []string{"v1,!!!! " + otherSig + "  junk " + h[webhooks.HeaderSignature][0] + " v1,"}
			return body
		}, nil},
		{"good signature under v2 is ignored", func(h http.Header) []byte {
			//lint:ignore SA1008 SetHeaders writes webhook-signature under its raw lower-case key (the wire spelling), so that is the key to read
			good := strings.TrimPrefix(h[webhooks.HeaderSignature][0], "v1,")
			h[webhooks.HeaderSignature] = []string{"v2," + good + " v1a," + good + " V1," + good + " ," + good + " " + good}
			return body
		}, webhooks.ErrNoMatchingSignature},
		{"v2 entry beside the good v1", func(h http.Header) []byte {
			h[webhooks.HeaderSignature] = []string{"v2,whatever " + h[webhooks.HeaderSignature][0]}
			return body
		}, nil},
		{"good signature in a second header line", func(h http.Header) []byte {
			h[webhooks.HeaderSignature] = []string{otherSig, h[webhooks.HeaderSignature][0]}
			return body
		}, nil},
		{"signature without padding", func(h http.Header) []byte {
			h[webhooks.HeaderSignature] = []string{strings.TrimSuffix(h[webhooks.HeaderSignature][0], "=")}
			return body
		}, webhooks.ErrNoMatchingSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := webhooks.NewVerifier(0, sec)
			v.Now = fixedClock(now)
			h := good()
			err := v.Verify(h, tc.edit(h))
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("Verify = %v, want %v", err, tc.want)
			case err != nil && !strings.HasPrefix(err.Error(), "webhooks: "):
				t.Errorf("error %q lacks the package prefix", err)
			}
		})
	}
}

// TestVerifySignatureEncoding: only standard base64 with padding is a
// signature; the spec vector's signature holds both + and /.
func TestVerifySignatureEncoding(t *testing.T) {
	v := webhooks.NewVerifier(0, mustSecret(t, vectorSecret))
	v.Now = fixedClock(vectorUnix)
	sig := strings.TrimPrefix(vectorSignature, "v1,")
	raw, err := base64.StdEncoding.DecodeString(sig)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		sig  string
		want error
	}{
		{"v1," + sig, nil},
		{"v1," + base64.URLEncoding.EncodeToString(raw), webhooks.ErrNoMatchingSignature},
		{"v1," + base64.RawStdEncoding.EncodeToString(raw), webhooks.ErrNoMatchingSignature},
		{"v1," + strings.ToLower(sig), webhooks.ErrNoMatchingSignature},
		{"v1,," + sig, webhooks.ErrNoMatchingSignature},
		{"v1, " + sig, webhooks.ErrNoMatchingSignature},
	} {
		h := http.Header{"Webhook-Id": {vectorID}, "Webhook-Timestamp": {strconv.Itoa(vectorUnix)}, "Webhook-Signature": {tc.sig}}
		if err := v.Verify(h, []byte(vectorBody)); tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("signature %q: Verify = %v, want %v", tc.sig, err, tc.want)
		}
	}
}

func TestVerifyMissingHeadersNamed(t *testing.T) {
	v := webhooks.NewVerifier(0, mustSecret(t, vectorSecret))
	err := v.Verify(http.Header{"Webhook-Timestamp": {"1"}}, nil)
	if want := "webhooks: missing headers: webhook-id, webhook-signature"; err == nil || err.Error() != want {
		t.Fatalf("Verify = %v, want %s", err, want)
	}
}

func TestTolerance(t *testing.T) {
	const now = 1_700_000_000
	sec := mustSecret(t, vectorSecret)
	signer := webhooks.NewSigner(sec)
	if got := webhooks.NewVerifier(0, sec).Tolerance(); got != 5*time.Minute {
		t.Fatalf("default tolerance %s, want 5m", got)
	}
	v := webhooks.NewVerifier(30*time.Second, sec)
	v.Now = func() time.Time { return time.Unix(now, 999_000_000) } // whole seconds are compared
	for _, tc := range []struct {
		offset int64
		want   error
	}{
		{0, nil}, {-30, nil}, {30, nil},
		{-31, webhooks.ErrTimestampTooOld}, {31, webhooks.ErrTimestampTooNew},
		{-now, webhooks.ErrTimestampTooOld}, // the epoch
	} {
		err := v.Verify(signed(signer, "msg_1", now+tc.offset, nil), nil)
		if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("offset %+ds: Verify = %v, want %v", tc.offset, err, tc.want)
		}
	}
	// Errors say by how much and what the tolerance is.
	err := v.Verify(signed(signer, "msg_1", now-90, nil), nil)
	if want := "webhooks: timestamp too old: sent at 2023-11-14T22:11:50Z, 1m30s before this clock (tolerance 30s)"; err == nil || err.Error() != want {
		t.Errorf("Verify = %v\nwant %s", err, want)
	}
}

func TestRotation(t *testing.T) {
	const now = 1_700_000_000
	_, oldSec := newSecret(t)
	_, newSec := newSecret(t)
	body := []byte(`{"content":"rotate"}`)
	at := func(v *webhooks.Verifier) *webhooks.Verifier { v.Now = fixedClock(now); return v }

	onlyNew := at(webhooks.NewVerifier(0, newSec))
	onlyOld := at(webhooks.NewVerifier(0, oldSec))
	both := at(webhooks.NewVerifier(0, oldSec, newSec))

	oldSigner := webhooks.NewSigner(oldSec)
	if err := onlyNew.Verify(signed(oldSigner, "m", now, body), body); !errors.Is(err, webhooks.ErrNoMatchingSignature) {
		t.Errorf("signed with the rotated-out secret only, verifier has the new one: %v, want ErrNoMatchingSignature", err)
	}
	if err := both.Verify(signed(oldSigner, "m", now, body), body); err != nil {
		t.Errorf("signed with the old secret, verifier has old and new: %v", err)
	}

	rotating := webhooks.NewSigner(newSec, oldSec)
	h := signed(rotating, "m", now, body)
	//lint:ignore SA1008 SetHeaders writes webhook-signature under its raw lower-case key (the wire spelling), so that is the key to read
	if sig := h[webhooks.HeaderSignature][0]; len(strings.Split(sig, " ")) != 2 || !strings.HasPrefix(sig, "v1,") || strings.Contains(sig, "  ") {
		t.Fatalf("two secrets: signature header %q, want two v1 entries separated by one space", sig)
	}
	for name, v := range map[string]*webhooks.Verifier{"new": onlyNew, "old": onlyOld, "both": both} {
		if err := v.Verify(h, body); err != nil {
			t.Errorf("signer with new and old, verifier with %s: %v", name, err)
		}
	}
	// Each entry is the one-secret signature, in the order given.
	want := webhooks.NewSigner(newSec).Sign("m", time.Unix(now, 0), body) + " " + oldSigner.Sign("m", time.Unix(now, 0), body)
	//lint:ignore SA1008 SetHeaders writes webhook-signature under its raw lower-case key (the wire spelling), so that is the key to read
	if got := h[webhooks.HeaderSignature][0]; got != want {
		t.Errorf("signature %q, want %q", got, want)
	}
	if got, want := rotating.Fingerprints(), []string{newSec.Fingerprint(), oldSec.Fingerprint()}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Fingerprints = %v, want %v", got, want)
	}
}

func TestParseSecret(t *testing.T) {
	b64 := func(n int) string { return base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", n))) }
	for _, tc := range []struct {
		name, in, msg string // msg: a part of the error, "" when accepted
	}{
		{"spec vector", vectorSecret, ""},
		{"24 bytes", "whsec_" + b64(24), ""},
		{"64 bytes", "whsec_" + b64(64), ""},
		{"no prefix", strings.TrimPrefix(vectorSecret, "whsec_"), `does not start with "whsec_"`},
		{"other prefix", "whsk_" + b64(32), `does not start with "whsec_"`},
		{"upper-case prefix", "WHSEC_" + b64(32), `does not start with "whsec_"`},
		{"empty", "", `does not start with "whsec_"`},
		{"prefix only", "whsec_", "empty key"},
		{"bad base64", "whsec_MfKQ9r8GKYqrTwjUPD8I!PZIo2LaLaSw", "not standard base64"},
		{"URL-safe alphabet", "whsec_" + strings.NewReplacer("+", "-", "/", "_").Replace(base64.StdEncoding.EncodeToString([]byte{0xfb, 0xff, 0xfe, 0xfb, 0xff, 0xfe, 0xfb, 0xff, 0xfe, 0xfb, 0xff, 0xfe, 0xfb, 0xff, 0xfe, 0xfb, 0xff, 0xfe, 0xfb, 0xff, 0xfe, 0xfb, 0xff, 0xfe})), "not standard base64"},
		{"missing padding", "whsec_" + strings.TrimRight(b64(32), "="), "not standard base64"},
		{"space inside", "whsec_MfKQ9r8GKYqrTwjU PD8ILPZIo2LaLaSw", "not standard base64"},
		{"surrounding space", " " + vectorSecret, `does not start with "whsec_"`},
		{"trailing space", vectorSecret + " ", "not standard base64"},
		{"trailing newline", vectorSecret + "\n", "line break at character 32"},
		{"CRLF inside", "whsec_MfKQ9r8GKYqrTwjU\r\nPD8ILPZIo2LaLaSw", "line break at character 16"},
		{"too short", "whsec_" + b64(23), "key is 23 bytes, want 24 to 64"},
		{"much too short", "whsec_" + b64(1), "key is 1 bytes, want 24 to 64"},
		{"too long", "whsec_" + b64(65), "key is 65 bytes, want 24 to 64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := webhooks.ParseSecret(tc.in)
			if tc.msg == "" {
				if err != nil || s.IsZero() || len(s.Fingerprint()) != 8 {
					t.Fatalf("ParseSecret: %v (fingerprint %q)", err, s.Fingerprint())
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted, want an error containing %q", tc.msg)
			}
			if !errors.Is(err, webhooks.ErrInvalidSecret) || !strings.Contains(err.Error(), tc.msg) || !strings.HasPrefix(err.Error(), "webhooks: invalid secret: ") {
				t.Errorf("error %q: want ErrInvalidSecret containing %q", err, tc.msg)
			}
			if !s.IsZero() {
				t.Errorf("a refused secret is not the zero Secret")
			}
			// No run of 6 characters of the key text shows in the error.
			key := strings.TrimPrefix(strings.TrimSpace(tc.in), "whsec_")
			key = strings.TrimPrefix(key, "WHSEC_")
			key = strings.TrimPrefix(key, "whsk_")
			for i := 0; i+6 <= len(key); i++ {
				if strings.Contains(err.Error(), key[i:i+6]) {
					t.Fatalf("error %q contains secret text %q", err, key[i:i+6])
				}
			}
		})
	}
}

func TestFingerprint(t *testing.T) {
	// The first 8 hex digits of SHA-256 of the decoded key, checked with
	// python3 -c 'import hashlib,base64; print(hashlib.sha256(base64.b64decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")).hexdigest()[:8])'
	if got := mustSecret(t, vectorSecret).Fingerprint(); got != "f74e1720" {
		t.Errorf("Fingerprint = %s, want f74e1720", got)
	}
	if got := (webhooks.Secret{}).Fingerprint(); got != "" {
		t.Errorf("zero Secret: Fingerprint = %q, want empty", got)
	}
}

func TestSecretNeverPrinted(t *testing.T) {
	text, sec := newSecret(t)
	key := strings.TrimPrefix(text, "whsec_")
	raw, _ := base64.StdEncoding.DecodeString(key)
	holder := struct {
		Name   string
		secret webhooks.Secret
		Public webhooks.Secret
		list   []webhooks.Secret
	}{"d", sec, sec, []webhooks.Secret{sec}}
	signer := webhooks.NewSigner(sec)
	verifier := webhooks.NewVerifier(0, sec)
	out := fmt.Sprintf("%v %+v %#v %s", sec, sec, sec, sec) +
		fmt.Sprintf("|%q %x %X %d %10.3v %T|", sec, sec, sec, sec, sec, sec) +
		fmt.Sprintf("|%v %+v %#v|", &sec, holder, holder) +
		fmt.Sprintf("|%v %+v %#v %+v %#v|", signer, signer, *signer, verifier, *verifier) +
		fmt.Sprint(sec, []webhooks.Secret{sec}, map[string]webhooks.Secret{"k": sec}) +
		sec.String() + sec.GoString()

	want := "whsec_…(redacted, fingerprint " + sec.Fingerprint() + ")"
	if got := fmt.Sprintf("%v", sec); got != want {
		t.Errorf("%%v = %q, want %q", got, want)
	}
	for _, leak := range []string{key, key[:8], fmt.Sprintf("%x", raw[:6]), fmt.Sprintf("%X", raw[:6]), fmt.Sprint(raw[:4])[1:12]} {
		if strings.Contains(out, leak) {
			t.Fatalf("formatted output contains key material %q:\n%s", leak, out)
		}
	}
	if got := fmt.Sprint(webhooks.Secret{}); got != "whsec_…(none)" {
		t.Errorf("zero Secret prints %q", got)
	}
}

func TestNewSecret(t *testing.T) {
	seen := map[string]bool{}
	for range 50 {
		s, err := webhooks.NewSecret()
		if err != nil {
			t.Fatal(err)
		}
		raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
		if !strings.HasPrefix(s, "whsec_") || err != nil || len(raw) != 32 || len(s) != 50 {
			t.Fatalf("NewSecret = %d characters, %d bytes, err %v; want whsec_ + 32 bytes in 50 characters", len(s), len(raw), err)
		}
		if seen[s] {
			t.Fatal("NewSecret repeated a secret")
		}
		seen[s] = true
		mustSecret(t, s)
	}
}

func TestParseSigner(t *testing.T) {
	signer, err := webhooks.ParseSigner(vectorSecret)
	if err != nil {
		t.Fatal(err)
	}
	if got := signer.Sign(vectorID, time.Unix(vectorUnix, 0), []byte(vectorBody)); got != vectorSignature {
		t.Errorf("Sign = %s, want %s", got, vectorSignature)
	}
	if _, err := webhooks.ParseSigner(); !errors.Is(err, webhooks.ErrInvalidSecret) {
		t.Errorf("no secrets: %v, want ErrInvalidSecret", err)
	}
	_, err = webhooks.ParseSigner(vectorSecret, "whsec_c2hvcnQ=")
	if !errors.Is(err, webhooks.ErrInvalidSecret) || !strings.HasPrefix(err.Error(), "secret 2 of 2: webhooks: invalid secret: key is 5 bytes") || strings.Contains(err.Error(), "c2hvcnQ") {
		t.Errorf("bad second secret: %v", err)
	}
}

func TestConstructorsPanic(t *testing.T) {
	sec := mustSecret(t, vectorSecret)
	for name, f := range map[string]func(){
		"NewSigner()":                   func() { webhooks.NewSigner() },
		"NewSigner(zero)":               func() { webhooks.NewSigner(sec, webhooks.Secret{}) },
		"NewVerifier(0)":                func() { webhooks.NewVerifier(0) },
		"NewVerifier(0, zero)":          func() { webhooks.NewVerifier(0, webhooks.Secret{}) },
		"NewVerifier(negative, secret)": func() { webhooks.NewVerifier(-time.Second, sec) },
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.HasPrefix(fmt.Sprint(r), "webhooks: ") {
					t.Errorf("%s: recovered %v, want a webhooks: panic", name, r)
				}
			}()
			f()
		}()
	}
}

// TestConcurrentSign signs and verifies from many goroutines (run with
// -race): pooled hash states must never be shared.
func TestConcurrentSign(t *testing.T) {
	_, a := newSecret(t)
	_, b := newSecret(t)
	signer := webhooks.NewSigner(a, b)
	v := webhooks.NewVerifier(time.Hour, b)
	bodies := make([][]byte, 16)
	want := make([]string, len(bodies))
	now := time.Now()
	for i := range bodies {
		bodies[i] = []byte(strings.Repeat(strconv.Itoa(i), 100*i))
		want[i] = signer.Sign("msg_"+strconv.Itoa(i), now, bodies[i])
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for n := range 500 {
				i := (g + n) % len(bodies)
				id := "msg_" + strconv.Itoa(i)
				if got := signer.Sign(id, now, bodies[i]); got != want[i] {
					t.Errorf("goroutine %d: Sign(%s) = %s, want %s", g, id, got, want[i])
					return
				}
				if err := v.Verify(signed(signer, id, now.Unix(), bodies[i]), bodies[i]); err != nil {
					t.Errorf("goroutine %d: Verify: %v", g, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkSign(b *testing.B) {
	signer := webhooks.NewSigner(mustSecret(b, vectorSecret))
	body := []byte(strings.Repeat("x", 1024))
	ts := time.Unix(vectorUnix, 0)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		signer.Sign(vectorID, ts, body)
	}
}

func BenchmarkVerify(b *testing.B) {
	sec := mustSecret(b, vectorSecret)
	body := []byte(strings.Repeat("x", 1024))
	h := signed(webhooks.NewSigner(sec), vectorID, vectorUnix, body)
	v := webhooks.NewVerifier(0, sec)
	v.Now = fixedClock(vectorUnix)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := v.Verify(h, body); err != nil {
			b.Fatal(err)
		}
	}
}
