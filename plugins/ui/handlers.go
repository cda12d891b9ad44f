package ui

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gorilla/mux"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/admin"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// maxContent is the bytes of a stored message a topic page shows.
const maxContent = 512

// topicData is a topic's page.
type topicData struct {
	Row      topicRow
	Messages []messageRow
	N        int
	Error    string
}

// messageRow is one stored message.
type messageRow struct {
	Offset            int64
	Time, ID, Content string
}

// base is the page data every page of session s starts from.
func (u *UI) base(r *http.Request, s session, title string) *pageData {
	d := &pageData{Title: title, RefreshMS: u.o.Config.Refresh.Milliseconds(), CSRF: u.csrf(s.key()), Admin: isAdmin(r), AuthOn: u.authOn()}
	if id := r.URL.Query().Get("flash"); id != "" {
		if f, ok := u.flash.take(id, s.key(), time.Now()); ok {
			d.Flash, d.FlashBad = f.text, f.bad
		}
	}
	return d
}

// handleMain is GET /ui/: overview, the first page of topics (by name),
// dispatchers and groups.
func (u *UI) handleMain(w http.ResponseWriter, r *http.Request, s session) {
	c := u.collect(r)
	u.listGroups(r, c)
	d := u.base(r, s, "mmmq status")
	d.Topics = u.topicsPage(c, "name", "asc", 1)
	d.Dispatchers, d.ShowDisp = u.dispatcherViews(c, func(t string) bool { return mayRead(r, t) }), true
	d.Groups, d.GroupsMore = groupRows(c)
	d.ShowGroups = true
	d.Overview = u.overview(c, len(d.Groups))
	u.render(w, http.StatusOK, d)
}

// handleTopics is GET /ui/topics?page=N&sort=S&order=asc|desc.
func (u *UI) handleTopics(w http.ResponseWriter, r *http.Request, s session) {
	q := r.URL.Query()
	page, _ := strconv.Atoi(q.Get("page"))
	c := u.collect(r)
	if q.Get("sort") == "lag" {
		u.listGroups(r, c)
	}
	d := u.base(r, s, "Topics")
	d.Topics = u.topicsPage(c, q.Get("sort"), q.Get("order"), page)
	u.render(w, http.StatusOK, d)
}

// handleTopic is GET /ui/topics/{topic}?n=N: 404 for an invalid or unknown
// name (never echoed: the page says only that there is no such topic),
// 403 when the principal may not read it.
func (u *UI) handleTopic(w http.ResponseWriter, r *http.Request, s session) {
	// A valid topic name cannot hold '<', '>', '"', '&' or quotes
	// (contract.ValidateTopic); it is escaped all the same.
	name := mux.Vars(r)["topic"]
	if contract.ValidateTopic(name) != nil {
		u.fail(w, r, http.StatusNotFound, "No such topic.")
		return
	}
	if err := contract.Authorize(r.Context(), contract.ActionRead, name, ""); err != nil {
		u.refuse(w, r, s.name(), http.StatusForbidden, contract.ActionRead, name, "Forbidden: you may not read this topic.")
		return
	}
	q, ok := u.o.Registry.Get(name)
	if !ok {
		u.fail(w, r, http.StatusNotFound, "No such topic.")
		return
	}
	n := u.o.Config.Messages
	if v, err := strconv.Atoi(r.URL.Query().Get("n")); err == nil && v > 0 {
		n = min(v, MaxMessages)
	}
	c := newCollected()
	c.mayGroups = func(t string) bool { return mayListGroups(r, t) }
	if isAdmin(r) { // dispatchers need admin, as in the admin API
		u.readersOf(c, name)
	}
	st := q.Stats()
	row := topicRow{Name: name, Start: st.StartOffset, Next: st.NextOffset, Bytes: st.Bytes, Segments: st.Segments}
	if old, ok := u.s.oldest(); ok {
		if prev, ok := old.next[name]; ok && c.now.Sub(old.at) >= time.Second {
			row.Rate, row.rateKnown = max(0, float64(st.NextOffset-prev)/c.now.Sub(old.at).Seconds()), true
		}
	}
	td := &topicData{N: n, Row: u.withReaders(c, row)}
	td.Messages, td.Error = lastMessages(q, st.StartOffset, st.NextOffset, n)
	d := u.base(r, s, "Topic "+name)
	d.Topic = td
	u.render(w, http.StatusOK, d)
}

// maxTopicPageBytes bounds the stored bytes one topic page reads: n
// messages of up to max-record-bytes each (1 MiB by default) would be
// 100 MiB at n = 100, read again at every refresh.
const maxTopicPageBytes = 8 << 20

// lastMessages reads the n newest messages of q below next (not below
// start), newest first, one by one from the newest down (a batch read stops
// at a segment's end or a byte budget and would miss the newest), until
// maxTopicPageBytes are read. problem says why fewer were read than asked
// ("" when none is missing): the byte budget, a corrupt entry (skipped,
// named) or a read error.
func lastMessages(q *topicqueue.TopicQueue, start, next int64, n int) (rows []messageRow, problem string) {
	var read int
	for off := next - 1; off >= max(start, next-int64(n)); off-- {
		p, err := q.Read(off)
		switch {
		case errors.Is(err, contract.ErrCorrupt):
			problem = fmt.Sprintf("offset %d is corrupt and was skipped: %v", off, err)
			continue
		case errors.Is(err, contract.ErrOffsetExpired):
			return rows, problem // retention deleted the rest meanwhile
		case err != nil:
			return rows, fmt.Sprintf("reading offset %d: %v", off, err)
		}
		rows = append(rows, messageOf(off, p))
		if read += len(p); read >= maxTopicPageBytes {
			if off > max(start, next-int64(n)) {
				problem = fmt.Sprintf("older messages are not shown: this page reads at most %d MiB of messages", maxTopicPageBytes>>20)
			}
			break
		}
	}
	return rows, problem
}

// readersOf notes the dispatchers reading topic in c.
func (u *UI) readersOf(c *collected, topic string) {
	for _, st := range u.statuses() {
		for _, t := range st.Topics {
			if t.Topic == topic {
				c.readers[topic] = append(c.readers[topic], reader{Name: st.Name, Lag: t.Lag})
				c.lag[topic] = max(c.lag[topic], t.Lag)
			}
		}
	}
}

// messageOf is a stored message's row: its id and time from the stored
// JSON, and the JSON itself cut at maxContent bytes (at a rune boundary)
// with "…".
func messageOf(off int64, payload []byte) messageRow {
	m := messageRow{Offset: off, Time: "—", ID: "—"}
	var head struct {
		ID        string `json:"id"`
		Timestamp int64  `json:"timestamp"`
	}
	if json.Unmarshal(payload, &head) == nil {
		if head.ID != "" {
			m.ID = head.ID
		}
		if head.Timestamp > 0 {
			m.Time = time.UnixMilli(head.Timestamp).UTC().Format("2006-01-02 15:04:05.000")
		}
	}
	b := bytes.TrimSpace(payload)
	if len(b) > maxContent {
		cut := maxContent
		for cut > 0 && !utf8.RuneStart(b[cut]) {
			cut--
		}
		m.Content = string(b[:cut]) + "…"
	} else {
		m.Content = string(b)
	}
	return m
}

// handleAction is POST /ui/dispatchers/{name}/pause|resume|seek: Origin and
// csrf checked, admin permission required (403), then the admin module's
// SetPaused or Seek, and 303 back to /ui/ with the outcome in msg or err.
func (u *UI) handleAction(kind string) func(http.ResponseWriter, *http.Request, session) {
	return func(w http.ResponseWriter, r *http.Request, s session) {
		if !u.checkPost(w, r, s) {
			return
		}
		if !isAdmin(r) {
			u.refuse(w, r, s.name(), http.StatusForbidden, contract.ActionAdmin, "", "Forbidden: administering dispatchers needs the admin permission.")
			return
		}
		if u.o.Admin == nil {
			u.fail(w, r, http.StatusNotFound, "This broker has no admin module: dispatchers cannot be changed here.")
			return
		}
		name := mux.Vars(r)["name"]
		var msg string
		var err error
		switch kind {
		case "seek":
			var res []dispatcher.SeekResult
			res, err = u.o.Admin.Seek(name, admin.SeekRequest{Topic: strings.TrimSpace(r.PostForm.Get("topic")), To: seekTarget(r.PostForm.Get("to"))})
			msg = fmt.Sprintf("Dispatcher %s sought on %d topic(s).", name, len(res))
		default:
			_, err = u.o.Admin.SetPaused(name, kind == "pause")
			msg = fmt.Sprintf("Dispatcher %s %sd.", name, kind)
		}
		// The status the admin API would have answered: the page answers
		// 303 either way, with the outcome in the flash.
		status := http.StatusOK
		if err != nil {
			status = contract.Classify(err).Status
		}
		contract.AuditAdmin(u.o.Audit, r, s.name(), status)
		if err != nil {
			msg = fmt.Sprintf("%s %s: %v", kind, name, err)
		}
		id := u.flash.put(s.key(), msg, err != nil, time.Now())
		http.Redirect(w, r, "/ui/?flash="+id, http.StatusSeeOther)
	}
}

// seekTarget turns the form's "to" into the admin API's: an offset stays a
// JSON number, anything else ("earliest", "latest", a typo) becomes a JSON
// string, which the admin module checks.
func seekTarget(to string) json.RawMessage {
	to = strings.TrimSpace(to)
	if _, err := strconv.ParseInt(to, 10, 64); err == nil {
		return json.RawMessage(to)
	}
	b, _ := json.Marshal(to)
	return b
}

// render executes the layout with d and status; a template error after
// the header is logged.
func (u *UI) render(w http.ResponseWriter, status int, d *pageData) {
	var buf bytes.Buffer
	if err := u.tmpl.ExecuteTemplate(&buf, "layout", d); err != nil {
		u.o.Logger.Error("render status page", zap.Error(err))
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail answers status with a plain page saying msg (which must not echo
// the request).
func (u *UI) fail(w http.ResponseWriter, _ *http.Request, status int, msg string) {
	u.render(w, status, &pageData{Title: http.StatusText(status), Error: msg, RefreshMS: 0})
}
