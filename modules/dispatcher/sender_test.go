package dispatcher

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
)

func TestHTTPSenderAnswers(t *testing.T) {
	tests := []struct {
		name    string
		status  int
		body    string
		want    Outcome
		abn     bool // *AbnormalError expected
		wantMsg string
	}{
		{"ack", 200, `{"acknowledgement":"ACK"}`, ACK, false, ""},
		{"nack with whitespace", 200, " \n{ \"acknowledgement\" : \"NACK\" }\n", NACK, false, ""},
		{"201 ack with extra members", 201, `{"acknowledgement":"ACK","topic":"t"}`, ACK, false, ""},
		{"lower-case ack", 200, `{"acknowledgement":"ack"}`, "", true, "neither ACK nor NACK"},
		{"empty body", 200, ``, "", true, "body is not"},
		{"empty object", 200, `{}`, "", true, "body is not"},
		{"bare string", 200, `"ACK"`, "", true, "body is not"},
		{"204", 204, ``, "", true, "body is not"},
		{"500 with ack body", 500, `{"acknowledgement":"ACK"}`, "", true, "Internal Server Error"},
		{"404", 404, `nope`, "", true, "Not Found"},
		{"302", 302, ``, "", true, "Found"},
		{"too big", 200, `{"acknowledgement":"ACK","x":"` + strings.Repeat("y", 200) + `"}`, "", true, "over 128 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.status == 302 {
					w.Header().Set("Location", "/other")
				}
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			s := NewHTTPSender(Options{MaxResponseBytes: 128})
			defer s.CloseIdleConnections()
			h, _ := ParseHost(srv.URL)
			out, err := s.Send(context.Background(), Delivery{Dispatcher: New("d", h, MustPattern("t")), Topic: "t", Attempt: 1, Body: []byte(`{}`)})
			var ae *AbnormalError
			if tt.abn {
				if !errors.As(err, &ae) || ae.StatusCode != tt.status || !strings.Contains(err.Error(), tt.wantMsg) || out != "" {
					t.Fatalf("Send = %q, %v; want abnormal HTTP %d mentioning %q", out, err, tt.status, tt.wantMsg)
				}
				return
			}
			if err != nil || out != tt.want {
				t.Fatalf("Send = %q, %v; want %q", out, err, tt.want)
			}
		})
	}
}

// recordingTransport captures the request as the client would send it.
type recordingTransport struct{ req *http.Request }

func (rt *recordingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rt.req = r
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(`{"acknowledgement":"ACK"}`)), Header: http.Header{}, Request: r}, nil
}

func TestHTTPSenderRequestShape(t *testing.T) {
	s := NewHTTPSender(Options{InstanceID: "0123456789abcdef0123456789abcdef"})
	rt := &recordingTransport{}
	s.client.Transport = rt
	body := []byte(`{"topic":{"name":"order.created"},"content":1,"id":"abc"}`)
	d := New("order-dispatcher", Host{HTTP, "consumer", 8081}, MustPattern("order.**"))
	out, err := s.Send(context.Background(), Delivery{Dispatcher: d, Topic: "order.created", Offset: 17, Attempt: 2, MessageID: "abc", Key: "customer 7/é", Body: body})
	if err != nil || out != ACK {
		t.Fatalf("Send = %q, %v", out, err)
	}
	r := rt.req
	if r.Method != http.MethodPost || r.URL.String() != "http://consumer:8081/mmmq/messages" || r.ContentLength != int64(len(body)) {
		t.Errorf("request = %s %s length %d", r.Method, r.URL, r.ContentLength)
	}
	// Exact (lower-case) header names of the push request.
	want := map[string]string{
		"Content-Type":     "application/json",
		"mmmq-consumer-id": "order-dispatcher",
		"mmmq-instance-id": "0123456789abcdef0123456789abcdef",
		"mmmq-topic":       "order.created",
		"mmmq-offset":      "17",
		"mmmq-attempt":     "2",
		"mmmq-message-id":  "abc",
		"mmmq-key":         "customer 7/é",
		"User-Agent":       "mmmq/" + contract.Version,
	}
	for k, v := range want {
		if got := r.Header[k]; len(got) != 1 || got[0] != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	if len(r.Header) != len(want) {
		t.Errorf("headers = %v", r.Header)
	}
	got, _ := io.ReadAll(r.Body)
	if string(got) != string(body) {
		t.Errorf("body = %s", got)
	}
	if _, ok := r.Context().Deadline(); !ok {
		t.Error("no per-attempt deadline")
	}

	// WithPath, and an id or key that cannot be a header value is left out.
	_, err = s.Send(context.Background(), Delivery{Dispatcher: d.WithPath("/in"), Topic: "t", Attempt: 1, MessageID: "a\nb", Key: "a\nb", Body: body})
	//lint:ignore SA1008 the sender writes mmmq-message-id under its raw lower-case key (the wire spelling), so that is the key to read
	id := rt.req.Header[HeaderMessageID]
	//lint:ignore SA1008 as above, for mmmq-key
	key := rt.req.Header[HeaderKey]
	if err != nil || rt.req.URL.Path != "/in" || id != nil || key != nil {
		t.Errorf("Send = %v, path %s, id header %q, key header %q", err, rt.req.URL.Path, id, key)
	}
}

func TestHTTPSenderTransportErrorAndTimeouts(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	h, _ := ParseHost(srv.URL)
	srv.Close()
	s := NewHTTPSender(Options{})
	defer s.CloseIdleConnections()
	_, err := s.Send(context.Background(), Delivery{Dispatcher: New("d", h, MustPattern("t")), Attempt: 1})
	var ae *AbnormalError
	if err == nil || errors.As(err, &ae) {
		t.Errorf("closed server: %v, want a transport error", err)
	}

	// A consumer that sends headers and then trickles its body forever is
	// bounded by the attempt timeout.
	trickle := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		io.WriteString(w, `{"acknowledgement":`)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer trickle.Close()
	h, _ = ParseHost(trickle.URL)
	_, err = s.Send(context.Background(), Delivery{Dispatcher: New("d", h, MustPattern("t")).WithTimeout(50 * time.Millisecond), Attempt: 1})
	if err == nil || errors.As(err, &ae) {
		t.Errorf("trickled body: %v, want a timeout error", err)
	}

	// An endless body is cut at MaxResponseBytes, not read until the timeout.
	endless := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := []byte(strings.Repeat(" ", 1024))
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer endless.Close()
	h, _ = ParseHost(endless.URL)
	_, err = s.Send(context.Background(), Delivery{Dispatcher: New("d", h, MustPattern("t")).WithTimeout(time.Minute), Attempt: 1})
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), "over 65536 bytes") {
		t.Errorf("endless body: %v, want abnormal: over 65536 bytes", err)
	}

	// Cancelling the caller's context ends a hanging attempt.
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer hang.Close()
	h, _ = ParseHost(hang.URL)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := s.Send(ctx, Delivery{Dispatcher: New("d", h, MustPattern("t")), Attempt: 1})
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want context.Canceled", err)
	}
}
