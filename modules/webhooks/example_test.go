package webhooks_test

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"time"

	"github.com/mmmq/mmmq/modules/webhooks"
)

// The sending side, with the Standard Webhooks test vector.
func ExampleSigner_SetHeaders() {
	signer, err := webhooks.ParseSigner("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		log.Fatal(err)
	}
	body := []byte(`{"test": 2432232314}`)
	h := http.Header{}
	signer.SetHeaders(h, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), body)
	for _, k := range []string{webhooks.HeaderID, webhooks.HeaderTimestamp, webhooks.HeaderSignature} {
		fmt.Printf("%s: %s\n", k, h[k][0])
	}
	// Output:
	// webhook-id: msg_p5jXN8AQM9LWM0D4loKWxJek
	// webhook-timestamp: 1614265330
	// webhook-signature: v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=
}

// The receiving side: verify the raw body before decoding it.
func ExampleVerifier_Verify() {
	secret, err := webhooks.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		log.Fatal(err)
	}
	verifier := webhooks.NewVerifier(0, secret) // 0: 5 minutes
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 8<<20))
		if err != nil {
			http.Error(w, "read body", http.StatusBadRequest)
			return
		}
		if err := verifier.Verify(r.Header, body); err != nil {
			if errors.Is(err, webhooks.ErrTimestampTooOld) {
				log.Printf("old or replayed push: %v", err)
			}
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		// body is what the broker signed: decode and handle it.
	})
	_ = handler
	fmt.Println(secret) // secrets print redacted
	// Output: whsec_…(redacted, fingerprint f74e1720)
}

// v1a: the broker signs with a whsk_ key; the consumer verifies with the
// whpk_ public key GET /.well-known/mmmq/webhook-keys lists.
func ExampleNewPublicKeyVerifier() {
	key, err := webhooks.ParseSigningKey("whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk=")
	if err != nil {
		log.Fatal(err)
	}
	signer := webhooks.NewSignerWithKeys(nil, []webhooks.SigningKey{key})
	body := []byte(`{"test": 2432232314}`)
	h := http.Header{}
	signer.SetHeaders(h, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), body)

	pub, err := webhooks.ParsePublicKey("whpk_ZlN4eg7dSSqi0moX9hQUk3orrOouK3QVQSlJa248c/g=")
	if err != nil {
		log.Fatal(err)
	}
	v := webhooks.NewPublicKeyVerifier(0, pub)
	v.Now = func() time.Time { return time.Unix(1614265330, 0) }
	fmt.Println(signer.Sign("msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), body)) // the webhook-signature value
	fmt.Println(v.Verify(h, body), pub.KeyID(), key)
	// Output:
	// v1a,tQ9V2XOqn7jL/DQenEFpqIugdBVtiMmER5mhSkXBNwM0mkATuDe6KYYUuxqtaiHeYGb7KaaBRdM5WqyeFiL8Ag==
	// <nil> 808d1060236c20d2 whsk_…(redacted, kid 808d1060236c20d2)
}
