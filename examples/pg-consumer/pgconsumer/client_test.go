package pgconsumer

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestClientContract checks the requests the client sends and how it reads
// the answers of the groups API: the session header round trip, the ack body,
// committed validation and error codes.
func TestClientContract(t *testing.T) {
	var gotSessions, gotFrom []string
	mux := http.NewServeMux()
	mux.HandleFunc("POST /topics/orders.pg/groups/g1/fetch", func(w http.ResponseWriter, r *http.Request) {
		gotSessions = append(gotSessions, r.Header.Get(SessionHeader))
		gotFrom = append(gotFrom, r.URL.Query().Get("from"))
		if q := r.URL.Query(); q.Get("max") != "7" || q.Get("wait") != "250" {
			t.Errorf("fetch query %q, want max=7&wait=250", r.URL.RawQuery)
		}
		w.Header().Set(SessionHeader, "s-1")
		io.WriteString(w, `{"topic":"orders.pg","group":"g1","session":"s-1","committed":3,
			"messages":[{"offset":3,"message":{"topic":{"name":"orders.pg"},"content":{"a":1},"id":"evt-3","timestamp":1}},
			            {"offset":4,"message":{"topic":"orders.pg","content":null,"id":"evt-4","timestamp":2}}]}`)
	})
	mux.HandleFunc("POST /topics/orders.pg/groups/g1/ack", func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Offset int64 }
		_ = json.NewDecoder(r.Body).Decode(&body)
		switch {
		case r.Header.Get(SessionHeader) != "s-1":
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, `{"acknowledgement":"NACK","error":"session expired","code":"SESSION_EXPIRED"}`)
		case body.Offset == 99:
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, `{"acknowledgement":"NACK","error":"offset 99 not delivered","code":"NOT_DELIVERED"}`)
		case body.Offset == 50:
			io.WriteString(w, `{"committed":10}`) // a broker claiming less than asked
		default:
			json.NewEncoder(w).Encode(map[string]int64{"committed": body.Offset + 1})
		}
	})
	mux.HandleFunc("DELETE /topics/orders.pg/groups/g1/session", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(SessionHeader) != "s-1" {
			t.Errorf("release without the session header")
		}
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("POST /topics/orders.pg/groups/busy/fetch", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusConflict)
		io.WriteString(w, `{"acknowledgement":"NACK","error":"group busy","code":"GROUP_BUSY"}`)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	ctx := context.Background()

	c := NewClient(srv.URL+"/", "orders.pg", "g1", nil)
	fr, err := c.Fetch(ctx, 7, 250*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if c.Session() != "s-1" || fr.Committed != 3 || len(fr.Messages) != 2 {
		t.Fatalf("fetch: session %q %+v", c.Session(), fr)
	}
	m0, m1 := fr.Messages[0], fr.Messages[1]
	if m0.Offset != 3 || m0.Message.ID != "evt-3" || m0.Message.Topic.Name != "orders.pg" || string(m0.Message.Content) != `{"a":1}` {
		t.Errorf("message 0: %+v", m0)
	}
	if m1.Message.Topic.Name != "orders.pg" || string(m1.Message.Content) != "null" {
		t.Errorf("message 1 (string topic, null content): %+v", m1)
	}
	if _, err := c.Fetch(ctx, 7, 250*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if len(gotSessions) != 2 || gotSessions[0] != "" || gotSessions[1] != "s-1" {
		t.Errorf("session headers sent on fetch: %q, want [\"\" \"s-1\"]", gotSessions)
	}
	// The second fetch of the session says where the client expects to
	// continue (after offsets 3 and 4), so a lost response is redelivered.
	if len(gotFrom) != 2 || gotFrom[0] != "" || gotFrom[1] != "5" {
		t.Errorf("from sent on fetch: %q, want [\"\" \"5\"]", gotFrom)
	}

	if committed, err := c.Ack(ctx, 4); err != nil || committed != 5 {
		t.Errorf("ack 4: committed %d, %v", committed, err)
	}
	if _, err := c.Ack(ctx, 99); !HasCode(err, CodeNotDelivered) {
		t.Errorf("ack 99: %v, want NOT_DELIVERED", err)
	}
	if _, err := c.Ack(ctx, 50); err == nil {
		t.Errorf("ack 50 with committed=10 accepted")
	}
	if err := c.Release(ctx); err != nil || c.Session() != "" {
		t.Errorf("release: %v, session %q", err, c.Session())
	}
	if _, err := c.Ack(ctx, 4); !HasCode(err, CodeSessionExpired) {
		t.Errorf("ack without session: %v, want SESSION_EXPIRED", err)
	}

	busy := NewClient(srv.URL, "orders.pg", "busy", nil)
	if _, err := busy.Fetch(ctx, 1, 0); !HasCode(err, CodeGroupBusy) {
		t.Errorf("busy fetch: %v, want GROUP_BUSY", err)
	}
	_, err = NewClient(srv.URL, "orders.pg", "nogroups", nil).Fetch(ctx, 1, 0)
	if ae, ok := err.(*APIError); !ok || ae.Status != http.StatusNotFound {
		t.Errorf("fetch on a missing route: %v", err)
	}
}
