package schedule

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// storedMsg is a stored message JSON as the broker writes it.
func storedMsg(id string, headers bool) []byte {
	h := ""
	if headers {
		h = `,"headers":{"k":"v-` + id + `"}`
	}
	return []byte(`{"topic":{"name":"t"},"content":{"n":"` + id + `"},"id":"` + id + `","timestamp":1` + h + `}`)
}

// want is one scheduled message a test expects in a listing.
type want struct {
	sid, id string
	at      int64
	seq     int // publish order (the tie-break of equal due times in one file)
}

// listAll pages through topic's listing with limit, checking each page's
// order and shape, and returns the schedule ids in listing order.
func listAll(t *testing.T, s *Scheduler, topic string, limit int) ([]Listed, []Cursor) {
	t.Helper()
	var all []Listed
	var cursors []Cursor
	var after *Cursor
	for pages := 0; ; pages++ {
		if pages > 100000 {
			t.Fatal("listing does not end")
		}
		p, err := s.List(topic, ListOptions{After: after, Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Items) > limit {
			t.Fatalf("page of %d items, limit %d", len(p.Items), limit)
		}
		all = append(all, p.Items...)
		if p.Next == nil {
			return all, cursors
		}
		if len(p.Items) == 0 {
			t.Fatalf("empty page with a next cursor %v", *p.Next)
		}
		if *p.Next != p.Items[len(p.Items)-1].at {
			t.Fatalf("next %v is not the last item's place %v", *p.Next, p.Items[len(p.Items)-1].at)
		}
		c := *p.Next
		cursors = append(cursors, c)
		after = &c
	}
}

func ids(ls []Listed) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.ScheduleID
	}
	return out
}

// scheduleMany schedules n messages of topic due at random times within
// span after base()+from+1s, in random order.
func scheduleMany(t *testing.T, s *Scheduler, topic string, n int, from, span time.Duration, rng *rand.Rand, seq *int) []want {
	t.Helper()
	var ws []want
	for i := range n {
		at := base().Add(from + time.Second + time.Duration(rng.Int64N(span.Milliseconds()))*time.Millisecond)
		id := fmt.Sprintf("%s-%d", topic, i)
		sid, err := s.Schedule(context.Background(), topic, storedMsg(id, i%2 == 0), at)
		if err != nil {
			t.Fatal(err)
		}
		*seq++
		ws = append(ws, want{sid: sid, id: id, at: at.UnixMilli(), seq: *seq})
	}
	return ws
}

func dueOrder(ws []want) []string {
	ws = slices.Clone(ws)
	slices.SortFunc(ws, func(a, b want) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		// Equal due times share a bucket: file order.
		return a.seq - b.seq
	})
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.sid
	}
	return out
}

// TestListPagesInDueOrder: 600 messages of one topic over 40 buckets,
// scheduled in random order among another topic's, listed in pages of
// several sizes: every one once, in due order, with its fields; the other
// topic's never.
func TestListPagesInDueOrder(t *testing.T) {
	clk := &fakeClock{t: base()}
	for _, keep := range []int{0, 7} { // 7: every scan of a file cut short
		t.Run(fmt.Sprintf("keep=%d", keep), func(t *testing.T) {
			s, _ := newTest(t, vfs.NewMem(), clk, func(o *Options) { o.listKeep = keep })
			rng := rand.New(rand.NewPCG(3, 4))
			seq := 0
			var a []want
			for range 3 {
				a = append(a, scheduleMany(t, s, "a", 200, 0, 40*time.Second, rng, &seq)...)
				scheduleMany(t, s, "b", 100, 0, 40*time.Second, rng, &seq)
			}
			if got := len(s.perFile); got < 30 {
				t.Fatalf("%d buckets, want messages over many buckets", got)
			}
			byID := map[string]want{}
			for _, w := range a {
				byID[w.sid] = w
			}
			exp := dueOrder(a)
			for _, limit := range []int{1, 13, 100, 599, 600, 1000} {
				got, _ := listAll(t, s, "a", limit)
				if !slices.Equal(ids(got), exp) {
					t.Fatalf("limit %d: listed %d messages, want %d in due order", limit, len(got), len(exp))
				}
				for _, l := range got {
					w := byID[l.ScheduleID]
					if l.DeliverAt != w.at || l.ID != w.id || l.Size != len(`{"n":"`+w.id+`"}`) || l.Content != nil {
						t.Fatalf("item %+v, want %+v", l, w)
					}
					if n := w.seq; (n%2 == 1) != (l.Headers["k"] == "v-"+w.id) {
						t.Fatalf("item %+v: headers %v", l, l.Headers)
					}
				}
			}
			p, err := s.List("a", ListOptions{Limit: 3, Content: true})
			if err != nil || len(p.Items) != 3 || p.Pending != 600 || p.Next == nil {
				t.Fatalf("page %+v, %v", p, err)
			}
			if w := byID[p.Items[0].ScheduleID]; string(p.Items[0].Content) != `{"n":"`+w.id+`"}` {
				t.Fatalf("content %s of %s", p.Items[0].Content, w.id)
			}
			// A byte cap: at least one message, then only what fits.
			if p, err := s.List("a", ListOptions{Limit: 10, Content: true, MaxBytes: 1}); err != nil || len(p.Items) != 1 || p.Next == nil {
				t.Fatalf("capped page %+v, %v", p, err)
			}
			if p, err := s.List("none", ListOptions{Limit: 10}); err != nil || len(p.Items) != 0 || p.Pending != 0 || p.Next != nil {
				t.Fatalf("unknown topic: %+v, %v", p, err)
			}
		})
	}
}

// TestListOverlappingBuckets: buckets of another bucket-width (before a
// restart) overlap the new ones; the listing still merges them in due
// order.
func TestListOverlappingBuckets(t *testing.T) {
	clk := &fakeClock{t: base()}
	fs := vfs.NewMem()
	s, _ := newTest(t, fs, clk, func(o *Options) { o.BucketWidth = time.Minute })
	rng := rand.New(rand.NewPCG(5, 6))
	seq := 0
	a := scheduleMany(t, s, "a", 150, 0, 3*time.Minute, rng, &seq)
	s2, _ := newTest(t, fs, clk, func(o *Options) { o.BucketWidth = 7 * time.Second; o.listKeep = 5 })
	a = append(a, scheduleMany(t, s2, "a", 150, 0, 3*time.Minute, rng, &seq)...)
	for _, limit := range []int{1, 10, 1000} {
		got, _ := listAll(t, s2, "a", limit)
		exp := dueOrder(a)
		// Equal due times in two files: bucket order, then file order;
		// compare the due times and the set.
		if len(got) != len(exp) || !slices.IsSortedFunc(got, func(x, y Listed) int { return int(x.DeliverAt - y.DeliverAt) }) {
			t.Fatalf("limit %d: %d listed (want %d) or not in due order", limit, len(got), len(exp))
		}
		g, e := ids(got), slices.Clone(exp)
		slices.Sort(g)
		slices.Sort(e)
		if !slices.Equal(g, e) {
			t.Fatalf("limit %d: listed another set", limit)
		}
	}
}

// TestListCancelledMovedRestart: a cancelled message and moved ones leave
// the listing; a restart lists the same, and a cursor of before the
// restart continues the same.
func TestListCancelledMovedRestart(t *testing.T) {
	clk := &fakeClock{t: base()}
	fs := vfs.NewMem()
	s, tgt := newTest(t, fs, clk, nil)
	rng := rand.New(rand.NewPCG(7, 8))
	seq := 0
	a := scheduleMany(t, s, "a", 300, 0, 30*time.Second, rng, &seq)
	exp := dueOrder(a)
	// Cancel every third; move the first 10 s.
	var left []string
	for i, sid := range exp {
		if i%3 == 0 {
			if ok, err := s.Cancel("a", sid); !ok || err != nil {
				t.Fatalf("cancel %s: %v %v", sid, ok, err)
			}
			continue
		}
		left = append(left, sid)
	}
	clk.Add(11 * time.Second)
	for {
		n, _, err := s.MoveDue(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	moved := map[string]bool{}
	for _, d := range tgt.deliveries() {
		var m struct {
			ID string `json:"id"`
		}
		json.Unmarshal([]byte(d.stored), &m)
		moved[m.ID] = true
	}
	if len(moved) == 0 {
		t.Fatal("nothing moved")
	}
	byID := map[string]want{}
	for _, w := range a {
		byID[w.sid] = w
	}
	left = slices.DeleteFunc(left, func(sid string) bool { return moved[byID[sid].id] })
	got, cursors := listAll(t, s, "a", 17)
	if !slices.Equal(ids(got), left) {
		t.Fatalf("listed %d, want the %d neither cancelled nor moved", len(got), len(left))
	}
	if p, _ := s.List("a", ListOptions{Limit: 1}); p.Pending != len(left) {
		t.Fatalf("pending %d, want %d", p.Pending, len(left))
	}
	// Restart: the same listing, and the cursors of before still place.
	s2, _ := newTest(t, fs, clk, func(o *Options) { o.listKeep = 3 })
	got2, cursors2 := listAll(t, s2, "a", 17)
	if !slices.Equal(ids(got2), left) || !slices.Equal(cursors, cursors2) {
		t.Fatalf("after a restart: listed %d (want %d), cursors equal %v", len(got2), len(left), slices.Equal(cursors, cursors2))
	}
	p, err := s2.List("a", ListOptions{After: &cursors[2], Limit: 17})
	if err != nil || !slices.Equal(ids(p.Items), left[3*17:4*17]) {
		t.Fatalf("page after a cursor of before the restart: %v", err)
	}
}

// TestListConcurrent pages through a topic while other goroutines cancel
// its messages, schedule new ones and the mover moves the due ones: no
// message is listed twice, every message pending throughout is listed,
// and none cancelled before the listing began.
func TestListConcurrent(t *testing.T) {
	clk := &fakeClock{t: base()}
	s, _ := newTest(t, vfs.NewMem(), clk, func(o *Options) { o.listKeep = 50 })
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(9, 10))
	seq := 0
	// churn: due within 10 minutes, cancelled or moved while the listing
	// runs; stable: due in a day, never cancelled.
	churn := dueOrder(scheduleMany(t, s, "a", 400, 0, 10*time.Minute, rng, &seq))
	stable := map[string]bool{}
	for _, w := range scheduleMany(t, s, "a", 300, 24*time.Hour, 10*time.Minute, rng, &seq) {
		stable[w.sid] = true
	}
	cancelled := map[string]bool{}
	for _, sid := range churn[:50] {
		if ok, err := s.Cancel("a", sid); !ok || err != nil {
			t.Fatalf("cancel %s: %v %v", sid, ok, err)
		}
		cancelled[sid] = true
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { // cancels
		defer wg.Done()
		r := rand.New(rand.NewPCG(11, 12))
		for _, sid := range churn[50:] {
			select {
			case <-stop:
				return
			default:
			}
			if r.IntN(2) == 0 {
				if _, err := s.Cancel("a", sid); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	go func() { // the mover, the clock moving up to an hour on
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, _, err := s.MoveDue(ctx); err != nil {
				t.Error(err)
				return
			}
			if clk.Now().Before(base().Add(time.Hour)) {
				clk.Add(time.Second)
			}
		}
	}()
	go func() { // new schedules, due before and after the listing's place
		defer wg.Done()
		for i := range 2000 {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := s.Schedule(ctx, "a", storedMsg(fmt.Sprintf("new-%d", i), false), clk.Now().Add(time.Duration(1+i%600)*time.Second)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	got, _ := listAll(t, s, "a", 23)
	close(stop)
	wg.Wait()
	seen := map[string]bool{}
	for _, l := range got {
		if seen[l.ScheduleID] {
			t.Fatalf("%s listed twice", l.ScheduleID)
		}
		seen[l.ScheduleID] = true
		if cancelled[l.ScheduleID] {
			t.Fatalf("%s listed after its cancel", l.ScheduleID)
		}
	}
	for sid := range stable {
		if !seen[sid] {
			t.Fatalf("%s pending throughout, not listed", sid)
		}
	}
	t.Logf("listed %d messages, %d of them pending throughout", len(got), len(stable))
}

// TestListRoute: the HTTP answer and its refusals.
func TestListRoute(t *testing.T) {
	clk := &fakeClock{t: base()}
	s, _ := newTest(t, vfs.NewMem(), clk, nil)
	for i := range 3 {
		if _, err := s.Schedule(context.Background(), "t", storedMsg(fmt.Sprint(i), i == 0), base().Add(time.Duration(i+1)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	r := mux.NewRouter()
	NewRoute(s).Register(r)
	get := func(url string) (int, map[string]any) {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, url, nil))
		var m map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
			t.Fatalf("%s: %d %q: %v", url, rec.Code, rec.Body, err)
		}
		return rec.Code, m
	}
	code, m := get("/topics/t/scheduled?limit=2")
	items, _ := m["items"].([]any)
	if code != 200 || len(items) != 2 || m["pending"] != 3.0 || m["next"] == nil || m["topic"] != "t" {
		t.Fatalf("%d %v", code, m)
	}
	it := items[0].(map[string]any)
	if it["deliverAt"] != "2027-01-15T08:00:01.000Z" || it["deliverAtMs"] != float64(base().Add(time.Second).UnixMilli()) || it["id"] != "0" || it["size"] != 9.0 || it["headers"] == nil || it["content"] != nil {
		t.Fatalf("item %v", it)
	}
	code, m = get("/topics/t/scheduled?content=true&after=" + m["next"].(string))
	if items, _ := m["items"].([]any); code != 200 || len(items) != 1 || m["next"] != nil || items[0].(map[string]any)["content"] == nil {
		t.Fatalf("second page: %d %v", code, m)
	}
	if code, m = get("/topics/unknown/scheduled"); code != 200 || len(m["items"].([]any)) != 0 || m["pending"] != 0.0 {
		t.Fatalf("unknown topic: %d %v", code, m)
	}
	for url, word := range map[string]string{
		"/topics/t/scheduled?limit=0":                        "limit",
		"/topics/t/scheduled?limit=1001":                     "limit",
		"/topics/t/scheduled?limit=x":                        "limit",
		"/topics/t/scheduled?after=1.2":                      "after",
		"/topics/t/scheduled?after=a.b.c":                    "after",
		"/topics/t/scheduled?content=maybe":                  "content",
		"/topics/t/scheduled?content=TRUE":                   "content must be true or false",
		"/topics/t/scheduled?content=1":                      "content must be true or false",
		"/topics/.x/scheduled":                               "topic",
		"/topics/t/scheduled?limit=1&limit=3":                "query parameter limit is given 2 times; give it once",
		"/topics/t/scheduled?content=true&content=false":     "query parameter content is given 2 times",
		"/topics/t/scheduled?after=" + "x" + "&after=" + "y": "query parameter after is given 2 times",
	} {
		code, m := get(url)
		if msg, _ := m["error"].(string); code != 400 || !strings.Contains(msg, word) {
			t.Errorf("%s: %d %v, want 400 naming %s", url, code, m, word)
		}
	}
	u, _ := newTest(t, vfs.NewMem(), clk, func(o *Options) { o.Unsupported = "another backend" })
	r = mux.NewRouter()
	NewRoute(u).Register(r)
	if code, m := get("/topics/t/scheduled"); code != 501 {
		t.Errorf("unsupported: %d %v", code, m)
	}
}

// TestListLeavesOutUnacknowledged: a schedule whose record is written
// but not yet fsynced (not acknowledged) is not listed; once fsynced it
// is.
func TestListLeavesOutUnacknowledged(t *testing.T) {
	fs := vfs.NewMem()
	clk := &fakeClock{t: base()}
	s, _ := newTest(t, fs, clk, nil)
	ctx := context.Background()
	first, err := s.Schedule(ctx, "t", storedMsg("first", false), base().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	inSync, release := make(chan struct{}), make(chan struct{})
	var once, released sync.Once
	unblock := func() { released.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the scheduler's Stop, also on a failure
	fs.SetHook(func(op vfs.Op, _ string) error {
		if op == vfs.OpSync {
			once.Do(func() { close(inSync); <-release })
		}
		return nil
	})
	done := make(chan string)
	go func() {
		id, err := s.Schedule(ctx, "t", storedMsg("second", false), base().Add(time.Second))
		if err != nil {
			t.Error(err)
		}
		done <- id
	}()
	<-inSync
	p, err := s.List("t", ListOptions{Limit: 10})
	if err != nil || !slices.Equal(ids(p.Items), []string{first}) {
		t.Fatalf("while the second is being fsynced: %v, %v", ids(p.Items), err)
	}
	unblock()
	second := <-done
	fs.SetHook(nil)
	if p, err = s.List("t", ListOptions{Limit: 10}); err != nil || !slices.Equal(ids(p.Items), []string{second, first}) {
		t.Fatalf("once fsynced: %v, %v", ids(p.Items), err)
	}
}
