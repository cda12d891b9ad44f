package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"

	"github.com/mmmq/mmmq/app"
	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/httpapi"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

const (
	testTopic    = "orders.pg"
	testMessages = 60
	testLease    = 2 * time.Second // lease of the halted session; the restart waits it out
)

// startBroker runs the default mmmq application in process on a temp root
// dir and a kernel-chosen port, and returns its base URL.
func startBroker(t *testing.T) string {
	t.Helper()
	cfg := config.Default()
	config.EditSection(cfg, topicqueue.StorageSection, func(st *topicqueue.StorageConfig) { st.RootDir = t.TempDir() })
	cfg.Server.Host = "127.0.0.1"
	cfg.Logging.Level = "warn"
	config.EditSection(cfg, groups.ConfigSection, func(g *groups.Config) { g.LeaseTimeout = testLease })
	var srv *httpapi.Server
	build := func(extra ...fx.Option) *fx.App {
		return app.New(append([]fx.Option{
			config.Supply(cfg),
			// server.port must be 1..65535 in configuration; port 0 (any
			// free port) is set after validation.
			fx.Decorate(func(c *config.Config) *config.Config {
				cc := *c
				cc.Server.Port = 0
				return &cc
			}),
			fx.Populate(&srv),
		}, extra...)...)
	}
	// The consumer-group API (modules/groups) may or may not be part of the
	// default module set: add it, and build without it when Fx says it is
	// already provided (Fx fails while providing, before any constructor
	// runs, so the first attempt has no side effects).
	a := build(groups.Module)
	if err := a.Err(); err != nil && strings.Contains(err.Error(), "already provided") {
		a = build()
	}
	if err := a.Err(); err != nil {
		t.Fatalf("build broker: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		t.Fatalf("start broker: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := a.Stop(ctx); err != nil {
			t.Errorf("stop broker: %v", err)
		}
	})
	return "http://" + srv.Addr()
}

// publish sends n durable messages evt-000000.. to topic and checks that
// message i got offset i.
func publish(t *testing.T, base, topic string, n int) {
	t.Helper()
	for i := range n {
		body, _ := json.Marshal(map[string]any{
			"topic":   topic,
			"id":      fmt.Sprintf("evt-%06d", i),
			"content": map[string]any{"orderId": 1000 + i, "status": "created"},
		})
		resp, err := http.Post(base+"/messages", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		var ack struct {
			Acknowledgement string `json:"acknowledgement"`
			Offset          int64  `json:"offset"`
			Level           string `json:"level"`
			Error           string `json:"error"`
		}
		err = json.NewDecoder(resp.Body).Decode(&ack)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || ack.Acknowledgement != "ACK" || ack.Level != "DURABLE" {
			t.Fatalf("publish %d: HTTP %d %+v (decode error %v)", i, resp.StatusCode, ack, err)
		}
		if ack.Offset != int64(i) {
			t.Fatalf("publish %d: offset %d, want %d", i, ack.Offset, i)
		}
	}
}

// consume runs the pg-consumer command with args and returns its summary
// line; a non-zero exit fails the test.
func consume(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, append(args, "-v"), &stdout, &stderr)
	t.Logf("pg-consumer %s\n%s%s", strings.Join(args[4:], " "), stderr.String(), stdout.String())
	if code != 0 {
		t.Fatalf("pg-consumer exited %d", code)
	}
	return strings.TrimSpace(stdout.String())
}

// doneLine is the parsed CONSUMER_DONE summary.
type doneLine struct {
	firstOffset, seen, applied, skipped, rows, distinct int64
}

func parseDone(t *testing.T, line string) doneLine {
	t.Helper()
	var d doneLine
	_, err := fmt.Sscanf(line, "CONSUMER_DONE firstOffset=%d seen=%d applied=%d skippedDuplicates=%d | rows=%d distinctOffsets=%d",
		&d.firstOffset, &d.seen, &d.applied, &d.skipped, &d.rows, &d.distinct)
	if err != nil {
		t.Fatalf("summary %q: %v", line, err)
	}
	return d
}

// TestRedeliveryDedupByOffset is the log-queue study's
// consumer_redelivery_dedup_by_offset and negative_consumer_without_dedup
// experiments, against the real broker and a real PostgreSQL: 60 messages, a
// consumer acking every 10 halts after applying 25 (20 acked), a restart is
// redelivered from offset 20. With the offset as primary key the table ends
// with 60 rows for 60 offsets and 5 skipped duplicates; without it, 65 rows.
func TestRedeliveryDedupByOffset(t *testing.T) {
	pg := startPostgres(t)
	base := startBroker(t)
	publish(t, base, testTopic, testMessages)

	cases := []struct {
		name, group, db string
		noDedup         bool
		want            doneLine
	}{
		{"dedup", "pg-dedup", "dedup", false,
			doneLine{firstOffset: 20, seen: 40, applied: 35, skipped: 5, rows: 60, distinct: 60}},
		{"no-dedup", "pg-nodedup", "nodedup", true,
			doneLine{firstOffset: 20, seen: 40, applied: 40, skipped: 0, rows: 65, distinct: 60}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dsn := pg.createDB(t, tc.db)
			args := []string{"-broker", base, "-topic", testTopic, "-group", tc.group, "-dsn", dsn,
				"-wait", "200ms", "-max", "100", "-ack-every", "10"}
			if tc.noDedup {
				args = append(args, "-no-dedup")
			}

			// Run 1: crash after 25 applied; acks went out after 10 and 20.
			halt := consume(t, append(args, "-halt-after", "25")...)
			if want := "CONSUMER_HALT seen=25 lastOffset=24 committed=20 (applied, not acked)"; halt != want {
				t.Fatalf("first run: %q, want %q", halt, want)
			}
			rows, distinct := countRows(t, dsn)
			if rows != 25 || distinct != 25 {
				t.Fatalf("after the halt: rows=%d distinctOffsets=%d, want 25/25", rows, distinct)
			}

			// Run 2: waits for the halted session's lease, then redelivery
			// from the committed offset 20.
			got := parseDone(t, consume(t, args...))
			if got != tc.want {
				t.Fatalf("second run: %+v, want %+v", got, tc.want)
			}
			rows, distinct = countRows(t, dsn)
			t.Logf("%s: rows=%d distinctOffsets=%d skippedDuplicates=%d firstOffset=%d", tc.name, rows, distinct, got.skipped, got.firstOffset)
			if rows != tc.want.rows || distinct != tc.want.distinct {
				t.Fatalf("table: rows=%d distinctOffsets=%d, want %d/%d", rows, distinct, tc.want.rows, tc.want.distinct)
			}
			checkRows(t, dsn, tc.noDedup)

			// Run 3: everything is committed; nothing comes again.
			if got := parseDone(t, consume(t, args...)); got.seen != 0 || got.firstOffset != -1 || got.rows != tc.want.rows {
				t.Fatalf("third run: %+v, want nothing redelivered and %d rows", got, tc.want.rows)
			}
		})
	}
}

func countRows(t *testing.T, dsn string) (rows, distinct int64) {
	t.Helper()
	ctx, conn, done := connect(t, dsn)
	defer done()
	if err := conn.QueryRow(ctx, `select count(*), count(distinct log_offset) from applied`).Scan(&rows, &distinct); err != nil {
		t.Fatalf("count: %v", err)
	}
	return rows, distinct
}

// checkRows verifies the content of the table: every offset carries its own
// message (id, topic, content) and exactly offsets 20..24 appear twice in
// the negative control.
func checkRows(t *testing.T, dsn string, noDedup bool) {
	t.Helper()
	ctx, conn, done := connect(t, dsn)
	defer done()
	rs, err := conn.Query(ctx, `select log_offset, count(*), min(message_id), max(message_id), min(topic),
		min((content->>'orderId')::int) from applied group by log_offset order by log_offset`)
	if err != nil {
		t.Fatalf("query: %v", err)
	}
	var twice []int64
	for rs.Next() {
		var (
			off, n       int64
			minID, maxID string
			topic        string
			orderID      int64
		)
		if err := rs.Scan(&off, &n, &minID, &maxID, &topic, &orderID); err != nil {
			t.Fatalf("scan: %v", err)
		}
		wantID := fmt.Sprintf("evt-%06d", off)
		if minID != wantID || maxID != wantID || topic != testTopic || orderID != 1000+off {
			t.Errorf("offset %d: id %s..%s topic %s orderId %d, want %s %s %d", off, minID, maxID, topic, orderID, wantID, testTopic, 1000+off)
		}
		if n > 1 {
			twice = append(twice, off)
		}
	}
	if err := rs.Err(); err != nil {
		t.Fatalf("rows: %v", err)
	}
	want := "[]"
	if noDedup {
		want = "[20 21 22 23 24]"
	}
	if got := fmt.Sprint(twice); got != want {
		t.Errorf("offsets applied twice: %s, want %s", got, want)
	}
}

// TestRecreatedTopicIsNotMistakenForTheOld: a topic consumed in full is
// deleted and published to again; its new messages start at offset 0 again
// (same ids and contents as the old first ones, the worst case for a
// consumer keyed by offset). Keyed by (incarnation, offset) they are applied,
// not skipped as duplicates of the old offsets 0..2.
func TestRecreatedTopicIsNotMistakenForTheOld(t *testing.T) {
	pg := startPostgres(t)
	base := startBroker(t)
	const topic = "orders.recreated"
	dsn := pg.createDB(t, "recreated")
	args := []string{"-broker", base, "-topic", topic, "-group", "pg-recreated", "-dsn", dsn,
		"-wait", "200ms", "-max", "100", "-ack-every", "10"}

	publish(t, base, topic, 5)
	if got := parseDone(t, consume(t, args...)); got.applied != 5 || got.rows != 5 {
		t.Fatalf("first life: %+v, want 5 applied", got)
	}
	req, _ := http.NewRequest(http.MethodDelete, base+"/topics/"+topic, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("DELETE /topics/%s: HTTP %d", topic, resp.StatusCode)
	}
	publish(t, base, topic, 3) // offsets 0..2 again
	got := parseDone(t, consume(t, args...))
	if want := (doneLine{firstOffset: 0, seen: 3, applied: 3, skipped: 0, rows: 8, distinct: 8}); got != want {
		t.Fatalf("second life: %+v, want %+v (new offsets 0..2 applied, not skipped)", got, want)
	}
	ctx, conn, done := connect(t, dsn)
	defer done()
	var incarnations int
	if err := conn.QueryRow(ctx, `select count(distinct topic_incarnation) from applied where topic_incarnation <> ''`).Scan(&incarnations); err != nil {
		t.Fatal(err)
	}
	if incarnations != 2 {
		t.Fatalf("%d distinct incarnations in the table, want 2", incarnations)
	}
}
