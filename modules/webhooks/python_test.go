package webhooks_test

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/webhooks"
)

// pythonScript is an independent implementation of the scheme with
// Python's hmac, hashlib and base64 modules. It reads {"secrets": [...],
// "cases": [{"id", "ts", "body"}]} (body in base64) on stdin and writes
// {"sigs": [...], "own": {...}}: for each case the webhook-signature value
// for all secrets, and a push it signed itself (its own id, its own clock,
// a body of random bytes with newlines and bytes that are not UTF-8).
const pythonScript = `
import base64, hashlib, hmac, json, os, secrets, sys, time

def key(s):
    assert s.startswith("whsec_")
    return base64.b64decode(s[len("whsec_"):], validate=True)

def sign(keys, msg_id, ts, body):
    signed = msg_id.encode("utf-8") + b"." + str(ts).encode("ascii") + b"." + body
    return " ".join("v1," + base64.b64encode(hmac.new(k, signed, hashlib.sha256).digest()).decode("ascii") for k in keys)

req = json.load(sys.stdin)
keys = [key(s) for s in req["secrets"]]
sigs = [sign(keys, c["id"], c["ts"], base64.b64decode(c["body"])) for c in req["cases"]]
own_id = "msg_" + secrets.token_urlsafe(18).replace(".", "")
own_ts = int(time.time())
own_body = os.urandom(300) + b"\n\xff\xfe\r\n" + b'{"caf\xc3\xa9": "\x80"}\n'
json.dump({"sigs": sigs, "own": {"id": own_id, "ts": own_ts, "body": base64.b64encode(own_body).decode("ascii"),
           "signature": sign(keys, own_id, own_ts, own_body)}}, sys.stdout)
`

type pyCase struct {
	ID   string `json:"id"`
	TS   int64  `json:"ts"`
	Body []byte `json:"body"` // base64 in JSON
}

// TestAgainstPython compares Sign with the Python implementation on random
// ids, timestamps and bodies for two secrets, and verifies a push Python
// signed. It needs python3 on PATH and fails without it.
func TestAgainstPython(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 not found on PATH (%v): this test compares the signatures with an independent Python implementation and cannot run without it; install Python 3 or put it on PATH", err)
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>7))

	s1, sec1 := newSecret(t)
	s2, sec2 := newSecret(t)
	signer := webhooks.NewSigner(sec1, sec2)

	cases := []pyCase{
		{ID: vectorID, TS: vectorUnix, Body: []byte(vectorBody)},
		{ID: "msg_empty_body", TS: 0, Body: []byte{}},
		{ID: "msg_nl", TS: 1, Body: []byte("{\n  \"a\": 1\n}\n")},
		{ID: "msg_crlf", TS: 9_999_999_999, Body: []byte("line1\r\nline2\r\n\r\n")},
		{ID: "msg_bin", TS: 1_700_000_000, Body: []byte{0xff, 0xfe, 0x00, '\n', 0x80, 0xc3, 0x28, '.', 0x00}},
	}
	idRunes := []rune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-:/\u00e9\u65e5\U0001F642")
	for range 200 {
		id := make([]rune, 1+rng.IntN(40))
		for i := range id {
			id[i] = idRunes[rng.IntN(len(idRunes))]
		}
		body := make([]byte, rng.IntN(2048))
		for i := range body {
			body[i] = byte(rng.Uint32())
		}
		for range rng.IntN(4) { // newlines at random places
			if len(body) > 0 {
				body[rng.IntN(len(body))] = '\n'
			}
		}
		cases = append(cases, pyCase{ID: string(id), TS: rng.Int64N(5_000_000_000), Body: body})
	}

	out := runPython(t, python, pythonScript, map[string]any{"secrets": []string{s1, s2}, "cases": cases})
	var res struct {
		Sigs []string `json:"sigs"`
		Own  struct {
			ID        string `json:"id"`
			TS        int64  `json:"ts"`
			Body      []byte `json:"body"`
			Signature string `json:"signature"`
		} `json:"own"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("python3 output %q: %v", out, err)
	}
	if len(res.Sigs) != len(cases) {
		t.Fatalf("python3 signed %d cases, want %d", len(res.Sigs), len(cases))
	}
	for i, c := range cases {
		// Sub-second parts are dropped by Sign.
		ts := time.Unix(c.TS, rng.Int64N(int64(time.Second)))
		if got := signer.Sign(c.ID, ts, c.Body); got != res.Sigs[i] {
			t.Errorf("case %d (id %q, ts %d, %d-byte body): Sign = %s, python3 = %s", i, c.ID, c.TS, len(c.Body), got, res.Sigs[i])
		}
	}

	// A push signed by Python, verified with each secret alone and with the
	// real clock.
	h := http.Header{}
	h.Set("Webhook-Id", res.Own.ID)
	h.Set("Webhook-Timestamp", strconv.FormatInt(res.Own.TS, 10))
	h.Set("Webhook-Signature", res.Own.Signature)
	for n, sec := range []webhooks.Secret{sec1, sec2} {
		if err := webhooks.NewVerifier(0, sec).Verify(h, res.Own.Body); err != nil {
			t.Errorf("secret %d: Verify of the push python3 signed: %v\nheaders %v", n+1, err, h)
		}
	}
	tampered := bytes.Clone(res.Own.Body)
	tampered[len(tampered)-1] ^= 1
	if err := webhooks.NewVerifier(0, sec1).Verify(h, tampered); err == nil {
		t.Errorf("Verify accepted the python3 push with its last body byte changed")
	}
}

// runPython runs script with python, in as JSON on its standard input, and
// returns what it wrote to standard output; a failure fails the test with
// its standard error.
func runPython(t *testing.T, python, script string, in any) []byte {
	t.Helper()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "-c", script)
	cmd.Stdin = bytes.NewReader(b)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3: %v\n%s", err, stderr.String())
	}
	return out
}
