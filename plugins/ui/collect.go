package ui

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/mmmq/mmmq/modules/admin"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// maxGroupRows caps the consumer-group table.
const maxGroupRows = 200

// topicRow is one topic as the topic table shows it.
type topicRow struct {
	Name               string
	Start, Next, Bytes int64
	Segments           int
	Rate               float64 // messages/s over the last minute
	Lag                int64   // the largest lag of a reader
	Readers            []reader
	rateKnown          bool
	Failed             string // the log's failure, "" when healthy
	// HeldBy is the reader that held the topic's retention back at the
	// last retention pass (keep-unconsumed), nil when none did.
	HeldBy *contract.RetentionHold
}

// reader is a dispatcher or group reading a topic, with its lag.
type reader struct {
	Name string
	Lag  int64
}

// failedTopic is a topic whose log failed, or that recovery quarantined.
type failedTopic struct {
	Name, Cause string
}

// collected is what one request gathers once: the topics the principal
// may read (with their stats), every dispatcher's status, the readers of
// each topic, and the groups listed so far.
type collected struct {
	now           time.Time
	rows          []topicRow
	failed        []failedTopic
	total, fsyncs int64
	windowSec     float64 // seconds since the oldest sample; 0: none yet
	oldTotal      int64
	oldFsyncs     int64
	dispatchers   []admin.Status
	// dispHidden: the principal lacks the admin permission, which the
	// admin API asks to list dispatchers: none are collected or shown.
	dispHidden bool
	// mayGroups reports whether the principal may see a topic's groups.
	mayGroups func(topic string) bool
	readers   map[string][]reader // topic → dispatchers reading it
	lag       map[string]int64    // topic → largest reader lag
	groups    map[string][]groups.GroupInfo
}

func newCollected() *collected {
	return &collected{now: time.Now(), readers: map[string][]reader{}, lag: map[string]int64{}, groups: map[string][]groups.GroupInfo{}}
}

// mayRead reports whether r's principal (if any) may read topic, without
// an audit line (a listing's filter, as GET /topics does).
func mayRead(r *http.Request, topic string) bool {
	p, ok := contract.PrincipalFrom(r.Context())
	return !ok || p.Can(contract.ActionRead, topic, "")
}

// mayListGroups reports whether r's principal (if any) may see topic's
// consumer groups: the consume permission on it, as
// GET /topics/{topic}/groups asks.
func mayListGroups(r *http.Request, topic string) bool {
	p, ok := contract.PrincipalFrom(r.Context())
	return !ok || p.Can(contract.ActionConsume, topic, "")
}

// isAdmin reports whether r's principal may administer dispatchers.
func isAdmin(r *http.Request) bool {
	return contract.Authorize(r.Context(), contract.ActionAdmin, "", "") == nil
}

// collect gathers the topics and dispatchers (not the groups: see
// listGroups) as r's principal may see them.
func (u *UI) collect(r *http.Request) *collected {
	c := newCollected()
	old, haveOld := u.s.oldest()
	if haveOld {
		if dt := c.now.Sub(old.at).Seconds(); dt >= 1 {
			c.windowSec, c.oldTotal, c.oldFsyncs = dt, old.total, old.fsyncs
		}
	}
	for _, q := range u.o.Registry.List() {
		if !mayRead(r, q.Name()) {
			continue
		}
		st := q.Stats()
		row := topicRow{Name: q.Name(), Start: st.StartOffset, Next: st.NextOffset, Bytes: st.Bytes, Segments: st.Segments, Failed: st.Failed}
		if c.windowSec > 0 {
			prev, ok := old.next[row.Name]
			if !ok && u.o.Storage.Backend != topicqueue.BackendJetStream {
				// Created since the oldest sample (the sampler starts after
				// startup recovery opened the stored topics): all of it is
				// new. A topic found on a shared backend may not be.
				prev, ok = st.StartOffset, true
			}
			if ok {
				row.Rate, row.rateKnown = max(0, float64(st.NextOffset-prev)/c.windowSec), true
			}
		}
		c.total += st.NextOffset
		c.fsyncs += st.Fsyncs
		if st.Failed != "" {
			c.failed = append(c.failed, failedTopic{Name: row.Name, Cause: st.Failed})
		}
		c.rows = append(c.rows, row)
	}
	for name, err := range u.o.Registry.Quarantined() {
		if mayRead(r, name) {
			c.failed = append(c.failed, failedTopic{Name: name, Cause: "quarantined: " + err.Error()})
		}
	}
	slices.SortFunc(c.failed, func(a, b failedTopic) int { return cmp.Compare(a.Name, b.Name) })
	c.mayGroups = func(t string) bool { return mayListGroups(r, t) }
	if c.dispHidden = !isAdmin(r); !c.dispHidden {
		c.dispatchers = u.statuses()
	}
	for _, st := range c.dispatchers {
		for _, t := range st.Topics {
			c.readers[t.Topic] = append(c.readers[t.Topic], reader{Name: st.Name, Lag: t.Lag})
			c.lag[t.Topic] = max(c.lag[t.Topic], t.Lag)
		}
	}
	return c
}

// statuses is every dispatcher's status (admin.Admin.Status), sorted by
// name; none without the admin module.
func (u *UI) statuses() []admin.Status {
	if u.o.Admin == nil {
		return nil
	}
	var out []admin.Status
	for _, d := range u.o.Admin.List() {
		if st, err := u.o.Admin.Status(d.Name); err == nil { // else removed meanwhile
			out = append(out, st)
		}
	}
	return out
}

// listGroups lists the consumer groups of the topics with a group the
// coordinator used since it started (readable ones, until maxGroupRows
// groups), noting each group's lag as a reader lag of its topic.
// Listing every topic would read each one's stored checkpoints.
func (u *UI) listGroups(r *http.Request, c *collected) {
	if u.o.Groups == nil {
		return
	}
	n := 0
	for _, t := range u.o.Groups.Topics() {
		if n >= maxGroupRows {
			break
		}
		if mayRead(r, t) {
			n += len(u.groupsOf(c, t))
		}
	}
}

// groupsOf lists the groups of topic once per request (nil without a
// coordinator or on an error: a topic deleted meanwhile).
func (u *UI) groupsOf(c *collected, topic string) []groups.GroupInfo {
	if u.o.Groups == nil || (c.mayGroups != nil && !c.mayGroups(topic)) {
		return nil
	}
	if gs, ok := c.groups[topic]; ok {
		return gs
	}
	l, err := u.o.Groups.List(topic)
	if err != nil {
		c.groups[topic] = nil
		return nil
	}
	c.groups[topic] = l.Groups
	for _, g := range l.Groups {
		c.lag[topic] = max(c.lag[topic], g.Lag)
	}
	return l.Groups
}

// withReaders fills row's readers: the dispatchers, then the groups.
func (u *UI) withReaders(c *collected, row topicRow) topicRow {
	row.Readers = append([]reader(nil), c.readers[row.Name]...)
	for _, g := range u.groupsOf(c, row.Name) {
		row.Readers = append(row.Readers, reader{Name: g.Group, Lag: g.Lag})
	}
	row.Lag = c.lag[row.Name]
	if u.o.Holds != nil {
		if h, ok := u.o.Holds.RetentionHold(row.Name); ok {
			row.HeldBy = &h
		}
	}
	return row
}

// sortKeys are the topic table's sort columns.
var sortKeys = map[string]func(a, b topicRow) int{
	"name":  func(a, b topicRow) int { return cmp.Compare(a.Name, b.Name) },
	"next":  func(a, b topicRow) int { return cmp.Compare(a.Next, b.Next) },
	"bytes": func(a, b topicRow) int { return cmp.Compare(a.Bytes, b.Bytes) },
	"rate":  func(a, b topicRow) int { return cmp.Compare(a.Rate, b.Rate) },
	"lag":   func(a, b topicRow) int { return cmp.Compare(a.Lag, b.Lag) },
}

// topicsData is one page of the topic table.
type topicsData struct {
	Rows             []topicRow
	Total            int
	Page, Pages      int
	Sort, Order      string
	PrevURL, NextURL string
	Columns          []column
}

// column is a header of the topic table; a sortable one (Key set) links
// to the table sorted by it, the other way round when it is the current
// sort (Mark ▲ or ▼).
type column struct {
	Key, Label, URL, Mark string
}

// topicsPage sorts c's rows by sortKey (name, next, bytes, rate or lag;
// anything else: name) in order (asc unless "desc"), then name, and
// returns page (1-based, clamped), with the readers of its rows only.
func (u *UI) topicsPage(c *collected, sortKey, order string, page int) *topicsData {
	cmpFn, ok := sortKeys[sortKey]
	if !ok {
		sortKey = "name"
		cmpFn = sortKeys["name"]
	}
	if order != "desc" {
		order = "asc"
	}
	if sortKey == "lag" {
		// The groups' lag counts for the topics listGroups listed.
		for i := range c.rows {
			c.rows[i].Lag = c.lag[c.rows[i].Name]
		}
	}
	slices.SortStableFunc(c.rows, func(a, b topicRow) int {
		d := cmpFn(a, b)
		if order == "desc" {
			d = -d
		}
		if d == 0 {
			d = cmp.Compare(a.Name, b.Name)
		}
		return d
	})
	per := u.o.Config.TopicsPerPage
	pages := max(1, (len(c.rows)+per-1)/per)
	page = min(max(page, 1), pages)
	lo, hi := (page-1)*per, min(page*per, len(c.rows))
	td := &topicsData{Total: len(c.rows), Page: page, Pages: pages, Sort: sortKey, Order: order}
	for _, row := range c.rows[lo:hi] {
		td.Rows = append(td.Rows, u.withReaders(c, row))
	}
	link := func(p int, s, o string) string { return fmt.Sprintf("/ui/topics?page=%d&sort=%s&order=%s", p, s, o) }
	if page > 1 {
		td.PrevURL = link(page-1, sortKey, order)
	}
	if page < pages {
		td.NextURL = link(page+1, sortKey, order)
	}
	for _, k := range []struct{ key, label string }{{"name", "Topic"}, {"", "Start"}, {"next", "Next offset"}, {"bytes", "Bytes"},
		{"", "Segments"}, {"rate", "Msg/s"}, {"lag", "Readers (lag)"}} {
		col := column{Key: k.key, Label: k.label}
		if k.key != "" {
			col.URL = link(1, k.key, "asc")
		}
		if k.key != "" && k.key == sortKey {
			col.Mark = "▲"
			if order == "asc" {
				col.URL = link(1, k.key, "desc")
			} else {
				col.Mark = "▼"
			}
		}
		td.Columns = append(td.Columns, col)
	}
	return td
}
