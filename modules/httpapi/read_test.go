package httpapi

import (
	"bytes"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// readPage is the 200 body of GET /topics/{topic}/messages.
type readPage struct {
	Topic         string `json:"topic"`
	HighWatermark int64  `json:"highWatermark"`
	NextOffset    int64  `json:"nextOffset"`
	Messages      []struct {
		Offset  int64          `json:"offset"`
		Message map[string]any `json:"message"`
		Error   string         `json:"error"`
	} `json:"messages"`
}

// read GETs target and decodes the 200 page.
func (a *api) read(target string) readPage {
	a.t.Helper()
	rec := a.call(http.MethodGet, target, "", "")
	var p readPage
	decodeJSON(a.t, rec, &p)
	if rec.Code != http.StatusOK || p.Messages == nil {
		a.t.Fatalf("GET %s: HTTP %d %s", target, rec.Code, rec.Body)
	}
	return p
}

// pageOffsets is the offsets of p's messages.
func pageOffsets(p readPage) []int64 {
	var out []int64
	for _, m := range p.Messages {
		out = append(out, m.Offset)
	}
	return out
}

// Bad read-back requests are 400 (name, offset, limit) or 404 (unknown
// topic) with the JSON error body, and create nothing.
func TestReadBackBadRequests(t *testing.T) {
	a := newAPI(t, Options{}, topicqueue.Options{})
	for _, tc := range []struct {
		target string
		status int
		code   string
		text   string
	}{
		{"/topics/a..b/messages", 400, contract.CodeBadRequest, "topic"},
		{"/topics/" + strings.Repeat("x", 250) + "/messages", 400, contract.CodeBadRequest, "topic"},
		{"/topics/no.such/messages", 404, contract.CodeNotFound, `"no.such" does not exist`},
	} {
		wantNACK(t, a.call(http.MethodGet, tc.target, "", ""), tc.status, tc.code, tc.text)
	}
	a.noTopics()

	a.publish("r.t", `{"n":0}`)
	for _, q := range []string{"offset=-1", "offset=x", "offset=1.5", "limit=0", "limit=-3", "limit=1001", "limit=ten"} {
		rec := a.call(http.MethodGet, "/topics/r.t/messages?"+q, "", "")
		wantNACK(t, rec, http.StatusBadRequest, contract.CodeBadRequest, "query parameter "+q[:strings.IndexByte(q, '=')])
	}
	for q, text := range map[string]string{"offset=0&offset=5": "query parameter offset is given 2 times; give it once",
		"limit=1&limit=3&limit=2": "query parameter limit is given 3 times; give it once"} {
		wantNACK(t, a.call(http.MethodGet, "/topics/r.t/messages?"+q, "", ""), http.StatusBadRequest, contract.CodeBadRequest, text)
	}
}

// Paging: limit bounds a page, nextOffset continues it, and a page at or
// past the end is empty with nextOffset where it started.
func TestReadBackPaging(t *testing.T) {
	a := newAPI(t, Options{}, topicqueue.Options{})
	for i := 0; i < 5; i++ {
		a.publish("p.t", fmt.Sprintf(`{"n":%d}`, i))
	}
	for _, tc := range []struct {
		query string
		want  string
		next  int64
	}{
		{"", "[0 1 2 3 4]", 5},
		{"?limit=2", "[0 1]", 2},
		{"?offset=2&limit=2", "[2 3]", 4},
		{"?offset=4&limit=1000", "[4]", 5},
		{"?offset=5", "[]", 5},
		{"?offset=9", "[]", 9},
	} {
		p := a.read("/topics/p.t/messages" + tc.query)
		if got := fmt.Sprint(pageOffsets(p)); got != tc.want || p.NextOffset != tc.next || p.HighWatermark != 5 || p.Topic != "p.t" {
			t.Errorf("%s: offsets %s next %d hw %d topic %q; want %s next %d hw 5", tc.query, got, p.NextOffset, p.HighWatermark, p.Topic, tc.want, tc.next)
		}
		for _, m := range p.Messages {
			if m.Message["n"] != float64(m.Offset) || m.Error != "" {
				t.Errorf("%s: offset %d holds %v %q", tc.query, m.Offset, m.Message, m.Error)
			}
		}
	}
}

// A stored record that is not valid JSON (written by another tool) is
// listed with an error instead of its bytes, so the page stays valid JSON.
func TestReadBackInvalidStoredJSON(t *testing.T) {
	a := newAPI(t, Options{}, topicqueue.Options{})
	a.publish("raw.t", `{"n":0}`)
	a.publish("raw.t", `{"n": not json`)
	a.publish("raw.t", `{"n":2}`)
	p := a.read("/topics/raw.t/messages")
	if got := fmt.Sprint(pageOffsets(p)); got != "[0 1 2]" || p.NextOffset != 3 {
		t.Fatalf("offsets %s next %d", got, p.NextOffset)
	}
	if m := p.Messages[1]; m.Message != nil || m.Error != "stored message is not valid JSON" {
		t.Errorf("offset 1 = %+v, want the not-valid-JSON error", m)
	}
	if p.Messages[2].Message["n"] != 2.0 {
		t.Errorf("offset 2 = %+v", p.Messages[2])
	}
}

// A corrupt entry (a byte changed in the segment file) is listed with its
// corruption error at its offset, and the page goes on past it.
func TestReadBackCorruptEntry(t *testing.T) {
	root := t.TempDir()
	a := newAPI(t, Options{}, topicqueue.Options{Root: root})
	for i := 0; i < 3; i++ {
		a.publish("c.t", fmt.Sprintf(`{"n":%d}`, i))
	}
	if err := a.reg.Close(); err != nil {
		t.Fatal(err)
	}
	seg := filepath.Join(root, "c.t", storage.SegmentName(0)+storage.SegmentExt)
	raw, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(raw, []byte(`{"n":1}`))
	if i < 0 {
		t.Fatal("entry 1 not found")
	}
	raw[i+5] = '7'
	if err := os.WriteFile(seg, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	a = newAPI(t, Options{}, topicqueue.Options{Root: root})
	if _, err := a.reg.Open("c.t"); err != nil {
		t.Fatal(err)
	}
	p := a.read("/topics/c.t/messages")
	if got := fmt.Sprint(pageOffsets(p)); got != "[0 1 2]" || p.NextOffset != 3 {
		t.Fatalf("offsets %s next %d, want [0 1 2] next 3", got, p.NextOffset)
	}
	if m := p.Messages[1]; m.Message != nil || !strings.Contains(m.Error, "offset 1") {
		t.Errorf("offset 1 = %+v, want its corruption error", m)
	}
	if p.Messages[0].Message["n"] != 0.0 || p.Messages[2].Message["n"] != 2.0 {
		t.Errorf("neighbours = %+v", p.Messages)
	}
}

// A read error (EIO) is 503 UNAVAILABLE with the JSON error body naming
// it, never a page that leaves the unreadable message out.
func TestReadBackReadError503(t *testing.T) {
	mem := vfs.NewMem()
	// One entry per segment file: failing one file fails one offset.
	a := newAPI(t, Options{}, topicqueue.Options{Root: "/data", Storage: storage.Options{FS: mem, SegmentMaxBytes: 1}})
	for i := 0; i < 4; i++ {
		a.publish("eio.t", fmt.Sprintf(`{"n":%d}`, i))
	}
	bad := storage.SegmentName(2) + storage.SegmentExt
	mem.SetHook(func(op vfs.Op, name string) error {
		if op == vfs.OpRead && filepath.Base(name) == bad {
			return &fs.PathError{Op: "read", Path: name, Err: syscall.EIO}
		}
		return nil
	})
	rec := a.call(http.MethodGet, "/topics/eio.t/messages", "", "")
	wantNACK(t, rec, http.StatusServiceUnavailable, contract.CodeUnavailable, "input/output error")
	if p := a.read("/topics/eio.t/messages?limit=2"); fmt.Sprint(pageOffsets(p)) != "[0 1]" {
		t.Errorf("page before the unreadable offset: %v", pageOffsets(p))
	}
	mem.SetHook(nil)
	if p := a.read("/topics/eio.t/messages"); fmt.Sprint(pageOffsets(p)) != "[0 1 2 3]" {
		t.Errorf("after the fault: %v", pageOffsets(p))
	}
}

// One page holds at most about maxReadBytes of messages (at least one),
// continued from its nextOffset.
func TestReadBackPageBytesBounded(t *testing.T) {
	a := newAPI(t, Options{}, topicqueue.Options{Storage: storage.Options{MaxRecordBytes: 2 << 20}})
	const size = 1_500_000 // three fill maxReadBytes (4 MiB)
	for i := 0; i < 4; i++ {
		a.publish("big.t", fmt.Sprintf(`{"n":%d,"p":"%s"}`, i, strings.Repeat("x", size)))
	}
	p := a.read("/topics/big.t/messages?limit=10")
	if got := fmt.Sprint(pageOffsets(p)); got != "[0 1 2]" || p.NextOffset != 3 {
		t.Fatalf("first page %s next %d, want [0 1 2] next 3", got, p.NextOffset)
	}
	p = a.read("/topics/big.t/messages?offset=3&limit=10")
	if got := fmt.Sprint(pageOffsets(p)); got != "[3]" || p.NextOffset != 4 {
		t.Fatalf("second page %s next %d, want [3] next 4", got, p.NextOffset)
	}
}

// Reading below the log start offset (segments deleted by retention) is
// 410 OFFSET_EXPIRED with "startOffset" in the JSON body; GET /topics shows
// the start offset, and a read from it works.
func TestReadBackBelowStartOffset410(t *testing.T) {
	a := newAPI(t, Options{}, topicqueue.Options{Storage: storage.Options{SegmentMaxBytes: 1}}) // one entry per segment
	for i := 0; i < 5; i++ {
		a.publish("r.t", fmt.Sprintf(`{"n":%d}`, i))
	}
	q, _ := a.reg.Get("r.t")
	if res, err := q.Log().(*storage.Log).ApplyRetention(contract.RetentionPolicy{MaxBytes: 1}, time.Now(), 3); err != nil || res.StartOffset != 3 {
		t.Fatalf("retention: %+v %v", res, err)
	}
	rec := a.call(http.MethodGet, "/topics/r.t/messages?offset=0", "", "")
	wantNACK(t, rec, http.StatusGone, contract.CodeOffsetExpired, "starts at offset 3")
	var body struct {
		StartOffset *int64 `json:"startOffset"`
	}
	decodeJSON(t, rec, &body)
	if body.StartOffset == nil || *body.StartOffset != 3 {
		t.Fatalf("body %s, want startOffset 3", rec.Body)
	}
	if p := a.read("/topics/r.t/messages?offset=3"); fmt.Sprint(pageOffsets(p)) != "[3 4]" {
		t.Errorf("from the start offset: %v", pageOffsets(p))
	}
	rec = a.call(http.MethodGet, "/topics", "", "")
	if !strings.Contains(rec.Body.String(), `"startOffset":3`) {
		t.Errorf("GET /topics = %s, want startOffset 3", rec.Body)
	}
}

// laggingBackend opens local topics whose HighWatermark reports one less
// than what a read returns: a topic that grows between the two (another
// producer; on the JetStream backend another node's publish).
type laggingBackend struct{ topicqueue.Backend }

func (b laggingBackend) Open(name string, create bool) (contract.Log, error) {
	l, err := b.Backend.Open(name, create)
	if err != nil {
		return nil, err
	}
	return laggingLog{l}, nil
}

type laggingLog struct{ contract.Log }

func (l laggingLog) HighWatermark() int64 { return max(0, l.Log.HighWatermark()-1) }

// A read-back page never shows a message at or past the high watermark it
// reports, though the topic grows while it is read: with a log whose
// reads are ahead of its high watermark by one message, the page stops at
// the high watermark (it named an offset its own highWatermark said did
// not exist yet: "read 272 messages, high watermark 271", seen on the
// JetStream backend during a failover).
func TestReadBackHighWatermarkCoversThePage(t *testing.T) {
	root := t.TempDir()
	a := newAPI(t, Options{}, topicqueue.Options{Root: root, Backend: laggingBackend{&topicqueue.LocalBackend{Root: root}}})
	for i := range 5 {
		a.publish("grow.t", fmt.Sprintf(`{"topic":{"name":"grow.t"},"content":%d}`, i))
	}
	for _, target := range []string{"/topics/grow.t/messages", "/topics/grow.t/messages?offset=2&limit=10", "/topics/grow.t/messages?offset=3&limit=1"} {
		p := a.read(target)
		if got := fmt.Sprint(pageOffsets(p)); p.HighWatermark != 4 || p.NextOffset > p.HighWatermark || len(p.Messages) > 0 && p.Messages[len(p.Messages)-1].Offset >= p.HighWatermark {
			t.Errorf("GET %s: offsets %s, nextOffset %d, highWatermark %d; want every offset below the highWatermark 4", target, got, p.NextOffset, p.HighWatermark)
		}
	}
}
