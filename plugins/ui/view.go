package ui

import (
	"cmp"
	"fmt"
	"html/template"
	"math"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mmmq/mmmq/modules/admin"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// maxDispatcherRows caps the topic rows of one dispatcher (those with the
// most lag first); the table says how many more there are.
const maxDispatcherRows = 50

// pageData is what the layout renders; the sections present are the
// non-nil ones.
type pageData struct {
	Title       string
	RefreshMS   int64
	CSRF        string
	Admin       bool
	AuthOn      bool
	Flash       string
	FlashBad    bool
	Overview    *overviewData
	Topics      *topicsData
	Dispatchers []dispatcherView
	ShowDisp    bool
	Groups      []groupRow
	GroupsMore  bool
	ShowGroups  bool
	Topic       *topicData
	Login       *loginData
	Error       string
}

// overviewData is the Overview section.
type overviewData struct {
	Version, Uptime, DataDir, DiskFree string
	DiskBad                            bool
	PublishRate, FsyncsPerMessage      string
	Topics, Dispatchers, Groups        int
	DispatchersHidden                  bool // not the principal's to see
	Failed                             []failedTopic
}

// dispatcherView is one dispatcher of the Dispatchers section.
type dispatcherView struct {
	Name, Host, Patterns, Source, DeadLetter string
	// Rate is its rate limit in a few words ("" when off).
	Rate string
	// Breaker is its circuit breaker's state in a few words ("" when
	// off); BreakerOpen says it is not closed.
	Breaker     string
	BreakerOpen bool
	// Concurrency is its adaptive concurrency limit in a few words (""
	// when off).
	Concurrency string
	// PausedBy says who paused it and when ("" when not paused).
	PausedBy string
	Paused   bool
	Rows     []dispatcherRow
	More     int
	Spark    string // polyline points, "" before the first sample
	SparkMax int64
}

// dispatcherRow is one (dispatcher, topic) row.
type dispatcherRow struct {
	Topic, State, NextRetry, Oldest, Error string
	// Keys is the ordering-key state under ordering "key": keys in
	// flight, parked keys (the oldest named), the window's fill.
	Keys string
	// Replay is the replay rate of a seek or redrive with a rate, in a
	// few words ("" when none).
	Replay string
	Lag    int64
	Dead   uint64
}

// groupRow is one consumer group of the Consumer groups section.
type groupRow struct {
	Topic, Group, Holder, Lease string
	Committed, Lag              int64
}

// keysText is a topic's ordering-key state in a few words: "3 keys in
// flight, 2 parked (oldest "customer-7", 4m ago), window 1200/1000000 held
// by "customer-7"".
func keysText(k *admin.KeyStatus, now time.Time) string {
	s := fmt.Sprintf("%d keys in flight, %d parked", k.InFlight, k.ParkedKeys)
	if len(k.Parked) > 0 {
		s += fmt.Sprintf(" (oldest %q, %s ago)", k.Parked[0].Key, age(now.Sub(k.Parked[0].Since)))
	}
	s += fmt.Sprintf(", window %d/%d", k.Unacked, k.MaxUnacked)
	if k.HeldBy != nil {
		s += fmt.Sprintf(" held by %q", *k.HeldBy)
	}
	return s
}

// replayText is a topic's replay rate in a few words: "replay at 50/s
// until offset 12345, 345 to go" (to go: until minus the checkpoint).
func replayText(r *dispatcher.Replay, committed int64) string {
	s := "replay at " + strconv.FormatFloat(r.Rate, 'f', -1, 64) + "/s"
	if r.Until == math.MaxInt64 {
		return s + " (a redrive is publishing)"
	}
	return s + fmt.Sprintf(" until offset %d, %d to go", r.Until, max(0, r.Until-committed))
}

// overview builds the Overview section from c.
func (u *UI) overview(c *collected, groups int) *overviewData {
	o := &overviewData{Version: contract.Version, Uptime: age(c.now.Sub(u.started)), Topics: len(c.rows),
		Dispatchers: len(c.dispatchers), DispatchersHidden: c.dispHidden, Groups: groups, Failed: c.failed, PublishRate: "—", FsyncsPerMessage: "—"}
	st := u.o.Storage
	if st.Backend == topicqueue.BackendJetStream {
		o.DataDir = "JetStream: " + redactServers(u.o.JetStreamServers)
		o.DiskFree = "—"
	} else {
		o.DataDir = st.RootDir
		if abs, err := filepath.Abs(st.RootDir); err == nil {
			o.DataDir = abs // a relative root-dir says nothing to the reader of the page
		}
		o.DiskFree, o.DiskBad = diskFree(st.RootDir, st.MinFreeBytes)
	}
	if c.windowSec > 0 {
		msgs := max(0, c.total-c.oldTotal)
		o.PublishRate = strconv.FormatFloat(float64(msgs)/c.windowSec, 'f', 1, 64)
		if msgs > 0 {
			o.FsyncsPerMessage = strconv.FormatFloat(float64(max(0, c.fsyncs-c.oldFsyncs))/float64(msgs), 'f', 3, 64)
		}
	}
	return o
}

// diskFree is the bytes free to non-root on dir's filesystem against the
// disk guard's minimum, and whether it is below it.
func diskFree(dir string, minFree int64) (string, bool) {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return "unknown (" + err.Error() + ")", true
	}
	free := int64(fs.Bavail) * int64(fs.Bsize)
	if minFree <= 0 {
		return humanBytes(free) + " (disk guard off)", false
	}
	return fmt.Sprintf("%s (guard: %s)", humanBytes(free), humanBytes(minFree)), free < minFree
}

// redactServers is a comma-separated list of NATS server URLs without
// their user information (user, password or token).
func redactServers(s string) string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		pu, err := url.Parse(part)
		if err != nil || pu.Host == "" {
			out = append(out, "(unparsable URL)")
			continue
		}
		out = append(out, pu.Scheme+"://"+pu.Host)
	}
	return strings.Join(out, ", ")
}

// dispatcherViews builds the Dispatchers section: the rows of the topics
// the request may read, the most lag first, at most maxDispatcherRows each.
func (u *UI) dispatcherViews(c *collected, may func(string) bool) []dispatcherView {
	var out []dispatcherView
	for _, st := range c.dispatchers {
		v := dispatcherView{Name: st.Name, Host: st.Host, Patterns: strings.Join(st.Patterns, " "), Source: st.Source,
			DeadLetter: st.DeadLetterTopic, Paused: st.Paused}
		if rl := st.RateLimit; rl != nil {
			v.Rate = fmt.Sprintf("at most %s/s, burst %d, %d waiting", strconv.FormatFloat(rl.Limit, 'f', -1, 64), rl.Burst, rl.Waiting)
		}
		if st.Paused && st.PauseReason != "" {
			v.PausedBy = "paused by " + string(st.PauseReason)
			if st.PausedAt != nil {
				v.PausedBy += ", " + age(max(0, c.now.Sub(*st.PausedAt))) + " ago"
			}
		}
		if cc := st.Concurrency; cc != nil {
			v.Concurrency = fmt.Sprintf("concurrency %d/%d, %d in flight", cc.Limit, cc.Max, cc.InFlight)
		}
		if br := st.Breaker; br != nil {
			v.Breaker, v.BreakerOpen = "breaker "+string(br.State), br.State != "closed"
			if br.NextProbe != nil {
				v.Breaker += ", probe in " + age(max(0, br.NextProbe.Sub(c.now)))
			}
		}
		for _, t := range st.Topics {
			if !may(t.Topic) {
				continue
			}
			row := dispatcherRow{Topic: t.Topic, State: t.State, Lag: t.Lag, Error: t.LastError, Dead: t.DeadLettered, Oldest: "—"}
			if t.LastError != "" && t.LastErrorAt != nil {
				row.Error = age(c.now.Sub(*t.LastErrorAt)) + " ago: " + t.LastError
			}
			if t.OldestUnackedAgeSeconds > 0 {
				row.Oldest = age(time.Duration(t.OldestUnackedAgeSeconds * float64(time.Second)))
			}
			if t.State == "backoff" && t.NextRetry != nil {
				row.NextRetry = fmt.Sprintf("next retry in %ds", int64(math.Ceil(max(0, t.NextRetry.Sub(c.now).Seconds()))))
			}
			if k := t.Keys; k != nil {
				row.Keys = keysText(k, c.now)
			}
			if r := t.Replay; r != nil {
				row.Replay = replayText(r, t.Committed)
			}
			v.Rows = append(v.Rows, row)
		}
		slices.SortStableFunc(v.Rows, func(a, b dispatcherRow) int {
			return cmp.Or(cmp.Compare(b.Lag, a.Lag), cmp.Compare(a.Topic, b.Topic))
		})
		if len(v.Rows) > maxDispatcherRows {
			v.More, v.Rows = len(v.Rows)-maxDispatcherRows, v.Rows[:maxDispatcherRows]
		}
		if len(v.Rows) == 0 {
			state := "idle"
			if st.Paused {
				state = "paused"
				if st.PauseReason == "auto" {
					state = "paused (auto: endpoint failing)"
				}
			}
			v.Rows = []dispatcherRow{{State: state, Oldest: "—"}}
		}
		var now int64 // the total lag now, the sparkline's last point
		for _, t := range st.Topics {
			now += t.Lag
		}
		v.Spark, v.SparkMax = sparkline(append(u.s.lag(st.Name), now))
		out = append(out, v)
	}
	return out
}

// Sparkline geometry: the SVG's viewBox is sparkW × sparkH.
const (
	sparkW = 120
	sparkH = 24
)

// sparkline is the points of an SVG polyline of lags (oldest first, the
// last sparkPoints of them, scaled to the largest) and that largest. One
// lag is drawn as a flat line.
func sparkline(lags []int64) (string, int64) {
	if len(lags) == 0 {
		return "", 0
	}
	if len(lags) == 1 {
		lags = []int64{lags[0], lags[0]}
	}
	if len(lags) > sparkPoints {
		lags = lags[len(lags)-sparkPoints:]
	}
	top := max(slices.Max(lags), 1)
	var b strings.Builder
	step := float64(sparkW) / float64(sparkPoints-1)
	x0 := float64(sparkW) - step*float64(len(lags)-1)
	for i, l := range lags {
		y := float64(sparkH-1) - float64(l)/float64(top)*float64(sparkH-2)
		fmt.Fprintf(&b, "%.1f,%.1f ", x0+step*float64(i), y)
	}
	return strings.TrimSpace(b.String()), top
}

// groupRows is the Consumer groups section from the groups c listed.
func groupRows(c *collected) ([]groupRow, bool) {
	var out []groupRow
	topics := make([]string, 0, len(c.groups))
	for t := range c.groups {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	for _, t := range topics {
		for _, g := range c.groups[t] {
			row := groupRow{Topic: t, Group: g.Group, Committed: g.Committed, Lag: g.Lag, Holder: "—", Lease: "—"}
			if g.InFlight != nil {
				row.Holder = fmt.Sprintf("shared: %d sessions, %d in flight", len(g.Sessions), *g.InFlight)
			} else if g.Held {
				row.Holder = "held"
				if g.LeaseExpiresInMs != nil {
					row.Lease = age(time.Duration(*g.LeaseExpiresInMs) * time.Millisecond)
				}
			}
			out = append(out, row)
		}
	}
	if len(out) > maxGroupRows {
		return out[:maxGroupRows], true
	}
	return out, false
}

// age is d rounded to whole seconds below 1 minute ("12s"), else minutes
// and seconds ("3m12s"), hours and minutes ("5h3m"), or days ("2d5h").
func age(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", max(s, 0))
	case s < 3600:
		return fmt.Sprintf("%dm%ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh%dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd%dh", s/86400, s%86400/3600)
}

// humanBytes is n in B, KiB, MiB, GiB or TiB with one decimal.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), 0
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB"}
	for v /= unit; v >= unit && i < len(units)-1; v /= unit {
		i++
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

// readersText is "name: lag N, ..." for a topic row's readers.
func readersText(rs []reader) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("%s: lag %d", r.Name, r.Lag)
	}
	return strings.Join(parts, ", ")
}

// rate is a topic row's rate, "—" before a minute's sample exists.
func rateText(r topicRow) string {
	if !r.rateKnown {
		return "—"
	}
	return strconv.FormatFloat(r.Rate, 'f', 1, 64)
}

var funcs = template.FuncMap{"readers": readersText, "rate": rateText, "bytes": humanBytes}
