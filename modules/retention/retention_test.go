package retention

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// env is a registry on an in-memory filesystem.
type env struct {
	t   *testing.T
	fs  *vfs.MemFS
	reg *topicqueue.Registry
}

func newEnv(t *testing.T, segMax int64) *env {
	t.Helper()
	e := &env{t: t, fs: vfs.NewMem()}
	e.reg = topicqueue.New(topicqueue.Options{Root: "/data", Storage: storage.Options{FS: e.fs, Logger: zaptest.NewLogger(t), SegmentMaxBytes: segMax}})
	t.Cleanup(func() {
		if err := e.reg.Close(); err != nil {
			t.Error(err)
		}
	})
	return e
}

// message is a stored message JSON of topic stored at ts, about 120 bytes.
func message(topic string, i int, ts time.Time) []byte {
	return fmt.Appendf(nil, `{"topic":{"name":%q},"content":{"i":"%06d","p":"%s"},"timestamp":%d}`, topic, i, strings.Repeat("x", 40), ts.UnixMilli())
}

func (e *env) publish(topic string, n int, ts time.Time) *topicqueue.TopicQueue {
	e.t.Helper()
	q, err := e.reg.GetOrCreate(topic)
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := q.Log().Append(context.Background(), message(topic, int(q.HighWatermark()), ts), contract.Durable); err != nil {
			e.t.Fatal(err)
		}
	}
	return q
}

// dirBytes is the size of the .mmm and .idx files of topic.
func (e *env) dirBytes(topic string) int64 {
	e.t.Helper()
	ents, err := e.fs.List("/data/" + topic)
	if err != nil {
		e.t.Fatal(err)
	}
	var n int64
	for _, de := range ents {
		if strings.HasSuffix(de.Name, storage.SegmentExt) || strings.HasSuffix(de.Name, storage.IndexExt) {
			f, err := e.fs.Open("/data/" + topic + "/" + de.Name)
			if err != nil {
				e.t.Fatal(err)
			}
			size, err := f.Size()
			f.Close()
			if err != nil {
				e.t.Fatal(err)
			}
			n += size
		}
	}
	return n
}

// TestBySizeBounded is the acceptance check of size retention: 4 KiB
// segments, max-bytes 40960, 5,000 publishes with a pass every 20: after
// every pass the topic directory holds at most max-bytes plus one segment,
// the start offset advances, offset 0 answers OFFSET_EXPIRED (410) and
// everything from the start offset reads back.
func TestBySizeBounded(t *testing.T) {
	const segMax, maxBytes = 4096, 40960
	e := newEnv(t, segMax)
	r := New(e.reg, Options{Default: contract.RetentionPolicy{MaxBytes: maxBytes}, Logger: zaptest.NewLogger(t)})
	entry := int64(storage.EntrySize(len(message("sized", 0, time.Now())))) + storage.IndexEntrySize
	var q *topicqueue.TopicQueue
	most := int64(0)
	for i := 0; i < 5000/20; i++ {
		q = e.publish("sized", 20, time.Now())
		r.Pass()
		most = max(most, e.dirBytes("sized"))
	}
	if limit := maxBytes + segMax + entry; most > limit {
		t.Fatalf("topic directory held %d bytes after a pass, limit max-bytes + one segment = %d", most, limit)
	}
	start := q.StartOffset()
	tot := r.Totals()
	if start == 0 || tot.Segments == 0 || tot.Entries != start || q.Stats().StartOffset != start {
		t.Fatalf("start offset %d, totals %+v", start, tot)
	}
	_, err := q.Read(0)
	var oe *contract.OffsetExpiredError
	if !errors.As(err, &oe) || oe.StartOffset != start || contract.Classify(err).Status != 410 {
		t.Fatalf("read 0: %v, want 410 OFFSET_EXPIRED with start offset %d", err, start)
	}
	for off := start; off < q.HighWatermark(); off++ {
		p, err := q.Read(off)
		if err != nil || !strings.Contains(string(p), fmt.Sprintf(`"i":"%06d"`, off)) {
			t.Fatalf("offset %d: %s %v", off, p, err)
		}
	}
	t.Logf("5,000 publishes: start offset %d, %d segments deleted, largest directory after a pass %d bytes (limit %d)", start, tot.Segments, most, maxBytes+segMax+entry)
}

// TestByAgeWithClock: a segment goes once its newest message is older than
// max-age on the Retainer's clock (no sleeping); the active segment stays.
func TestByAgeWithClock(t *testing.T) {
	e := newEnv(t, 1024)
	base := time.UnixMilli(1_800_000_000_000)
	var mu sync.Mutex
	now := base
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	set := func(t time.Time) { mu.Lock(); now = t; mu.Unlock() }
	r := New(e.reg, Options{Default: contract.RetentionPolicy{MaxAge: 2 * time.Second}, Now: clock})
	e.publish("aged", 20, base)                       // several segments at base
	q := e.publish("aged", 20, base.Add(time.Minute)) // more, a minute later
	if res := r.Pass(); res.Segments != 0 {
		t.Fatalf("nothing is 2s old yet: %+v", res)
	}
	set(base.Add(2 * time.Second)) // exactly max-age: not older
	if res := r.Pass(); res.Segments != 0 {
		t.Fatalf("at max-age: %+v", res)
	}
	set(base.Add(3 * time.Second))
	res := r.Pass()
	if res.Segments == 0 || q.StartOffset() == 0 || q.StartOffset() > 20 {
		t.Fatalf("after 3s: %+v, start %d", res, q.StartOffset())
	}
	set(base.Add(time.Hour))
	r.Pass()
	if st := q.Stats(); st.Segments != 1 || q.StartOffset() != st.ActiveSegment {
		t.Fatalf("after an hour: %+v", st)
	}
}

// TestRulesFirstMatchWins: per-pattern overrides, the first matching one
// wins; a limit an override leaves out is the broker-wide one (here
// max-bytes 1: delete every sealed segment), one it gives as 0 is
// forever / unlimited; a topic no rule matches uses the broker-wide limits.
func TestRulesFirstMatchWins(t *testing.T) {
	e := newEnv(t, 512)
	hour, zero, one := time.Hour, int64(0), int64(1)
	o, err := OptionsFromConfig(Config{MaxBytes: 1, Topics: TopicsConfig{
		{Pattern: "metrics.keep", MaxBytes: &zero}, // unlimited; max-age inherited: 0, forever
		{Pattern: "metrics.**", MaxAge: &hour},     // max-bytes inherited: 1
		{Pattern: "metrics.keep", MaxBytes: &one},  // never reached
	}})
	if err != nil {
		t.Fatal(err)
	}
	for topic, want := range map[string]contract.RetentionPolicy{
		"metrics.keep": {},
		"metrics.cpu":  {MaxAge: time.Hour, MaxBytes: 1},
		"orders":       {MaxBytes: 1},
	} {
		if got := o.PolicyFor(topic); got != want {
			t.Errorf("PolicyFor(%s) = %+v, want %+v", topic, got, want)
		}
	}
	r := New(e.reg, o)
	for _, topic := range []string{"metrics.cpu", "metrics.keep", "orders"} {
		e.publish(topic, 30, time.Now())
	}
	r.Pass()
	for topic, deleted := range map[string]bool{"metrics.cpu": true, "metrics.keep": false, "orders": true} {
		q, _ := e.reg.Get(topic)
		if got := q.StartOffset() > 0; got != deleted {
			t.Errorf("%s: start offset %d, want deletion %v", topic, q.StartOffset(), deleted)
		}
	}
	if o, _ := OptionsFromConfig(Config{Topics: TopicsConfig{{Pattern: "x", MaxBytes: &one}}}); !New(e.reg, o).Enabled() {
		t.Error("a rule with a limit enables retention")
	}
	if New(e.reg, Options{}).Enabled() {
		t.Error("the default configuration deletes nothing")
	}
	_, err = OptionsFromConfig(Config{Topics: TopicsConfig{{Pattern: "a..b"}}})
	if err == nil || !strings.Contains(err.Error(), "mmmq.broker.retention.topics[0].pattern") {
		t.Fatalf("invalid pattern: %v", err)
	}
}

// fakeGroups holds offset for groups active since a time.
type fakeGroups struct {
	offset int64
	active time.Time
}

func (f fakeGroups) HoldingGroup(topic string, since time.Time) (string, int64, bool) {
	return "billing", f.offset, !f.active.Before(since)
}

func (f fakeGroups) CheckpointError(string, time.Time) error { return nil }

// TestKeepUnconsumed: a configured dispatcher's checkpoint and a recently
// active group hold the segments they have not read; the checkpoint of a
// dispatcher no longer configured and an idle group hold nothing. The
// reader furthest behind is the topic's RetentionHold, with the bytes it
// kept; none when nothing is held.
func TestKeepUnconsumed(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name      string
		configure bool // "d" is in the dispatcher set
		groups    GroupHolder
		wantMax   int64  // start offset at most (0: no bound)
		wantMin   int64  // and at least
		holder    string // "kind name@committed" of RetentionHold, "" for none
	}{
		{name: "configured dispatcher at 25 holds", configure: true, wantMax: 25, wantMin: 1, holder: "dispatcher d@25"},
		{name: "unconfigured dispatcher holds nothing", wantMin: 50},
		{name: "active group at 10 holds", groups: fakeGroups{offset: 10, active: now.Add(-time.Hour)}, wantMax: 10, wantMin: 1, holder: "group billing@10"},
		{name: "idle group holds nothing", groups: fakeGroups{offset: 10, active: now.Add(-25 * time.Hour)}, wantMin: 50},
		{name: "the lower of both", configure: true, groups: fakeGroups{offset: 10, active: now}, wantMax: 10, wantMin: 1, holder: "group billing@10"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 256)
			q := e.publish("held", 60, now)
			if err := q.Commit("d", 25); err != nil {
				t.Fatal(err)
			}
			o := Options{Default: contract.RetentionPolicy{MaxBytes: 1}, KeepUnconsumed: true, Groups: tc.groups, Now: func() time.Time { return now }}
			if tc.configure {
				set, err := dispatcher.SetOf(dispatcher.New("d", dispatcher.Host{Protocol: dispatcher.HTTP, Address: "localhost", Port: 8081}, dispatcher.MustPattern("**")))
				if err != nil {
					t.Fatal(err)
				}
				o.Dispatchers = set
			}
			r := New(e.reg, o)
			r.Pass()
			if s := q.StartOffset(); s < tc.wantMin || (tc.wantMax > 0 && s > tc.wantMax) {
				t.Fatalf("start offset %d, want in [%d, %d]", s, tc.wantMin, tc.wantMax)
			}
			h, held := r.RetentionHold("held")
			got := ""
			if held {
				got = fmt.Sprintf("%s %s@%d", h.Kind, h.Name, h.Committed)
				if h.HeldBytes <= 0 {
					t.Errorf("held, but HeldBytes %d", h.HeldBytes)
				}
			}
			if got != tc.holder || (len(r.Holds()) == 1) != held {
				t.Errorf("RetentionHold = %q (Holds %v), want %q", got, r.Holds(), tc.holder)
			}
		})
	}
}

// TestFxModuleRunsLoop: the module builds from the config, its loop runs a
// pass every check-interval between start and stop, and an invalid
// pattern fails startup naming the key.
func TestFxModuleRunsLoop(t *testing.T) {
	cfg := config.Default()
	config.EditSection(cfg, topicqueue.StorageSection, func(st *topicqueue.StorageConfig) { st.RootDir = t.TempDir() })
	config.EditSection(cfg, topicqueue.SegmentSection, func(seg *topicqueue.SegmentConfig) {
		seg.MaxBytes = 1024
		seg.MaxRecordBytes = 1024
	})
	config.EditSection(cfg, ConfigSection, func(r *Config) {
		r.MaxBytes = 1
		r.CheckInterval = time.Millisecond
	})
	var r *Retainer
	var reg *topicqueue.Registry
	app := fxtest.New(t,
		config.Module, config.Supply(cfg),
		fx.Supply(zaptest.NewLogger(t)),
		storage.Module, topicqueue.Module,
		Module,
		fx.Populate(&r, &reg),
	)
	app.RequireStart()
	q, err := reg.GetOrCreate("looped")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		if _, err := q.Log().Append(context.Background(), message("looped", i, time.Now()), contract.Durable); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for q.StartOffset() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	app.RequireStop()
	if q.StartOffset() == 0 || r.Totals().Segments == 0 {
		t.Fatalf("the loop deleted nothing: %+v", r.Totals())
	}

	config.EditSection(cfg, ConfigSection, func(r *Config) { r.Topics = TopicsConfig{{Pattern: "a.***"}} })
	bad := fx.New(fx.NopLogger, config.Module, config.Supply(cfg), fx.Supply(zaptest.NewLogger(t)), storage.Module, topicqueue.Module, Module, fx.Populate(&r))
	if err := bad.Err(); err == nil || !strings.Contains(err.Error(), "mmmq.broker.retention.topics[0].pattern") {
		t.Fatalf("invalid pattern: %v", err)
	}
}

// TestDeleteWhileRetentionRuns: retention passes, topic deletions and
// publishes (which create the topic again after each deletion) run at the
// same time. No pass fails (a topic deleted under a pass is skipped), every
// publish either lands or is refused because its topic was deleted under
// it, and afterwards a fresh registry recovers the directory (nothing
// half-deleted is refused) with every offset from the start offset to the
// high watermark readable.
func TestDeleteWhileRetentionRuns(t *testing.T) {
	const rounds = 60
	e := newEnv(t, 512)
	r := New(e.reg, Options{Default: contract.RetentionPolicy{MaxBytes: 1024}, Logger: zaptest.NewLogger(t)})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var failedPasses, published int
	wg.Add(2)
	go func() { // retention, as fast as it goes
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			failedPasses += r.Pass().Failed
		}
	}()
	go func() { // publishes; each one creates the topic again if needed
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			q, err := e.reg.GetOrCreate("churn")
			if err != nil {
				t.Errorf("create: %v", err)
				return
			}
			_, err = q.Log().Append(context.Background(), message("churn", i, time.Now()), contract.Durable)
			switch {
			case err == nil:
				published++
			case errors.Is(err, contract.ErrClosed):
				// deleted under this publish: refused, not acknowledged
			default:
				t.Errorf("publish: %v", err)
				return
			}
		}
	}()
	deleted := 0
	for i := 0; i < rounds; i++ {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
			if q, ok := e.reg.Get("churn"); ok && q.HighWatermark() > 20 {
				break
			}
			if time.Now().After(deadline) {
				close(stop)
				wg.Wait()
				t.Fatal("publishes stopped: the topic never reached 21 messages")
			}
		}
		if err := e.reg.Delete("churn"); err == nil {
			deleted++
		} else if !errors.Is(err, topicqueue.ErrTopicBusy) {
			t.Fatalf("delete: %v", err)
		}
	}
	close(stop)
	wg.Wait()
	if failedPasses != 0 || deleted == 0 || r.Totals().Segments == 0 {
		t.Fatalf("%d failed passes, %d deletions, totals %+v", failedPasses, deleted, r.Totals())
	}
	// The last incarnation gets old enough for retention too, so recovery
	// below meets a topic that was deleted, recreated and cut at the head.
	e.publish("churn", 60, time.Now())
	r.Pass()
	if err := e.reg.Close(); err != nil {
		t.Fatal(err)
	}
	reg := topicqueue.New(topicqueue.Options{Root: "/data", Storage: storage.Options{FS: e.fs, Logger: zaptest.NewLogger(t), SegmentMaxBytes: 512}})
	defer reg.Close()
	if rep, err := reg.OpenAll(topicqueue.OnCorruptionFail, zaptest.NewLogger(t)); err != nil {
		t.Fatalf("recovery after the churn: %v (%+v)", err, rep)
	}
	q, ok := reg.Get("churn")
	if !ok || q.StartOffset() == 0 {
		t.Fatalf("topic churn after recovery: found %t, start offset %d (want > 0)", ok, q.StartOffset())
	}
	for off := q.StartOffset(); off < q.HighWatermark(); off++ {
		if _, err := q.Read(off); err != nil {
			t.Fatalf("offset %d after recovery: %v", off, err)
		}
	}
	t.Logf("%d publishes, %d deletions, %d segments deleted by retention; recovered start %d, next %d",
		published, deleted, r.Totals().Segments, q.StartOffset(), q.HighWatermark())
}

// TestJetStreamBackendRunsNoLoop: with backend jetstream the streams
// enforce the policies; the Retainer deletes nothing, starts no loop and
// logs nothing, but still refuses an invalid pattern.
func TestJetStreamBackendRunsNoLoop(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	rc := Config{MaxAge: time.Hour, MaxBytes: 1 << 20, CheckInterval: time.Millisecond,
		Topics: TopicsConfig{{Pattern: "a.**", MaxBytes: ptr64(1)}}}
	js := topicqueue.StorageConfig{Backend: topicqueue.BackendJetStream}
	r, err := NewFromConfig(Params{Config: rc, Storage: js, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Enabled() {
		t.Fatal("enabled with backend jetstream")
	}
	r.Start()
	r.Stop()
	if r.stop != nil || logs.Len() != 0 {
		t.Fatalf("loop started or logged: %v", logs.All())
	}
	local, err := NewFromConfig(Params{Config: rc, Storage: topicqueue.StorageConfig{Backend: topicqueue.BackendLocal}, Logger: zap.NewNop()})
	if err != nil || !local.Enabled() {
		t.Fatalf("local: enabled %v, %v", local.Enabled(), err)
	}
	rc.Topics[0].Pattern = "a.***"
	if _, err := NewFromConfig(Params{Config: rc, Storage: js, Logger: zap.NewNop()}); err == nil {
		t.Fatal("invalid pattern accepted")
	}
}

func ptr64(v int64) *int64 { return &v }
