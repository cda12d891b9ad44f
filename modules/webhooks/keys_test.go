package webhooks_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/webhooks"
)

// The Standard Webhooks v1a vector: the asymmetric signing test of the
// specification repository's reference Go library
// (libraries/go/webhook_asymmetric_test.go TestAsymmetricWebhookSign): the
// 32-byte seed "TESTSIGNINGKEYDONOTUSETHISFORANY" in base64, the HMAC
// vector's id, timestamp and body, and the signature it expects. The
// public key was derived independently with Python's cryptography package
// (Ed25519PrivateKey.from_private_bytes(seed).public_key()).
const (
	edVectorKey       = "whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk="
	edVectorPublic    = "whpk_ZlN4eg7dSSqi0moX9hQUk3orrOouK3QVQSlJa248c/g="
	edVectorSignature = "v1a,tQ9V2XOqn7jL/DQenEFpqIugdBVtiMmER5mhSkXBNwM0mkATuDe6KYYUuxqtaiHeYGb7KaaBRdM5WqyeFiL8Ag=="
)

func mustKey(t testing.TB, s string) webhooks.SigningKey {
	t.Helper()
	k, err := webhooks.ParseSigningKey(s)
	if err != nil {
		t.Fatalf("ParseSigningKey: %v", err)
	}
	return k
}

func newKey(t testing.TB) (string, webhooks.SigningKey) {
	t.Helper()
	s, err := webhooks.NewSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	return s, mustKey(t, s)
}

func signedHeader(id string, unix int64, sig string) http.Header {
	h := http.Header{}
	h.Set("Webhook-Id", id)
	h.Set("Webhook-Timestamp", strconv.FormatInt(unix, 10))
	h.Set("Webhook-Signature", sig)
	return h
}

func TestEd25519SpecVector(t *testing.T) {
	k := mustKey(t, edVectorKey)
	if got := k.Public().String(); got != edVectorPublic {
		t.Fatalf("public key %s, want %s", got, edVectorPublic)
	}
	signer := webhooks.NewSignerWithKeys(nil, []webhooks.SigningKey{k})
	got := signer.Sign(vectorID, time.Unix(vectorUnix, 123), []byte(vectorBody))
	if got != edVectorSignature {
		t.Fatalf("Sign = %s, want %s", got, edVectorSignature)
	}
	pub, err := webhooks.ParsePublicKey(edVectorPublic)
	if err != nil {
		t.Fatal(err)
	}
	v := webhooks.NewPublicKeyVerifier(0, pub)
	v.Now = fixedClock(vectorUnix + 10)
	if err := v.Verify(signedHeader(vectorID, vectorUnix, edVectorSignature), []byte(vectorBody)); err != nil {
		t.Fatalf("Verify of the spec vector: %v", err)
	}
	// Any one byte of the signature flipped is refused.
	raw, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(edVectorSignature, "v1a,"))
	for i := range raw {
		bad := bytes.Clone(raw)
		bad[i] ^= 0x01
		sig := "v1a," + base64.StdEncoding.EncodeToString(bad)
		if err := v.Verify(signedHeader(vectorID, vectorUnix, sig), []byte(vectorBody)); !errors.Is(err, webhooks.ErrNoMatchingSignature) {
			t.Fatalf("signature byte %d flipped: Verify = %v, want ErrNoMatchingSignature", i, err)
		}
	}
	// The 64-byte form (seed || public key) is the same key.
	seed, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(edVectorKey, "whsk_"))
	long := ed25519.NewKeyFromSeed(seed)
	k64 := mustKey(t, "whsk_"+base64.StdEncoding.EncodeToString(long))
	if k64.KeyID() != k.KeyID() {
		t.Fatalf("64-byte form has kid %s, seed form %s", k64.KeyID(), k.KeyID())
	}
}

func TestSignMixedEntries(t *testing.T) {
	sec := mustSecret(t, vectorSecret)
	k := mustKey(t, edVectorKey)
	_, k2 := newKey(t)
	got := webhooks.NewSignerWithKeys([]webhooks.Secret{sec}, []webhooks.SigningKey{k, k2}).Sign(vectorID, time.Unix(vectorUnix, 0), []byte(vectorBody))
	entries := strings.Split(got, " ")
	if len(entries) != 3 || entries[0] != vectorSignature || entries[1] != edVectorSignature || !strings.HasPrefix(entries[2], "v1a,") {
		t.Fatalf("Sign = %q, want the v1 vector, the v1a vector and one more v1a entry, space-separated", got)
	}
	// Both verifiers find their own scheme among the others.
	h := signedHeader(vectorID, vectorUnix, got)
	v1 := webhooks.NewVerifier(0, sec)
	v1.Now = fixedClock(vectorUnix)
	va := webhooks.NewPublicKeyVerifier(0, k2.Public())
	va.Now = fixedClock(vectorUnix)
	for name, v := range map[string]*webhooks.Verifier{"v1": v1, "v1a": va} {
		if err := v.Verify(h, []byte(vectorBody)); err != nil {
			t.Errorf("%s verifier: %v", name, err)
		}
	}
	// A secret Verifier does not take a v1a entry, nor a key Verifier a v1
	// entry.
	onlyV1 := signedHeader(vectorID, vectorUnix, vectorSignature)
	if err := va.Verify(onlyV1, []byte(vectorBody)); !errors.Is(err, webhooks.ErrNoMatchingSignature) {
		t.Errorf("key verifier on a v1 entry: %v", err)
	}
}

func TestKeyRotation(t *testing.T) {
	_, oldKey := newKey(t)
	_, newK := newKey(t)
	body := []byte(`{"a":1}`)
	now := time.Now()
	both := webhooks.NewSignerWithKeys(nil, []webhooks.SigningKey{newK, oldKey}).Sign("msg_1", now, body)
	onlyNew := webhooks.NewSignerWithKeys(nil, []webhooks.SigningKey{newK}).Sign("msg_1", now, body)
	oldV := webhooks.NewPublicKeyVerifier(0, oldKey.Public())
	newV := webhooks.NewPublicKeyVerifier(0, newK.Public())
	for name, c := range map[string]struct {
		v    *webhooks.Verifier
		sig  string
		want bool
	}{
		"old consumer, both keys":       {oldV, both, true},
		"new consumer, both keys":       {newV, both, true},
		"new consumer, new key":         {newV, onlyNew, true},
		"old consumer, old key dropped": {oldV, onlyNew, false},
	} {
		err := c.v.Verify(signedHeader("msg_1", now.Unix(), c.sig), body)
		if (err == nil) != c.want {
			t.Errorf("%s: Verify = %v, want accepted %v", name, err, c.want)
		}
	}
}

func TestKeyRedactionAndErrors(t *testing.T) {
	s, k := newKey(t)
	enc := strings.TrimPrefix(s, "whsk_")
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%10.3s"} {
		for _, x := range []any{k, &k, struct{ K webhooks.SigningKey }{k}, []webhooks.SigningKey{k}} {
			out := fmt.Sprintf(verb, x)
			if strings.Contains(out, enc) || strings.Contains(out, enc[:12]) {
				t.Fatalf("%s of %T shows the key: %s", verb, x, out)
			}
		}
	}
	if want := "whsk_…(redacted, kid " + k.KeyID() + ")"; k.String() != want {
		t.Fatalf("String = %q, want %q", k.String(), want)
	}
	if len(k.KeyID()) != webhooks.KeyIDLen {
		t.Fatalf("KeyID %q", k.KeyID())
	}
	secretish := "c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0"
	for _, in := range []string{
		"", "whsec_" + secretish, "whsk_", "whsk_" + secretish + "!", "whsk_" + secretish,
		"whsk_" + base64.StdEncoding.EncodeToString(make([]byte, 31)), " whsk_" + secretish,
		"whsk_" + base64.StdEncoding.EncodeToString(append(make([]byte, 32), make([]byte, 32)...)),
	} {
		_, err := webhooks.ParseSigningKey(in)
		if !errors.Is(err, webhooks.ErrInvalidKey) {
			t.Fatalf("ParseSigningKey(%q) = %v, want ErrInvalidKey", in, err)
		}
		if strings.Contains(err.Error(), secretish[:10]) {
			t.Fatalf("ParseSigningKey error quotes the key: %v", err)
		}
	}
	if _, err := webhooks.ParsePublicKey("whpk_" + base64.StdEncoding.EncodeToString(make([]byte, 31))); !errors.Is(err, webhooks.ErrInvalidKey) {
		t.Fatalf("ParsePublicKey of 31 bytes: %v", err)
	}
	p, err := webhooks.ParsePublicKey(k.Public().String())
	if err != nil || p.KeyID() != k.KeyID() || !bytes.Equal(p.Ed25519(), k.Public().Ed25519()) {
		t.Fatalf("ParsePublicKey(String()) = %v, %v", p, err)
	}
}

// edPythonScript is an independent ed25519 implementation: Python's
// cryptography package (OpenSSL). It reads {"keys": [whsk_...], "cases":
// [{"id","ts","body"}], "go": [signature header per case]} on stdin and
// writes {"public": [whpk_ per key], "sigs": [header per case, v1a entries
// space-separated], "goVerified": [bool per case: every v1a entry of Go's
// header verifies under the key in its place], "own": a push it signed}.
const edPythonScript = `
import base64, json, os, sys, time
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives import serialization as ser
from cryptography.exceptions import InvalidSignature

def key(s):
    assert s.startswith("whsk_")
    return Ed25519PrivateKey.from_private_bytes(base64.b64decode(s[5:], validate=True))

req = json.load(sys.stdin)
keys = [key(s) for s in req["keys"]]
pubs = [k.public_key() for k in keys]
def text(c, body):
    return c["id"].encode("utf-8") + b"." + str(c["ts"]).encode("ascii") + b"." + body
def sign(msg):
    return " ".join("v1a," + base64.b64encode(k.sign(msg)).decode("ascii") for k in keys)
sigs, verified = [], []
for c, g in zip(req["cases"], req["go"]):
    msg = text(c, base64.b64decode(c["body"]))
    sigs.append(sign(msg))
    entries = g.split(" ")
    ok = len(entries) == len(pubs)
    for p, e in zip(pubs, entries):
        try:
            assert e.startswith("v1a,")
            p.verify(base64.b64decode(e[4:], validate=True), msg)
        except (InvalidSignature, AssertionError):
            ok = False
    verified.append(ok)
own = {"id": "msg_py" + os.urandom(6).hex(), "ts": int(time.time())}
own_body = os.urandom(200) + b"\n\xff\xfe\r\n"
own["body"] = base64.b64encode(own_body).decode("ascii")
own["signature"] = sign(text(own, own_body))
json.dump({"public": ["whpk_" + base64.b64encode(p.public_bytes(ser.Encoding.Raw, ser.PublicFormat.Raw)).decode("ascii") for p in pubs],
           "sigs": sigs, "goVerified": verified, "own": own}, sys.stdout)
`

// pythonWithCryptography returns a python3 that imports the cryptography
// package: the one on PATH, else Debian's /usr/bin/python3 (apt-get
// install python3-cryptography). It fails the test when there is none.
func pythonWithCryptography(t *testing.T) string {
	t.Helper()
	var tried []string
	cands := []string{"/usr/bin/python3"}
	if p, err := exec.LookPath("python3"); err == nil {
		cands = append([]string{p}, cands...)
	}
	for _, p := range cands {
		out, err := exec.Command(p, "-c", "import cryptography; print(cryptography.__version__)").CombinedOutput()
		if err == nil {
			t.Logf("%s with cryptography %s", p, strings.TrimSpace(string(out)))
			return p
		}
		tried = append(tried, fmt.Sprintf("%s: %v", p, err))
	}
	t.Fatalf("no python3 with the cryptography package (tried %s): this test compares v1a signatures with an independent implementation; apt-get install python3-cryptography", strings.Join(tried, "; "))
	return ""
}

// TestEd25519AgainstPython signs random pushes with two keys in Go and in
// Python's cryptography package: ed25519 is deterministic, so both must
// write the same header; Python verifies Go's signatures, Go verifies a
// push Python signed, and both derive the same public keys.
func TestEd25519AgainstPython(t *testing.T) {
	python := pythonWithCryptography(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>9))
	s1, k1 := newKey(t)
	s2, k2 := newKey(t)
	signer := webhooks.NewSignerWithKeys(nil, []webhooks.SigningKey{k1, k2})
	cases := []pyCase{
		{ID: vectorID, TS: vectorUnix, Body: []byte(vectorBody)},
		{ID: "msg_empty", TS: 0, Body: []byte{}},
		{ID: "msg_bin", TS: 1_700_000_000, Body: []byte{0xff, 0xfe, 0x00, '\n', 0x80, 0xc3, 0x28, '.', 0x00}},
	}
	for range 100 {
		body := make([]byte, rng.IntN(3000))
		for i := range body {
			body[i] = byte(rng.Uint32())
		}
		cases = append(cases, pyCase{ID: "msg_" + strconv.FormatUint(rng.Uint64(), 36) + "_\u00e9", TS: rng.Int64N(5_000_000_000), Body: body})
	}
	goSigs := make([]string, len(cases))
	for i, c := range cases {
		goSigs[i] = signer.Sign(c.ID, time.Unix(c.TS, 0), c.Body)
	}
	// One case where Go's header is wrong: Python must say so (the
	// comparison can fail).
	flipped := len(cases)
	cases = append(cases, cases[0])
	raw, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(strings.Fields(goSigs[0])[0], "v1a,"))
	raw[10] ^= 0x80
	goSigs = append(goSigs, "v1a,"+base64.StdEncoding.EncodeToString(raw)+" "+strings.Fields(goSigs[0])[1])

	out := runPython(t, python, edPythonScript, map[string]any{"keys": []string{s1, s2}, "cases": cases, "go": goSigs})
	var res struct {
		Public     []string `json:"public"`
		Sigs       []string `json:"sigs"`
		GoVerified []bool   `json:"goVerified"`
		Own        struct {
			ID        string `json:"id"`
			TS        int64  `json:"ts"`
			Body      []byte `json:"body"`
			Signature string `json:"signature"`
		} `json:"own"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("python3 output %q: %v", out, err)
	}
	if len(res.Public) != 2 || res.Public[0] != k1.Public().String() || res.Public[1] != k2.Public().String() {
		t.Fatalf("public keys: python3 %v, Go %s %s", res.Public, k1.Public(), k2.Public())
	}
	if len(res.Sigs) != len(cases) || len(res.GoVerified) != len(cases) {
		t.Fatalf("python3 answered %d/%d cases, want %d", len(res.Sigs), len(res.GoVerified), len(cases))
	}
	for i := range flipped {
		if res.Sigs[i] != goSigs[i] {
			t.Errorf("case %d: Go %s, python3 %s", i, goSigs[i], res.Sigs[i])
		}
		if !res.GoVerified[i] {
			t.Errorf("case %d: python3 did not verify Go's signatures %s", i, goSigs[i])
		}
	}
	if res.GoVerified[flipped] {
		t.Errorf("python3 verified a Go header with a flipped byte")
	}
	h := signedHeader(res.Own.ID, res.Own.TS, res.Own.Signature)
	for n, k := range []webhooks.SigningKey{k1, k2} {
		pub, err := webhooks.ParsePublicKey(res.Public[n])
		if err != nil {
			t.Fatal(err)
		}
		if err := webhooks.NewPublicKeyVerifier(0, pub).Verify(h, res.Own.Body); err != nil {
			t.Errorf("key %d (%s): Verify of the push python3 signed: %v", n+1, k.KeyID(), err)
		}
	}
	tampered := bytes.Clone(res.Own.Body)
	tampered[0] ^= 1
	if err := webhooks.NewPublicKeyVerifier(0, k1.Public()).Verify(h, tampered); err == nil {
		t.Errorf("Verify accepted the python3 push with its first body byte changed")
	}
}

// BenchmarkSignEd25519 is BenchmarkSign with one v1a key instead of a v1
// secret (1 KiB body).
func BenchmarkSignEd25519(b *testing.B) {
	signer := webhooks.NewSignerWithKeys(nil, []webhooks.SigningKey{mustKey(b, edVectorKey)})
	body := []byte(strings.Repeat("x", 1024))
	ts := time.Unix(vectorUnix, 0)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		signer.Sign(vectorID, ts, body)
	}
}

// BenchmarkVerifyEd25519 is BenchmarkVerify for a v1a entry.
func BenchmarkVerifyEd25519(b *testing.B) {
	k := mustKey(b, edVectorKey)
	body := []byte(strings.Repeat("x", 1024))
	sig := webhooks.NewSignerWithKeys(nil, []webhooks.SigningKey{k}).Sign(vectorID, time.Unix(vectorUnix, 0), body)
	h := signedHeader(vectorID, vectorUnix, sig)
	v := webhooks.NewPublicKeyVerifier(0, k.Public())
	v.Now = fixedClock(vectorUnix)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := v.Verify(h, body); err != nil {
			b.Fatal(err)
		}
	}
}
