package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/httpapi"
)

// topics is `mmmq topics <subcommand>`: the topics of a running broker.
func topics(args []string) int {
	g := &group{name: "topics", about: "Shows the topics of a running broker and the consumer groups of each.",
		subs: []subcommand{
			{name: "list", synopsis: "[flags]", run: topicsList,
				brief: "List every topic: offsets, segments, bytes; then the quarantined ones.",
				about: "--json prints the answer of GET /topics."},
			{name: "get", synopsis: "NAME [flags]", run: topicsGet,
				brief: "Show one topic and its consumer groups (committed offset, lag, held).",
				about: "--json prints {\"topic\": <its row of GET /topics>, \"groups\": <GET /topics/NAME/groups>}. " +
					"The groups need the consume action: without it they are left out, saying why (\"groupsHidden\" in --json)."},
			{name: "scheduled", synopsis: "NAME [--limit N] [--after NEXT] [flags]", run: topicsScheduled,
				brief: "List a topic's pending scheduled messages in due order (schedule id, due time, message id, size).",
				about: "One page of GET /topics/NAME/scheduled: at most --limit (1..1000, default 100); the last line gives the " +
					"--after of the next page. --json prints the answer (its \"next\" is the next --after)."},
		}}
	return g.run(args)
}

// topicList is the answer of GET /topics.
type topicList struct {
	Topics      []httpapi.TopicInfo `json:"topics"`
	Quarantined map[string]string   `json:"quarantined"`
}

func topicsList(r *remote, args []string) int {
	if _, code, ok := r.parse(args); !ok {
		return code
	}
	var out topicList
	return r.call(http.MethodGet, "/topics", nil, &out, func() string {
		rows := make([][]string, 0, len(out.Topics))
		for _, t := range out.Topics {
			rows = append(rows, []string{t.Name, num(t.StartOffset), num(t.NextOffset), num(t.Segments), num(t.Bytes), orDash(t.Failed)})
		}
		s := table([]string{"NAME", "START-OFFSET", "NEXT-OFFSET", "SEGMENTS", "BYTES", "FAILED"}, rows)
		names := make([]string, 0, len(out.Quarantined))
		for n := range out.Quarantined {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			s += fmt.Sprintf("quarantined: %s: %s\n", n, out.Quarantined[n])
		}
		return s
	})
}

func topicsGet(r *remote, args []string) int {
	pos, code, ok := r.parse(args, "NAME")
	if !ok {
		return code
	}
	name := pos[0]
	c := r.client()
	raw, err := c.do(http.MethodGet, "/topics", nil)
	if err != nil {
		return fail(err)
	}
	var list struct {
		Topics      []json.RawMessage `json:"topics"`
		Quarantined map[string]string `json:"quarantined"`
	}
	if err := c.decode(raw, &list); err != nil {
		return fail(err)
	}
	var row json.RawMessage // null when the topic is not listed
	for _, t := range list.Topics {
		var ti httpapi.TopicInfo
		if c.decode(t, &ti) == nil && ti.Name == name {
			row = t
		}
	}
	if reason, ok := list.Quarantined[name]; ok && row == nil {
		return fail(fmt.Errorf("topic %s is quarantined: %s", name, reason))
	}
	// The groups need the consume action: a token without it still sees
	// the topic, and is told what was left out and why.
	var hidden string
	graw, err := c.do(http.MethodGet, "/topics/"+url.PathEscape(name)+"/groups", nil)
	if be := (*brokerError)(nil); errors.As(err, &be) && be.Status == http.StatusForbidden {
		hidden, graw, err = fmt.Sprintf("%d %s: %s", be.Status, be.Code, be.Msg), nil, nil
	}
	if err != nil {
		return fail(err)
	}
	if r.asJSON {
		both, err := json.Marshal(struct {
			Topic        json.RawMessage `json:"topic"`
			Groups       json.RawMessage `json:"groups"`
			GroupsHidden string          `json:"groupsHidden,omitempty"`
		}{row, graw, hidden})
		if err != nil {
			return fail(err)
		}
		return printJSON(both)
	}
	var ti httpapi.TopicInfo
	var gl groups.Listing
	if row != nil {
		if err := c.decode(row, &ti); err != nil {
			return fail(err)
		}
	}
	if hidden != "" {
		return show(strings.TrimSuffix(topicText(name, row != nil, ti, gl), "groups: none\n") + "groups: not shown (" + hidden + ")\n")
	}
	if err := c.decode(graw, &gl); err != nil {
		return fail(err)
	}
	return show(topicText(name, row != nil, ti, gl))
}

// topicText shows a topic as "key: value" lines and its groups as a table.
func topicText(name string, listed bool, ti httpapi.TopicInfo, gl groups.Listing) string {
	pairs := [][2]string{{"name", name}}
	if listed {
		pairs = append(pairs, [2]string{"start-offset", num(ti.StartOffset)}, [2]string{"next-offset", num(ti.NextOffset)},
			[2]string{"segments", num(ti.Segments)}, [2]string{"bytes", num(ti.Bytes)}, [2]string{"incarnation", orDash(ti.Incarnation)})
		if ti.Failed != "" {
			pairs = append(pairs, [2]string{"failed", ti.Failed})
		}
	}
	s := block(pairs)
	if len(gl.Groups) == 0 {
		return s + "\ngroups: none\n"
	}
	rows := make([][]string, 0, len(gl.Groups))
	for _, g := range gl.Groups {
		lease := "-"
		if g.LeaseExpiresInMs != nil {
			lease = (time.Duration(*g.LeaseExpiresInMs) * time.Millisecond).String()
		}
		held, inFlight := yesNo(g.Held), "-"
		if g.InFlight != nil { // a shared group: its sessions, each with its own lease
			held, inFlight = fmt.Sprintf("%d sessions", len(g.Sessions)), num(*g.InFlight)
		}
		rows = append(rows, []string{g.Group, orDash(g.Mode), num(g.Committed), num(g.Lag), held, inFlight, lease})
	}
	return s + "\n" + table([]string{"GROUP", "MODE", "COMMITTED", "LAG", "HELD", "IN-FLIGHT", "LEASE-EXPIRES-IN"}, rows)
}

// scheduledPage is the answer of GET /topics/NAME/scheduled.
type scheduledPage struct {
	Topic   string `json:"topic"`
	Pending int    `json:"pending"`
	Items   []struct {
		ScheduleID string            `json:"scheduleId"`
		DeliverAt  string            `json:"deliverAt"`
		ID         string            `json:"id"`
		Size       int64             `json:"size"`
		Headers    map[string]string `json:"headers"`
	} `json:"items"`
	Next string `json:"next"`
}

func topicsScheduled(r *remote, args []string) int {
	limit := r.fs.Int("limit", 100, "the most messages shown (1..1000)")
	after := r.fs.String("after", "", "continue after this place: the previous page's next")
	pos, code, ok := r.parse(args, "NAME")
	if !ok {
		return code
	}
	if *limit < 1 || *limit > 1000 {
		return r.usageError("--limit must be in 1..1000")
	}
	q := url.Values{"limit": {fmt.Sprint(*limit)}}
	if *after != "" {
		q.Set("after", *after)
	}
	var out scheduledPage
	return r.call(http.MethodGet, "/topics/"+url.PathEscape(pos[0])+"/scheduled?"+q.Encode(), nil, &out, func() string {
		rows := make([][]string, 0, len(out.Items))
		for _, it := range out.Items {
			rows = append(rows, []string{it.ScheduleID, it.DeliverAt, it.ID, num(it.Size), num(int64(len(it.Headers)))})
		}
		s := fmt.Sprintf("pending: %d\n", out.Pending)
		if len(rows) > 0 {
			s += table([]string{"SCHEDULE-ID", "DELIVER-AT", "MESSAGE-ID", "SIZE", "HEADERS"}, rows)
		}
		if out.Next != "" {
			s += fmt.Sprintf("more: --after %s\n", out.Next)
		}
		return s
	})
}
