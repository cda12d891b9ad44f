package metrics_test

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// A small PromQL evaluator over a run's scrapes, for rendering the
// dashboard's panels without Prometheus or Grafana. It evaluates the
// trees of parsePromQL (promql_test.go), the subset the dashboard uses:
// selectors with matchers, rate and increase over consecutive scrapes
// (the range is always one scrape interval), the aggregations
// sum/max/min/avg/count with by, histogram_quantile, number literals and
// the four arithmetic operators with ignoring/on and group_left. What it
// cannot evaluate is an error, so a panel it cannot evaluate fails the
// test rather than rendering wrong.

// series is one scraped time series: its labels (without the name) and
// value.
type series struct {
	name   string
	labels map[string]string
	value  float64
}

// scrapeAt is one scrape: when (seconds from the first) and its series.
type scrapeAt struct {
	at     float64
	series []series
}

// sample is one element of an instant vector.
type sample struct {
	labels map[string]string
	value  float64
}

// parseExposition reads a Prometheus text exposition into its series.
func parseExposition(body string) ([]series, error) {
	var out []series
	for n, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s := series{labels: map[string]string{}}
		end := strings.IndexAny(line, "{ ")
		if end <= 0 {
			return nil, fmt.Errorf("line %d: %q", n+1, line)
		}
		s.name = line[:end]
		i := end
		if line[i] == '{' {
			for i++; i < len(line) && line[i] != '}'; {
				eq := strings.Index(line[i:], `="`)
				if eq < 0 {
					return nil, fmt.Errorf("line %d: %q", n+1, line)
				}
				name := strings.TrimPrefix(line[i:i+eq], ",")
				var v strings.Builder
				j := i + eq + 2
				for ; j < len(line) && line[j] != '"'; j++ {
					if line[j] == '\\' && j+1 < len(line) {
						j++
						if line[j] == 'n' {
							v.WriteByte('\n')
							continue
						}
					}
					v.WriteByte(line[j])
				}
				s.labels[name] = v.String()
				i = j + 1
				if i < len(line) && line[i] == ',' {
					i++
				}
			}
			i++
		}
		f := strings.Fields(line[i:])
		if len(f) == 0 {
			return nil, fmt.Errorf("line %d: no value: %q", n+1, line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n+1, err)
		}
		s.value = v
		out = append(out, s)
	}
	return out, nil
}

// matches reports whether the label value v satisfies m.
func (m matcher) matches(v string) bool {
	switch m.op {
	case "=":
		return v == m.value
	case "!=":
		return v != m.value
	case "=~":
		return m.re.MatchString(v)
	default:
		return !m.re.MatchString(v)
	}
}

// result is an evaluation: a scalar (number literals and arithmetic on
// them) or an instant vector.
type result struct {
	scalar   bool
	v        float64
	vec      []sample
	rangeSel *selNode
}

// evalAt evaluates n at scrape k of run (rate and increase need k >= 1).
func evalAt(n node, run []scrapeAt, k int) (result, error) {
	switch n := n.(type) {
	case numNode:
		return result{scalar: true, v: n.v}, nil
	case selNode:
		if n.ranged {
			return result{rangeSel: &n}, nil
		}
		return result{vec: selectAt(n, run[k])}, nil
	case callNode:
		switch n.fn {
		case "rate", "increase":
			if len(n.args) != 1 {
				return result{}, fmt.Errorf("%s takes one argument", n.fn)
			}
			a, err := evalAt(n.args[0], run, k)
			if err != nil {
				return result{}, err
			}
			if a.rangeSel == nil {
				return result{}, fmt.Errorf("%s of something that is not a range selector", n.fn)
			}
			if k == 0 {
				return result{}, nil
			}
			prev := map[string]float64{}
			for _, s := range selectAt(*a.rangeSel, run[k-1]) {
				prev[labelKey(s.labels, nil)] = s.value
			}
			dt := run[k].at - run[k-1].at
			var out []sample
			for _, s := range selectAt(*a.rangeSel, run[k]) {
				p, ok := prev[labelKey(s.labels, nil)]
				if !ok {
					continue
				}
				d := s.value - p
				if d < 0 { // a counter reset
					d = s.value
				}
				if n.fn == "rate" {
					d /= dt
				}
				out = append(out, sample{s.labels, d})
			}
			return result{vec: out}, nil
		case "histogram_quantile":
			if len(n.args) != 2 {
				return result{}, fmt.Errorf("histogram_quantile takes two arguments")
			}
			q, err := evalAt(n.args[0], run, k)
			if err != nil {
				return result{}, err
			}
			b, err := evalAt(n.args[1], run, k)
			if err != nil {
				return result{}, err
			}
			if !q.scalar || b.scalar {
				return result{}, fmt.Errorf("histogram_quantile(scalar, vector) only")
			}
			return result{vec: quantiles(q.v, b.vec)}, nil
		}
	case aggNode:
		a, err := evalAt(n.arg, run, k)
		if err != nil {
			return result{}, err
		}
		if a.scalar || a.rangeSel != nil {
			return result{}, fmt.Errorf("%s of a scalar or a range", n.op)
		}
		groups := map[string]*sample{}
		counts := map[string]int{}
		var order []string
		for _, s := range a.vec {
			ls := map[string]string{}
			for _, l := range n.by {
				if v, ok := s.labels[l]; ok {
					ls[l] = v
				}
			}
			key := labelKey(ls, nil)
			g, ok := groups[key]
			if !ok {
				g = &sample{labels: ls, value: s.value}
				groups[key] = g
				order = append(order, key)
				counts[key] = 1
				continue
			}
			counts[key]++
			switch n.op {
			case "sum", "avg":
				g.value += s.value
			case "max":
				g.value = math.Max(g.value, s.value)
			case "min":
				g.value = math.Min(g.value, s.value)
			}
		}
		var out []sample
		for _, key := range order {
			g := *groups[key]
			switch n.op {
			case "avg":
				g.value /= float64(counts[key])
			case "count":
				g.value = float64(counts[key])
			}
			out = append(out, g)
		}
		return result{vec: out}, nil
	case binNode:
		l, err := evalAt(n.lhs, run, k)
		if err != nil {
			return result{}, err
		}
		r, err := evalAt(n.rhs, run, k)
		if err != nil {
			return result{}, err
		}
		apply := func(a, b float64) float64 {
			switch n.op {
			case "+":
				return a + b
			case "-":
				return a - b
			case "*":
				return a * b
			}
			return a / b
		}
		switch {
		case l.scalar && r.scalar:
			return result{scalar: true, v: apply(l.v, r.v)}, nil
		case l.scalar:
			var out []sample
			for _, s := range r.vec {
				out = append(out, sample{s.labels, apply(l.v, s.value)})
			}
			return result{vec: out}, nil
		case r.scalar:
			var out []sample
			for _, s := range l.vec {
				out = append(out, sample{s.labels, apply(s.value, r.v)})
			}
			return result{vec: out}, nil
		}
		key := func(ls map[string]string) string {
			if n.hasOn {
				keep := map[string]string{}
				for _, l := range n.on {
					if v, ok := ls[l]; ok {
						keep[l] = v
					}
				}
				return labelKey(keep, nil)
			}
			return labelKey(ls, n.ignoring)
		}
		right := map[string]float64{}
		for _, s := range r.vec {
			kk := key(s.labels)
			if _, dup := right[kk]; dup {
				return result{}, fmt.Errorf("many-to-many matching on the right")
			}
			right[kk] = s.value
		}
		var out []sample
		seen := map[string]bool{}
		for _, s := range l.vec {
			kk := key(s.labels)
			v, ok := right[kk]
			if !ok {
				continue
			}
			if seen[kk] && !n.groupLeft {
				return result{}, fmt.Errorf("many-to-one matching without group_left")
			}
			seen[kk] = true
			out = append(out, sample{s.labels, apply(s.value, v)})
		}
		return result{vec: out}, nil
	}
	return result{}, fmt.Errorf("cannot evaluate %T", n)
}

func selectAt(s selNode, sc scrapeAt) []sample {
	var out []sample
	for _, se := range sc.series {
		if se.name != s.metric {
			continue
		}
		ok := true
		for _, m := range s.matchers {
			if !m.matches(se.labels[m.label]) {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, sample{se.labels, se.value})
		}
	}
	return out
}

// labelKey is a canonical string of ls without the labels in drop.
func labelKey(ls map[string]string, drop []string) string {
	var ks []string
	for k := range ls {
		if !slices.Contains(drop, k) {
			ks = append(ks, k)
		}
	}
	sort.Strings(ks)
	var b strings.Builder
	for _, k := range ks {
		fmt.Fprintf(&b, "%s=%q,", k, ls[k])
	}
	return b.String()
}

// quantiles is histogram_quantile(q, buckets) as Prometheus computes it:
// per label set without le, linear interpolation inside the bucket that
// holds the rank; NaN without observations.
func quantiles(q float64, buckets []sample) []sample {
	type bucket struct{ le, count float64 }
	groups := map[string][]bucket{}
	lbls := map[string]map[string]string{}
	var order []string
	for _, s := range buckets {
		le, err := strconv.ParseFloat(s.labels["le"], 64)
		if err != nil {
			continue
		}
		key := labelKey(s.labels, []string{"le"})
		if _, ok := groups[key]; !ok {
			order = append(order, key)
			ls := map[string]string{}
			for k, v := range s.labels {
				if k != "le" {
					ls[k] = v
				}
			}
			lbls[key] = ls
		}
		groups[key] = append(groups[key], bucket{le, s.value})
	}
	var out []sample
	for _, key := range order {
		bs := groups[key]
		sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
		v := math.NaN()
		if n := len(bs); n >= 2 && !math.IsInf(bs[n-1].le, 1) {
			v = math.NaN()
		} else if n >= 2 && bs[n-1].count > 0 {
			rank := q * bs[n-1].count
			i := sort.Search(n, func(i int) bool { return bs[i].count >= rank })
			switch {
			case i == n-1:
				v = bs[n-2].le
			case i == 0:
				v = bs[0].le * rank / bs[0].count
				if bs[0].le <= 0 {
					v = bs[0].le
				}
			default:
				lo, hi := bs[i-1], bs[i]
				v = lo.le + (hi.le-lo.le)*(rank-lo.count)/(hi.count-lo.count)
			}
		}
		out = append(out, sample{lbls[key], v})
	}
	return out
}

// TestEvalPromQL: the evaluator's rates, aggregations, vector matching
// and quantiles on scrapes whose answers are worked out by hand, and its
// errors on trees it cannot evaluate.
func TestEvalPromQL(t *testing.T) {
	parse := func(body string) []series {
		s, err := parseExposition(body)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	run := []scrapeAt{
		{0, parse("c_total{a=\"x\",f=\"s\"} 10\nc_total{a=\"y\",f=\"s\"} 20\nc_total{a=\"x\",f=\"i\"} 5\ne_total 100\n" +
			"h_bucket{le=\"1\"} 0\nh_bucket{le=\"2\"} 0\nh_bucket{le=\"+Inf\"} 0\n")},
		{2, parse("c_total{a=\"x\",f=\"s\"} 14\nc_total{a=\"y\",f=\"s\"} 30\nc_total{a=\"x\",f=\"i\"} 5\ne_total 120\n" +
			"h_bucket{le=\"1\"} 2\nh_bucket{le=\"2\"} 6\nh_bucket{le=\"+Inf\"} 8\n")},
		{4, parse("c_total{a=\"x\",f=\"s\"} 3\n")},
	}
	for _, c := range []struct {
		expr string
		k    int
		want string // label key = value, sorted
	}{
		{`rate(c_total{a=~"$v"}[$__rate_interval])`, 1, `a="x",f="i",=0; a="x",f="s",=2; a="y",f="s",=5`},
		{`sum by (f) (rate(c_total[$__rate_interval]))`, 1, `f="i",=0; f="s",=7`},
		{`sum by (f) (rate(c_total[5m])) / ignoring(f) group_left sum(rate(e_total[5m]))`, 1, `f="i",=0; f="s",=0.7`},
		{`max by (a) (c_total{f!="i"})`, 1, `a="x",=14; a="y",=30`},
		{`histogram_quantile(0.5, sum by (le) (rate(h_bucket[1m])))`, 1, `=1.5`},
		{`histogram_quantile(0.99, sum by (le) (rate(h_bucket[1m])))`, 1, `=2`},
		{`increase(c_total{a="x",f="s"}[1m])`, 2, `a="x",f="s",=3`}, // a counter reset
		{`rate(c_total[1m])`, 0, ``},
		{`count(c_total) * 2 - 1`, 0, `=5`},
	} {
		n, err := parsePromQL(c.expr)
		if err != nil {
			t.Fatalf("%s: %v", c.expr, err)
		}
		r, err := evalAt(n, run, c.k)
		if err != nil {
			t.Fatalf("%s: %v", c.expr, err)
		}
		var got []string
		for _, s := range r.vec {
			got = append(got, fmt.Sprintf("%s=%.4g", labelKey(s.labels, nil), s.value))
		}
		sort.Strings(got)
		if g := strings.Join(got, "; "); g != c.want {
			t.Errorf("%s at scrape %d = %q, want %q", c.expr, c.k, g, c.want)
		}
	}
	for _, c := range []struct{ expr, want string }{
		{`rate(c_total)`, "not a range selector"},
		{`histogram_quantile(c_total, h_bucket)`, "histogram_quantile(scalar, vector) only"},
		{`c_total / ignoring(a, f) e_total`, "many-to-one matching without group_left"},
	} {
		n, err := parsePromQL(c.expr)
		if err != nil {
			t.Fatalf("%s: %v", c.expr, err)
		}
		if _, err := evalAt(n, run, 1); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s evaluated with error %v, want one saying %q", c.expr, err, c.want)
		}
	}
}
