// Package webhooks signs and verifies mmmq's HTTP pushes following the
// Standard Webhooks specification (https://www.standardwebhooks.com), the
// scheme Svix also uses, so a consumer can check that a push comes from the
// broker, was not changed on the way and is not an old one sent again. The
// package uses the standard library only and starts no goroutines.
//
// # What is signed
//
// Sender and consumer share a secret: 24 to 64 random bytes, written as
// "whsec_" followed by their standard base64 encoding (with padding), for
// example "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw". NewSecret makes one of
// 32 bytes; ParseSecret reads one. Every push carries three headers:
//
//	webhook-id: msg_p5jXN8AQM9LWM0D4loKWxJek
//	webhook-timestamp: 1614265330
//	webhook-signature: v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=
//
// webhook-id identifies the message and stays the same on every retry of
// it, so a consumer can drop duplicates by it. webhook-timestamp is the time
// of this attempt (not of the message) in decimal Unix seconds, new on every
// retry. webhook-signature is "v1," followed by the standard base64 of
//
//	HMAC-SHA256(key, webhook-id + "." + webhook-timestamp + "." + body)
//
// where key is the decoded secret and body is the request body byte for
// byte. The signature therefore covers the exact bytes sent: a consumer
// must verify the raw body it received, before decoding it; JSON that is
// decoded and encoded again rarely has the same bytes (spacing, key order,
// number formats) and fails. Other headers (mmmq-topic, mmmq-offset, ...)
// are not signed; trust what the body says.
//
// The id should not contain "." and must not be chosen by an untrusted
// party: "a.b" + "." + ts could otherwise be read as id "a", timestamp "b"
// and a body that starts with ts.
//
// # Key rotation
//
// webhook-signature holds one "v1," entry per sender secret, separated by
// single spaces. To replace a secret without refusing any push: give the
// sender both the new and the old secret (it signs with both), then give
// consumers the new one (a consumer with either secret accepts), then take
// the old secret away from the sender. A verifier may hold several secrets
// too and accepts a push when any entry matches any of them. Entries with
// another version prefix (for instance "v1a," for the specification's
// asymmetric signatures) are skipped, so senders can add schemes without
// breaking consumers.
//
// # Tolerance and replays
//
// Anyone who sees one signed push (a log, a proxy) could send it again, and
// its signature stays valid forever. Because the timestamp is signed, a
// verifier refuses a push whose webhook-timestamp is more than a tolerance
// away from its own clock, either way (default 5 minutes, as the
// specification suggests): a replay is only possible within that window,
// and a consumer that remembers the ids it saw over the window refuses those
// too. The tolerance also absorbs clock skew between sender and consumer and
// the time a push spends on the network; a sender retrying a message signs
// every attempt anew with the current time.
//
// # Sending
//
// The broker's dispatcher builds one Signer and, for each attempt:
//
//	signer.SetHeaders(req.Header, id, time.Now(), body)
//
// # Verifying, in a consumer
//
//	secret, err := webhooks.ParseSecret(os.Getenv("MMMQ_SIGNING_SECRET"))
//	if err != nil {
//		log.Fatal(err) // says what is wrong, never shows the secret
//	}
//	verifier := webhooks.NewVerifier(0, secret) // 0: 5 minutes
//	http.HandleFunc("/mmmq/messages", func(w http.ResponseWriter, r *http.Request) {
//		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 8<<20))
//		if err != nil {
//			http.Error(w, "read body", http.StatusBadRequest)
//			return
//		}
//		if err := verifier.Verify(r.Header, body); err != nil {
//			http.Error(w, err.Error(), http.StatusUnauthorized)
//			return
//		}
//		// body is authentic: decode and handle it
//	})
//
// Secrets print redacted ("whsec_…(redacted, fingerprint 1a2b3c4d)") with
// every fmt verb; Fingerprint tells them apart in logs.
package webhooks
