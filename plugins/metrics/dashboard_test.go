package metrics_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/mmmq/mmmq/app"
	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/httpapi"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// dashboardPath is the Grafana dashboard shipped beside the plugin.
const dashboardPath = "grafana/mmmq.json"

// targetLabels are the labels Prometheus itself adds to every scraped
// series (the scrape target's), which the broker does not export.
var targetLabels = []string{"instance", "job"}

// dashQuery is one PromQL expression of the dashboard and where it is.
type dashQuery struct {
	where, expr string
	legend      string // legendFormat, whose {{label}}s must exist too
	label       string // label_values(expr, label): the label asked of expr
}

// dashboardQueries reads every panel target's expr (rows' nested panels
// too) and every template variable's query of the dashboard JSON doc.
func dashboardQueries(doc []byte) ([]dashQuery, error) {
	var d struct {
		Panels     []dashPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	var out []dashQuery
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			for _, t := range p.Targets {
				out = append(out, dashQuery{where: fmt.Sprintf("panel %q target %s", p.Title, t.RefID), expr: t.Expr, legend: t.LegendFormat})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	labelValues := regexp.MustCompile(`^\s*label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q := ""
		switch x := v.Query.(type) {
		case string:
			q = x
		case map[string]any:
			q, _ = x["query"].(string)
		}
		m := labelValues.FindStringSubmatch(q)
		if m == nil {
			return nil, fmt.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, q)
		}
		out = append(out, dashQuery{where: "variable " + v.Name, expr: m[1], label: m[2]})
	}
	return out, nil
}

type dashPanel struct {
	Title   string `json:"title"`
	Targets []struct {
		RefID        string `json:"refId"`
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
	Panels []dashPanel `json:"panels"`
}

// scrapedLabels is each series name of a Prometheus text exposition
// with its label names (histograms as their _bucket, _sum and _count
// lines, with le).
func scrapedLabels(body string) (map[string][]string, error) {
	all, err := parseExposition(body)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, s := range all {
		if _, ok := out[s.name]; !ok {
			out[s.name] = []string{}
		}
		for l := range s.labels {
			if !slices.Contains(out[s.name], l) {
				out[s.name] = append(out[s.name], l)
			}
		}
	}
	for _, ls := range out {
		sort.Strings(ls)
	}
	return out, nil
}

// dashboardProblems checks every query of the dashboard against the
// series the broker exported (name to label names): each metric must be
// exported, each label of a matcher must be one of its labels, each label
// of a by/on/... list or a legend and each label_values label one of the
// labels of a metric the clause covers. It returns one line per problem.
func dashboardProblems(qs []dashQuery, exported map[string][]string) []string {
	var problems []string
	has := func(metric, label string) bool {
		return slices.Contains(targetLabels, label) || slices.Contains(exported[metric], label)
	}
	anyHas := func(metrics []string, label string) bool {
		return slices.ContainsFunc(metrics, func(m string) bool { return has(m, label) })
	}
	legendLabel := regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)
	for _, q := range qs {
		r, err := queryRefs(q.expr)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", q.where, err))
			continue
		}
		for _, s := range r.selectors {
			if _, ok := exported[s.metric]; !ok {
				problems = append(problems, fmt.Sprintf("%s: metric %s is not exported", q.where, s.metric))
				continue
			}
			for _, l := range s.labels {
				if !has(s.metric, l) {
					problems = append(problems, fmt.Sprintf("%s: %s has no label %s (it has %v)", q.where, s.metric, l, exported[s.metric]))
				}
			}
		}
		for _, g := range r.groupings {
			for _, l := range g.labels {
				if !anyHas(g.metrics, l) {
					problems = append(problems, fmt.Sprintf("%s: %s (%s): no label %s on %v", q.where, g.clause, strings.Join(g.labels, ", "), l, g.metrics))
				}
			}
		}
		for _, m := range legendLabel.FindAllStringSubmatch(q.legend, -1) {
			if !anyHas(r.metrics(), m[1]) {
				problems = append(problems, fmt.Sprintf("%s: legend {{%s}}: no such label on %v", q.where, m[1], r.metrics()))
			}
		}
		if q.label != "" && !anyHas(r.metrics(), q.label) {
			problems = append(problems, fmt.Sprintf("%s: label_values label %s: not on %v", q.where, q.label, r.metrics()))
		}
	}
	return problems
}

// dashboardBroker starts the full application on a fresh data root and
// free port with traffic that makes every labelled family exist:
// publishes, pushes of three dispatchers (one ACKing with a rate limit,
// adaptive concurrency and a breaker; one NACKing into its dead-letter
// topic; one paused), a replay with a rate, a consumer-group fetch and a
// scheduled message. It returns a scrape of GET /metrics and the
// broker's base URL.
func dashboardBroker(t *testing.T) (scrape func() string, base string) {
	t.Helper()
	consumer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		answer := "ACK"
		if r.URL.Path == "/nack" {
			answer = "NACK"
		}
		_, _ = io.WriteString(w, `{"acknowledgement":"`+answer+`"}`)
	}))
	t.Cleanup(consumer.Close)
	host, err := dispatcher.ParseHost(consumer.URL)
	if err != nil {
		t.Fatal(err)
	}
	ds := []*dispatcher.Dispatcher{
		dispatcher.New("acker", host, dispatcher.MustPattern("dash.**")).WithPath("/ack").
			WithMaxInFlight(4).WithRateLimit(10000, 0).WithAdaptiveConcurrency(dispatcher.AdaptiveAIMD).WithBreaker(5, 0),
		dispatcher.New("nacker", host, dispatcher.MustPattern("dash.**")).WithPath("/nack").WithBreaker(1000, 0),
		dispatcher.New("stopped", host, dispatcher.MustPattern("dash.**")).WithPath("/ack"),
	}
	cfg := config.Default()
	cfg.Server.Port = 0
	cfg.Server.Host = "127.0.0.1"
	config.EditSection(cfg, topicqueue.StorageSection, func(st *topicqueue.StorageConfig) { st.RootDir = t.TempDir() })
	config.EditSection(cfg, dispatcher.ConfigSection, func(d *dispatcher.Config) {
		d.BackoffInitial, d.BackoffMax = time.Millisecond, 5*time.Millisecond
	})
	var srv *httpapi.Server
	var mgr *dispatcher.Manager
	opts := []fx.Option{config.Supply(cfg), fx.Populate(&srv, &mgr)}
	for _, d := range ds {
		opts = append(opts, dispatcher.Provide(func() *dispatcher.Dispatcher { return d }))
	}
	a := fxtest.New(t, app.Options(opts...))
	a.RequireStart()
	t.Cleanup(a.RequireStop)
	base = "http://" + srv.Addr()
	post := func(path, body string, want int) {
		t.Helper()
		resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("POST %s %s: %d %s, want %d", path, body, resp.StatusCode, b, want)
		}
	}
	if err := mgr.Pause("stopped"); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		post("/messages", fmt.Sprintf(`{"topic":"dash.orders","content":{"n":%d}}`, i), http.StatusOK)
	}
	post("/messages", `{"topic":"dash.later","content":1,"delay":"1h"}`, http.StatusOK)
	post("/topics/dash.orders/groups/g/fetch?max=5", "", http.StatusOK)
	scrape = func() string {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
		}
		return string(b)
	}
	// Once the acker has delivered everything, replay it slowly (one
	// message per 1000 s): the replay series exist until it ends.
	deadline := time.Now().Add(10 * time.Second)
	delivered := func() bool {
		st, err := mgr.DispatcherStatus("acker")
		return err == nil && slices.ContainsFunc(st, func(w dispatcher.WorkerStatus) bool { return w.Topic == "dash.orders" && w.Committed == 20 })
	}
	for !delivered() {
		if time.Now().After(deadline) {
			t.Fatalf("acker did not deliver the 20 messages:\n%s", scrape())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := mgr.SeekAt("acker", func(string) bool { return true }, func(dispatcher.Topic) (int64, error) { return 0, nil }, 0.001); err != nil {
		t.Fatal(err)
	}
	return scrape, base
}

// TestDashboardQueriesExportedSeries: every metric and label the Grafana
// dashboard queries is one the running broker exports, so renaming a
// metric or a label in the code (or the dashboard) fails here. The
// dashboard is also checked with one metric and one label renamed, which
// must be reported.
func TestDashboardQueriesExportedSeries(t *testing.T) {
	doc, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	qs, err := dashboardQueries(doc)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) < 20 {
		t.Fatalf("only %d queries read from %s", len(qs), dashboardPath)
	}
	scrape, _ := dashboardBroker(t)
	// Series of the dispatch workers appear once their workers ran;
	// retry until none is missing or 10 s passed.
	var problems []string
	var exported map[string][]string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if exported, err = scrapedLabels(scrape()); err != nil {
			t.Fatal(err)
		}
		if problems = dashboardProblems(qs, exported); len(problems) == 0 || time.Now().After(deadline) {
			break
		}
	}
	sort.Strings(problems)
	for _, p := range problems {
		t.Error(p)
	}
	used := map[string]bool{}
	for _, q := range qs {
		if r, err := queryRefs(q.expr); err == nil {
			for _, m := range r.metrics() {
				used[m] = true
			}
		}
	}
	if len(problems) == 0 {
		t.Logf("%d queries over %d metrics, all exported", len(qs), len(used))
	}

	// Negative controls on copies: a renamed metric and a renamed label
	// are both reported.
	for _, c := range []struct{ old, new, want string }{
		{`mmmq_dispatch_lag{`, `mmmq_dispatch_lags{`, "metric mmmq_dispatch_lags is not exported"},
		{`sum by (topic, group)`, `sum by (topic, consumer_group)`, "no label consumer_group"},
		{`{{dispatcher}} / {{topic}}`, `{{dispatcher}} / {{queue}}`, "legend {{queue}}"},
	} {
		renamed := strings.Replace(string(doc), c.old, c.new, 1)
		if renamed == string(doc) {
			t.Fatalf("negative control: %q not in the dashboard", c.old)
		}
		rq, err := dashboardQueries([]byte(renamed))
		if err != nil {
			t.Fatal(err)
		}
		got := dashboardProblems(rq, exported)
		if !slices.ContainsFunc(got, func(p string) bool { return strings.Contains(p, c.want) }) {
			t.Errorf("with %q renamed %q: problems %q, want one saying %q", c.old, c.new, got, c.want)
		}
	}
}

// TestDashboardImportable: the dashboard has what Grafana 10 and 11 read
// on import: a datasource input DS_PROMETHEUS that every panel and
// target and variable uses, a schemaVersion, a uid, unique panel ids and
// panels on the 24-column grid that do not overlap.
func TestDashboardImportable(t *testing.T) {
	doc, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	type ds struct{ Type, UID string }
	var d struct {
		Inputs []struct {
			Name, Type, PluginID string
		} `json:"__inputs"`
		SchemaVersion int    `json:"schemaVersion"`
		UID           string `json:"uid"`
		Title         string `json:"title"`
		Panels        []struct {
			ID         int                      `json:"id"`
			Type       string                   `json:"type"`
			Title      string                   `json:"title"`
			Datasource *ds                      `json:"datasource"`
			GridPos    struct{ H, W, X, Y int } `json:"gridPos"`
			Targets    []struct {
				Datasource *ds    `json:"datasource"`
				Expr       string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Datasource *ds    `json:"datasource"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Inputs) != 1 || d.Inputs[0].Name != "DS_PROMETHEUS" || d.Inputs[0].Type != "datasource" || d.Inputs[0].PluginID != "prometheus" {
		t.Errorf("__inputs %+v, want one prometheus datasource input DS_PROMETHEUS", d.Inputs)
	}
	if d.SchemaVersion < 36 || d.UID == "" || d.Title == "" {
		t.Errorf("schemaVersion %d (want 36 or later: Grafana 9.1+), uid %q, title %q", d.SchemaVersion, d.UID, d.Title)
	}
	want := ds{"prometheus", "${DS_PROMETHEUS}"}
	for _, v := range d.Templating.List {
		if v.Datasource == nil || *v.Datasource != want {
			t.Errorf("variable %s: datasource %+v, want %+v", v.Name, v.Datasource, want)
		}
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	ids := map[int]bool{}
	cells := map[[2]int]string{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
		}
		ids[p.ID] = true
		g := p.GridPos
		if g.W < 1 || g.H < 1 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v off the 24-column grid", p.Title, g)
		}
		for y := g.Y; y < g.Y+g.H; y++ {
			for x := g.X; x < g.X+g.W; x++ {
				if other, ok := cells[[2]int{x, y}]; ok {
					t.Errorf("panel %q overlaps %q at column %d row %d", p.Title, other, x, y)
				}
				cells[[2]int{x, y}] = p.Title
			}
		}
		if !strings.Contains(string(readme), "| "+p.Title+" |") && !strings.Contains(string(readme), "| **"+p.Title+"** |") {
			t.Errorf("panel %q is not in the README's table of panels", p.Title)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || *p.Datasource != want || len(p.Targets) == 0 {
			t.Errorf("panel %q: datasource %+v and %d targets, want %+v and at least one", p.Title, p.Datasource, len(p.Targets), want)
		}
		for _, tg := range p.Targets {
			if tg.Datasource == nil || *tg.Datasource != want || tg.Expr == "" {
				t.Errorf("panel %q: a target with datasource %+v and expr %q", p.Title, tg.Datasource, tg.Expr)
			}
		}
	}
}
