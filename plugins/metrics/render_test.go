package metrics_test

import (
	"encoding/json"
	"fmt"
	"html"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// renderPanel is a panel of the dashboard JSON as the renderer needs it.
type renderPanel struct {
	Type        string                   `json:"type"`
	Title       string                   `json:"title"`
	GridPos     struct{ H, W, X, Y int } `json:"gridPos"`
	FieldConfig struct {
		Defaults struct {
			Unit     string `json:"unit"`
			Mappings []struct {
				Options map[string]struct {
					Text string `json:"text"`
				} `json:"options"`
			} `json:"mappings"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []struct {
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
}

// line is one legend entry of a panel: its points over the run (NaN
// where the expression had no finite value).
type line struct {
	legend string
	points []float64
}

// evalPanel evaluates every target of p at every scrape of run, one line
// per target and label set.
func evalPanel(p renderPanel, run []scrapeAt) ([]line, error) {
	var out []line
	for _, t := range p.Targets {
		n, err := parsePromQL(t.Expr)
		if err != nil {
			return nil, err
		}
		idx := map[string]int{}
		for k := range run {
			r, err := evalAt(n, run, k)
			if err != nil {
				return nil, fmt.Errorf("%q: %w", t.Expr, err)
			}
			if r.scalar || r.rangeSel != nil {
				return nil, fmt.Errorf("%q is not a vector", t.Expr)
			}
			for _, s := range r.vec {
				legend := regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`).ReplaceAllStringFunc(t.LegendFormat, func(m string) string {
					return s.labels[strings.Trim(m, "{} ")]
				})
				if legend == "" {
					legend = labelKey(s.labels, nil)
				}
				i, ok := idx[legend]
				if !ok {
					i = len(out)
					idx[legend] = i
					pts := make([]float64, len(run))
					for j := range pts {
						pts[j] = math.NaN()
					}
					out = append(out, line{legend: legend, points: pts})
				}
				if !math.IsInf(s.value, 0) {
					out[i].points[k] = s.value
				}
			}
		}
	}
	return out, nil
}

// formatValue prints v in Grafana's unit.
func formatValue(v float64, unit string) string {
	if math.IsNaN(v) {
		return "–"
	}
	switch unit {
	case "bytes":
		for _, u := range []struct {
			s string
			n float64
		}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
			if math.Abs(v) >= u.n {
				return fmt.Sprintf("%.1f %s", v/u.n, u.s)
			}
		}
		return fmt.Sprintf("%.0f B", v)
	case "s":
		switch a := math.Abs(v); {
		case a == 0:
			return "0 s"
		case a < 1e-3:
			return fmt.Sprintf("%.0f µs", v*1e6)
		case a < 1:
			return fmt.Sprintf("%.1f ms", v*1e3)
		}
		return fmt.Sprintf("%.2f s", v)
	case "ops":
		return fmt.Sprintf("%.4g/s", v)
	}
	return fmt.Sprintf("%.4g", v)
}

var palette = []string{"#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9", "#705da0", "#37872d", "#fade2a"}

// renderHTML draws the dashboard's panels from run as a static page laid
// out on Grafana's grid (24 columns, 30 px a row).
func renderHTML(title string, panels []renderPanel, lines [][]line, run []scrapeAt, note string) string {
	const colW, rowH = renderColW, 30
	var b strings.Builder
	maxY := 0
	for _, p := range panels {
		maxY = max(maxY, p.GridPos.Y+p.GridPos.H)
	}
	fmt.Fprintf(&b, `<!doctype html><html><head><meta charset="utf-8"><title>%s</title><style>
body{margin:0;background:#111217;color:#ccccdc;font:12px sans-serif}
.hd{padding:8px 12px;font-size:15px}.hd small{color:#8e8e9e;font-size:11px;margin-left:12px}
.grid{position:relative;width:%dpx;height:%dpx;margin:0 8px}
.p{position:absolute;box-sizing:border-box;background:#181b1f;border:1px solid #2c3235;border-radius:2px;padding:4px 6px;overflow:hidden}
.row{position:absolute;font-size:14px;font-weight:600;padding:6px 2px;color:#d8d9da}
.t{font-weight:600;margin-bottom:2px;white-space:nowrap}
.lg{font-size:10px;line-height:12px;max-height:36px;overflow:hidden}.lg span{margin-right:8px;white-space:nowrap}
.stat{font-size:22px;font-weight:600;margin:8px 0 2px}table{border-collapse:collapse;width:100%%;font-size:11px}td,th{border-bottom:1px solid #2c3235;padding:2px 4px;text-align:left}
</style></head><body><div class="hd">%s<small>%s</small></div><div class="grid">`,
		html.EscapeString(title), 24*colW, maxY*rowH, html.EscapeString(title), html.EscapeString(note))
	for i, p := range panels {
		x, y, w, h := p.GridPos.X*colW, p.GridPos.Y*rowH, p.GridPos.W*colW-4, p.GridPos.H*rowH-4
		if p.Type == "row" {
			fmt.Fprintf(&b, `<div class="row" style="left:%dpx;top:%dpx">▾ %s</div>`, x, y, html.EscapeString(p.Title))
			continue
		}
		unit := p.FieldConfig.Defaults.Unit
		fmt.Fprintf(&b, `<div class="p" style="left:%dpx;top:%dpx;width:%dpx;height:%dpx"><div class="t">%s</div>`, x, y, w, h, html.EscapeString(p.Title))
		last := func(l line) float64 {
			for k := len(l.points) - 1; k >= 0; k-- {
				if !math.IsNaN(l.points[k]) {
					return l.points[k]
				}
			}
			return math.NaN()
		}
		switch p.Type {
		case "stat":
			for _, l := range lines[i] {
				v := last(l)
				text := formatValue(v, unit)
				for _, m := range p.FieldConfig.Defaults.Mappings {
					if o, ok := m.Options[fmt.Sprint(v)]; ok && l.legend == "refusing" {
						text = o.Text
					}
				}
				fmt.Fprintf(&b, `<div class="stat">%s</div><div>%s</div>`, html.EscapeString(text), html.EscapeString(l.legend))
			}
		case "table":
			b.WriteString(`<table><tr><th>series</th><th>value</th></tr>`)
			for _, l := range lines[i] {
				fmt.Fprintf(&b, `<tr><td>%s</td><td>%s</td></tr>`, html.EscapeString(l.legend), formatValue(last(l), unit))
			}
			b.WriteString(`</table>`)
		default:
			cw, ch := float64(w-76), float64(h-rowH-44)
			lo, hi := 0.0, 0.0
			for _, l := range lines[i] {
				for _, v := range l.points {
					if !math.IsNaN(v) {
						lo, hi = math.Min(lo, v), math.Max(hi, v)
					}
				}
			}
			if hi == lo {
				hi = lo + 1
			}
			fmt.Fprintf(&b, `<svg width="%d" height="%.0f" style="display:block">`, w-12, ch+14)
			for g := 0; g <= 2; g++ {
				v := lo + (hi-lo)*float64(g)/2
				gy := ch - ch*float64(g)/2 + 4
				fmt.Fprintf(&b, `<line x1="58" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#2c3235"/><text x="54" y="%.1f" fill="#8e8e9e" font-size="9" text-anchor="end">%s</text>`,
					58+cw, gy, gy, gy+3, html.EscapeString(formatValue(v, unit)))
			}
			span := run[len(run)-1].at - run[0].at
			for j, l := range lines[i] {
				var pts []string
				flush := func() {
					if len(pts) > 0 {
						fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`, palette[j%len(palette)], strings.Join(pts, " "))
						if len(pts) == 1 {
							var cx, cy float64
							fmt.Sscanf(pts[0], "%f,%f", &cx, &cy)
							fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2" fill="%s"/>`, cx, cy, palette[j%len(palette)])
						}
					}
					pts = nil
				}
				for k, v := range l.points {
					if math.IsNaN(v) {
						flush()
						continue
					}
					px := 58 + cw*(run[k].at-run[0].at)/span
					py := ch - ch*(v-lo)/(hi-lo) + 4
					pts = append(pts, fmt.Sprintf("%.1f,%.1f", px, py))
				}
				flush()
			}
			fmt.Fprintf(&b, `<text x="58" y="%.0f" fill="#8e8e9e" font-size="9">0 s</text><text x="%.0f" y="%.0f" fill="#8e8e9e" font-size="9" text-anchor="end">%.0f s</text></svg>`, ch+13, 58+cw, ch+13, span)
			b.WriteString(`<div class="lg">`)
			for j, l := range lines[i] {
				fmt.Fprintf(&b, `<span><b style="color:%s">━</b> %s %s</span>`, palette[j%len(palette)], html.EscapeString(l.legend), html.EscapeString(formatValue(last(l), unit)))
			}
			b.WriteString(`</div>`)
		}
		b.WriteString(`</div>`)
	}
	b.WriteString(`</div></body></html>`)
	return b.String()
}

// TestDashboardPanelsRender runs the broker under load, scrapes /metrics
// several times, evaluates every panel's queries over the scrapes (rates
// over consecutive scrapes) and renders the panels as a static HTML page;
// every panel must draw at least one finite value. With
// MMMQ_DASHBOARD_RENDER_DIR set (make dashboard-render) the run is longer
// (MMMQ_DASHBOARD_SCRAPES scrapes a second, default 30) and headless
// Chromium screenshots the page to mmmq.png there; the page itself stays
// in the test's temporary directory.
func TestDashboardPanelsRender(t *testing.T) {
	doc, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string        `json:"title"`
		Panels []renderPanel `json:"panels"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("MMMQ_DASHBOARD_RENDER_DIR")
	scrapes, every := 5, 300*time.Millisecond
	if dir != "" {
		scrapes, every = 30, time.Second
		if n := os.Getenv("MMMQ_DASHBOARD_SCRAPES"); n != "" {
			if _, err := fmt.Sscan(n, &scrapes); err != nil || scrapes < 3 {
				t.Fatalf("MMMQ_DASHBOARD_SCRAPES=%q: want a count of 3 or more", n)
			}
		}
	}
	scrape, base := dashboardBroker(t)

	// Load: three publishers with durable acks, one with written, one
	// with accepted, and a scheduled message due 100 ms later every 50 ms.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var loadErr error
	var errOnce sync.Once
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 10 * time.Second}
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				body, path := fmt.Sprintf(`{"topic":"dash.load%d","content":{"n":%d}}`, i%2, n), "/messages"
				switch i {
				case 3:
					path = "/messages?ack=written"
				case 4:
					body, path = fmt.Sprintf(`{"topic":"dash.fast","content":{"n":%d}}`, n), "/messages?ack=accepted"
				case 5:
					body = fmt.Sprintf(`{"topic":"dash.sched","content":{"n":%d},"delay":"100ms"}`, n)
					time.Sleep(50 * time.Millisecond)
				}
				resp, err := client.Post(base+path, "application/json", strings.NewReader(body))
				if err != nil {
					errOnce.Do(func() { loadErr = err })
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted {
					errOnce.Do(func() { loadErr = fmt.Errorf("publish %s: %d", body, resp.StatusCode) })
					return
				}
			}
		}()
	}
	var run []scrapeAt
	start := time.Now()
	for k := range scrapes {
		if k > 0 {
			time.Sleep(every)
		}
		at := time.Since(start).Seconds()
		s, err := parseExposition(scrape())
		if err != nil {
			t.Fatal(err)
		}
		run = append(run, scrapeAt{at: at, series: s})
	}
	close(stop)
	wg.Wait()
	if loadErr != nil {
		t.Fatal(loadErr)
	}

	var all [][]line
	for _, p := range d.Panels {
		if p.Type == "row" {
			all = append(all, nil)
			continue
		}
		ls, err := evalPanel(p, run)
		if err != nil {
			t.Errorf("panel %q: %v", p.Title, err)
		}
		finite := false
		for _, l := range ls {
			for _, v := range l.points {
				finite = finite || !math.IsNaN(v)
			}
		}
		if !finite {
			t.Errorf("panel %q drew nothing over %d scrapes", p.Title, len(run))
		}
		all = append(all, ls)
	}
	pub := 0.0
	for i, p := range d.Panels {
		if p.Title == "Publish rate by topic" {
			for _, l := range all[i] {
				if l.legend == "all topics (entries committed)" {
					sort.Float64s(l.points)
					pub = l.points[len(l.points)/2]
				}
			}
		}
	}
	note := fmt.Sprintf("rendered from %d scrapes of a real broker's /metrics, %s apart, under load (6 publishers, about %.0f entries/s committed); variables = All, rates over one scrape interval", len(run), every, pub)
	page := filepath.Join(t.TempDir(), "mmmq.html")
	if err := os.WriteFile(page, []byte(renderHTML(d.Title, d.Panels, all, run, note)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s; %s", page, note)
	if dir == "" {
		return
	}
	chromium := os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	shot := filepath.Join(dir, "mmmq.png")
	maxY := 0
	for _, p := range d.Panels {
		maxY = max(maxY, p.GridPos.Y+p.GridPos.H)
	}
	cmd := exec.Command(chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--user-data-dir="+t.TempDir(), fmt.Sprintf("--window-size=%d,%d", 24*renderColW+16, maxY*30+40),
		"--screenshot="+shot, "file://"+page)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", chromium, err, out)
	}
	if err := quantizePNG(shot, 256); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(shot); err == nil {
		t.Logf("screenshot: %s (%d bytes)", shot, st.Size())
	}
}

// quantizePNG rewrites the PNG at path with a palette of its n most used
// colours (the rest drawn as the nearest of them), which keeps a chart
// screenshot to a few hundred kilobytes.
func quantizePNG(path string, n int) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	img, err := png.Decode(f)
	f.Close()
	if err != nil {
		return err
	}
	counts := map[color.RGBA]int{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			counts[color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)]++
		}
	}
	cs := make([]color.RGBA, 0, len(counts))
	for c := range counts {
		cs = append(cs, c)
	}
	sort.Slice(cs, func(i, j int) bool {
		if counts[cs[i]] != counts[cs[j]] {
			return counts[cs[i]] > counts[cs[j]]
		}
		return fmt.Sprint(cs[i]) < fmt.Sprint(cs[j])
	})
	pal := make(color.Palette, 0, n)
	for _, c := range cs[:min(n, len(cs))] {
		pal = append(pal, c)
	}
	out := image.NewPaletted(b, pal)
	draw.Draw(out, b, img, b.Min, draw.Src)
	w, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(w, out); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

// renderColW is the width of a grid column in pixels (Grafana's 24
// columns across 1344 px keep the PNG under 300 KB).
const renderColW = 56
