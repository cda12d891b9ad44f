//go:build unix

package httpapi

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/auth"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// BenchmarkAuthCPU measures what a refused unauthenticated request costs
// the broker next to a successful publish: the real server on a loopback
// port (Start, net/http, the authentication middleware with the real
// auth.Store and Limiter, one token entry), the real registry on disk, one
// client sending one request at a time.
//
//   - refused-no-token: POST /messages, 200-byte content, no
//     Authorization: 401, and the connection closed (the body is not read),
//     so each request also pays a TCP connect and close.
//   - refused-wrong-token: the same with a well-formed unknown token (its
//     SHA-256 compared with the entry's).
//   - refused-get-no-token: GET /topics without a token: 401 on a
//     keep-alive connection (no body, nothing to close for).
//   - publish-durable: POST /messages?ack=durable with the valid token on
//     a keep-alive connection: 200 once fsynced.
//
// cpu-ns/req is the process's user + system CPU time (getrusage) per
// request: the client's share is in it too (same process), alike for the
// four; ns/op is wall time per request.
//
//	go test -run '^$' -bench AuthCPU -benchtime 2000x ./modules/httpapi/
func BenchmarkAuthCPU(b *testing.B) {
	token, digest := auth.NewToken()
	wrong, _ := auth.NewToken()
	store, err := auth.New(auth.Config{Tokens: []auth.TokenConfig{{
		Name: "bench", TokenSHA256: digest,
		Permissions: []auth.PermissionConfig{{Actions: []string{string(contract.ActionPublish), string(contract.ActionRead)}}},
	}}}, nil, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	reg := topicqueue.New(topicqueue.Options{Root: b.TempDir()})
	b.Cleanup(func() { _ = reg.Close() })
	s := New(Options{Addr: "127.0.0.1:0", Auth: AuthOptions{Authenticator: store, Limiter: auth.NewLimiter()}}, reg, nil, zap.NewNop())
	if err := s.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Stop(context.Background()) })
	base := "http://" + s.Addr()
	body := []byte(`{"topic":"bench.auth","content":{"p":"` + strings.Repeat("x", 200-8) + `"}}`)
	var published int64

	for _, bc := range []struct {
		name, method, path, token string
		body                      []byte
		want                      int
	}{
		{"refused-no-token", http.MethodPost, "/messages", "", body, http.StatusUnauthorized},
		{"refused-wrong-token", http.MethodPost, "/messages", wrong, body, http.StatusUnauthorized},
		{"refused-get-no-token", http.MethodGet, "/topics", "", nil, http.StatusUnauthorized},
		{"publish-durable", http.MethodPost, "/messages?ack=durable", token, body, http.StatusOK},
	} {
		b.Run(bc.name, func(b *testing.B) {
			tr := &http.Transport{MaxIdleConnsPerHost: 1}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr}
			do := func() {
				var rd io.Reader
				if bc.body != nil {
					rd = bytes.NewReader(bc.body)
				}
				req, err := http.NewRequest(bc.method, base+bc.path, rd)
				if err != nil {
					b.Fatal(err)
				}
				if bc.token != "" {
					req.Header.Set("Authorization", "Bearer "+bc.token)
				}
				resp, err := c.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != bc.want {
					b.Fatalf("HTTP %d, want %d", resp.StatusCode, bc.want)
				}
				if resp.StatusCode == http.StatusOK {
					published++
				}
			}
			do() // the topic and the connection exist before the measurement
			b.ReportAllocs()
			cpu0 := cpuTime()
			b.ResetTimer()
			for range b.N {
				do()
			}
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/req")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
		})
	}
	stored := int64(0)
	if q, ok := reg.Get("bench.auth"); ok {
		stored = q.HighWatermark()
	}
	if stored != published {
		b.Fatalf("topic bench.auth holds %d messages, %d publishes succeeded: the log must hold those and nothing refused", stored, published)
	}
}
