package metrics_test

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The one PromQL grammar of the dashboard tests. parsePromQL reads an
// expression into a tree that evalAt (promeval_test.go) evaluates over a
// run's scrapes and queryRefs walks for what it asks of the scraped
// series (dashboard_test.go checks those against the broker's). It reads
// the subset the dashboard uses: selectors with =, !=, =~ and !~
// matchers and a range, number literals, the functions rate, increase and
// histogram_quantile, the aggregations sum, max, min, avg and count with
// by, and + - * / with on, ignoring and group_left. It knows the rest of
// the language's lexical shapes and keywords and refuses them (another
// function or aggregation, without, group_right, offset, @, subqueries,
// comparisons, set operators, __name__ matchers, a Grafana variable
// outside a string or range) with an error that names them, so a query
// it cannot read fails the test instead of passing unchecked.

// token is one lexical token of an expression: its kind and text
// (a string without its quotes, a range with its brackets).
type token struct {
	kind byte // 'i' identifier, 's' string, 'n' number, 'r' range (brackets), 'p' punctuation/operator
	text string
}

// lexPromQL splits expr into its tokens. It returns an error on an
// unterminated string or range, a character outside the language or
// unbalanced parentheses.
func lexPromQL(expr string) ([]token, error) {
	var toks []token
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#': // comment to the end of the line
			for i < len(expr) && expr[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for ; j < len(expr) && expr[j] != c; j++ {
				if expr[j] == '\\' && c != '`' {
					j++
				}
			}
			if j >= len(expr) {
				return nil, fmt.Errorf("unterminated string at %d in %q", i, expr)
			}
			toks = append(toks, token{'s', expr[i+1 : j]})
			i = j + 1
		case c == '[':
			j := strings.IndexByte(expr[i:], ']')
			if j < 0 {
				return nil, fmt.Errorf("unterminated range at %d in %q", i, expr)
			}
			toks = append(toks, token{'r', expr[i : i+j+1]})
			i += j + 1
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(expr) && expr[i+1] >= '0' && expr[i+1] <= '9':
			j := i
			for j < len(expr) && (isIdentByte(expr[j]) || expr[j] == '.') {
				j++ // 0.99, 1e3, 0x1f, 5m (offset durations)
			}
			toks = append(toks, token{'n', expr[i:j]})
			i = j
		case isIdentByte(c) || c == '$': // $ for Grafana variables outside strings ($__rate_interval is inside brackets)
			j := i + 1
			for j < len(expr) && isIdentByte(expr[j]) {
				j++
			}
			toks = append(toks, token{'i', expr[i:j]})
			i = j
		default:
			for _, op := range []string{"=~", "!~", "!=", "==", ">=", "<=", "(", ")", "{", "}", ",", "=", "+", "-", "*", "/", "%", "^", "<", ">", "@"} {
				if strings.HasPrefix(expr[i:], op) {
					toks = append(toks, token{'p', op})
					i += len(op)
					goto next
				}
			}
			return nil, fmt.Errorf("unexpected %q at %d in %q", c, i, expr)
		next:
		}
	}
	depth := 0
	for _, t := range toks {
		if t.kind != 'p' {
			continue // a "(" in a string is not one
		}
		switch t.text {
		case "(":
			depth++
		case ")":
			depth--
		}
		if depth < 0 {
			break
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("unbalanced parentheses in %q", expr)
	}
	return toks, nil
}

// isIdentByte reports whether c may be part of an identifier.
func isIdentByte(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

var (
	promAggregations = []string{"sum", "avg", "min", "max", "count", "group", "stddev", "stdvar", "topk", "bottomk", "quantile", "count_values", "limitk", "limit_ratio"}
	evalAggregations = []string{"sum", "max", "min", "avg", "count"}
	evalFunctions    = []string{"rate", "increase", "histogram_quantile"}
	// unreadOperators may follow an operand in PromQL but are not read.
	unreadOperators = []string{"%", "^", "==", "!=", ">", "<", ">=", "<=", "and", "or", "unless", "atan2", "bool", "offset", "@"}
	precedence      = map[string]int{"+": 1, "-": 1, "*": 2, "/": 2}
	// grafanaVariable is a Grafana variable ($name or ${name}) in a
	// matcher value.
	grafanaVariable = regexp.MustCompile(`\$\{?[a-zA-Z_]+\}?`)
)

// node is a parsed expression: a numNode, selNode, callNode, aggNode or
// binNode.
type node interface{}

type (
	// numNode is a number literal.
	numNode struct{ v float64 }
	// selNode is a vector selector; ranged if a range follows it.
	selNode struct {
		metric   string
		matchers []matcher
		ranged   bool
	}
	// callNode is a call of one of evalFunctions.
	callNode struct {
		fn   string
		args []node
	}
	// aggNode is an aggregation of arg by the labels by.
	aggNode struct {
		op  string
		by  []string
		arg node
	}
	// binNode is an arithmetic operation with its vector matching.
	binNode struct {
		op        string
		lhs, rhs  node
		ignoring  []string
		on        []string
		hasOn     bool
		groupLeft bool
	}
)

// matcher is one label matcher of a selector; re is the anchored
// regular expression of =~ and !~.
type matcher struct {
	label, op, value string
	re               *regexp.Regexp
}

// promqlParser is a precedence-climbing parser over lexPromQL's tokens
// of expr; i is the next token.
type promqlParser struct {
	toks []token
	i    int
	expr string
}

// peek returns the next token, or the zero token at the end.
func (p *promqlParser) peek() token {
	if p.i < len(p.toks) {
		return p.toks[p.i]
	}
	return token{}
}

// expect consumes the next token if its text is text, or returns an
// error.
func (p *promqlParser) expect(text string) error {
	if p.peek().text != text {
		return fmt.Errorf("want %q at token %d of %q, got %q", text, p.i, p.expr, p.peek().text)
	}
	p.i++
	return nil
}

// labelList reads a parenthesized list of label names and returns them
// (nil for an empty list).
func (p *promqlParser) labelList() ([]string, error) {
	if err := p.expect("("); err != nil {
		return nil, err
	}
	var ls []string
	for p.peek().text != ")" {
		if t := p.peek(); t.kind == 'i' {
			ls = append(ls, t.text)
		} else if t.text != "," {
			return nil, fmt.Errorf("unexpected %q in a label list of %q", t.text, p.expr)
		}
		p.i++
	}
	p.i++
	return ls, nil
}

// parseExpr reads an expression whose binary operators bind at least as
// tightly as minPrec and returns its tree.
func (p *promqlParser) parseExpr(minPrec int) (node, error) {
	lhs, err := p.parseUnary()
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		prec, ok := precedence[t.text]
		switch {
		case t.kind == 'r':
			return nil, fmt.Errorf("subquery %s is not read: %q", t.text, p.expr)
		case slices.Contains(unreadOperators, t.text):
			return nil, fmt.Errorf("%s is not read: %q", t.text, p.expr)
		case !ok || t.kind != 'p' || prec < minPrec:
			return lhs, nil
		}
		p.i++
		b := binNode{op: t.text, lhs: lhs}
		for {
			switch p.peek().text {
			case "ignoring", "on":
				if b.hasOn || b.ignoring != nil {
					return nil, fmt.Errorf("two on/ignoring lists in %q", p.expr)
				}
				clause := p.peek().text
				p.i++
				ls, err := p.labelList()
				if err != nil {
					return nil, err
				}
				if clause == "on" {
					b.hasOn, b.on = true, ls
				} else {
					b.ignoring = ls
				}
				continue
			case "group_left":
				p.i++
				b.groupLeft = true
				if p.peek().text == "(" {
					return nil, fmt.Errorf("group_left with labels is not read: %q", p.expr)
				}
				continue
			case "group_right":
				return nil, fmt.Errorf("group_right is not read: %q", p.expr)
			}
			break
		}
		if b.rhs, err = p.parseExpr(prec + 1); err != nil {
			return nil, err
		}
		lhs = b
	}
}

// parseUnary reads one operand (a number, a parenthesized expression, an
// aggregation, a call or a selector) and returns its tree.
func (p *promqlParser) parseUnary() (node, error) {
	t := p.peek()
	switch {
	case t.kind == 'n' || t.kind == 'i' && (strings.EqualFold(t.text, "inf") || strings.EqualFold(t.text, "nan")):
		p.i++
		v, err := strconv.ParseFloat(t.text, 64)
		if err != nil {
			return nil, fmt.Errorf("number %s in %q: %w", t.text, p.expr, err)
		}
		return numNode{v}, nil
	case t.text == "(":
		p.i++
		n, err := p.parseExpr(0)
		if err != nil {
			return nil, err
		}
		return n, p.expect(")")
	case t.kind == 'i' && slices.Contains(evalAggregations, t.text):
		p.i++
		a := aggNode{op: t.text}
		var err error
		if p.peek().text == "by" {
			p.i++
			if a.by, err = p.labelList(); err != nil {
				return nil, err
			}
		} else if p.peek().text == "without" {
			return nil, fmt.Errorf("without is not read: %q", p.expr)
		}
		if err := p.expect("("); err != nil {
			return nil, err
		}
		if a.arg, err = p.parseExpr(0); err != nil {
			return nil, err
		}
		if err := p.expect(")"); err != nil {
			return nil, err
		}
		switch p.peek().text {
		case "by":
			if a.by != nil {
				return nil, fmt.Errorf("%s with two by lists in %q", a.op, p.expr)
			}
			p.i++
			if a.by, err = p.labelList(); err != nil {
				return nil, err
			}
		case "without":
			return nil, fmt.Errorf("without is not read: %q", p.expr)
		}
		return a, nil
	case t.kind == 'i' && slices.Contains(promAggregations, t.text):
		return nil, fmt.Errorf("aggregation %s is not read: %q", t.text, p.expr)
	case t.kind == 'i' && p.i+1 < len(p.toks) && p.toks[p.i+1].text == "(":
		if !slices.Contains(evalFunctions, t.text) {
			return nil, fmt.Errorf("function %s is not read: %q", t.text, p.expr)
		}
		p.i += 2
		c := callNode{fn: t.text}
		for {
			a, err := p.parseExpr(0)
			if err != nil {
				return nil, err
			}
			c.args = append(c.args, a)
			if p.peek().text != "," {
				break
			}
			p.i++
		}
		return c, p.expect(")")
	case t.kind == 'i' && strings.HasPrefix(t.text, "$"):
		return nil, fmt.Errorf("grafana variable %s outside a string or range in %q", t.text, p.expr)
	case t.text == "{":
		return nil, fmt.Errorf("selector without a metric name in %q", p.expr)
	case t.kind == 'i':
		p.i++
		s := selNode{metric: t.text}
		if p.peek().text == "{" {
			p.i++
			for p.peek().text != "}" {
				if p.peek().text == "," {
					p.i++
					continue
				}
				if p.i+2 >= len(p.toks) {
					return nil, fmt.Errorf("unterminated matchers in %q", p.expr)
				}
				m, err := p.matcher()
				if err != nil {
					return nil, err
				}
				s.matchers = append(s.matchers, m)
			}
			p.i++
		}
		if r := p.peek(); r.kind == 'r' {
			if strings.Contains(r.text, ":") {
				return nil, fmt.Errorf("subquery %s is not read: %q", r.text, p.expr)
			}
			s.ranged = true
			p.i++
		}
		return s, nil
	}
	return nil, fmt.Errorf("unexpected %q at token %d of %q", t.text, p.i, p.expr)
}

// matcher reads one label matcher (label, operator, string), with
// Grafana's variables in its value standing for every value (".*", as
// "All" does), and returns it.
func (p *promqlParser) matcher() (matcher, error) {
	l, op, v := p.toks[p.i], p.toks[p.i+1], p.toks[p.i+2]
	if l.kind != 'i' || op.kind != 'p' || !slices.Contains([]string{"=", "!=", "=~", "!~"}, op.text) || v.kind != 's' {
		return matcher{}, fmt.Errorf("malformed matcher %s%s%s in %q", l.text, op.text, v.text, p.expr)
	}
	if l.text == "__name__" {
		return matcher{}, fmt.Errorf("__name__ matcher is not read: %q", p.expr)
	}
	m := matcher{label: l.text, op: op.text, value: grafanaVariable.ReplaceAllStringFunc(v.text, func(v string) string {
		if strings.Contains(v, "__") {
			return v // a Grafana built-in such as $__interval
		}
		return ".*"
	})}
	if m.op == "=~" || m.op == "!~" {
		re, err := regexp.Compile("^(?:" + m.value + ")$")
		if err != nil {
			return matcher{}, fmt.Errorf("matcher %s%s%q in %q: %w", m.label, m.op, m.value, p.expr, err)
		}
		m.re = re
	}
	p.i += 3
	return m, nil
}

// parsePromQL parses expr and returns its tree, or an error naming what
// it cannot read.
func parsePromQL(expr string) (node, error) {
	toks, err := lexPromQL(expr)
	if err != nil {
		return nil, err
	}
	p := &promqlParser{toks: toks, expr: expr}
	n, err := p.parseExpr(0)
	if err != nil {
		return nil, err
	}
	if p.i != len(toks) {
		return nil, fmt.Errorf("trailing %q in %q", toks[p.i].text, expr)
	}
	return n, nil
}

// selector is one vector selector: its metric and the labels its
// matchers name.
type selector struct {
	metric string
	labels []string
}

// grouping is one label list: its clause (by, on or ignoring), its
// labels and the metrics of the expression it applies to (the
// aggregation's argument, or both operands of the binary operator).
type grouping struct {
	clause  string
	labels  []string
	metrics []string
}

// promqlRefs is what an expression asks of the series.
type promqlRefs struct {
	selectors []selector
	groupings []grouping
}

// metrics is every metric name of r's selectors, in order, once each.
func (r promqlRefs) metrics() []string {
	var out []string
	for _, s := range r.selectors {
		if !slices.Contains(out, s.metric) {
			out = append(out, s.metric)
		}
	}
	return out
}

// queryRefs parses expr with parsePromQL and walks its tree for what it
// asks of the series: the selectors in the order written and the label
// lists, each after the lists inside its scope. It returns an error for
// an expression parsePromQL refuses, one without a metric and a label
// list whose scope has no metric.
func queryRefs(expr string) (promqlRefs, error) {
	n, err := parsePromQL(expr)
	if err != nil {
		return promqlRefs{}, err
	}
	var r promqlRefs
	// walk records n's selectors and label lists and returns its
	// metrics, once each.
	var walk func(n node) ([]string, error)
	walk = func(n node) ([]string, error) {
		var subs []node
		var clause string
		var labels []string
		switch n := n.(type) {
		case numNode:
			return nil, nil
		case selNode:
			s := selector{metric: n.metric}
			for _, m := range n.matchers {
				s.labels = append(s.labels, m.label)
			}
			r.selectors = append(r.selectors, s)
			return []string{n.metric}, nil
		case callNode:
			subs = n.args
		case aggNode:
			subs, clause, labels = []node{n.arg}, "by", n.by
		case binNode:
			subs, clause, labels = []node{n.lhs, n.rhs}, "ignoring", n.ignoring
			if n.hasOn {
				clause, labels = "on", n.on
			}
		default:
			return nil, fmt.Errorf("cannot read %T in %q", n, expr)
		}
		var ms []string
		for _, sub := range subs {
			sm, err := walk(sub)
			if err != nil {
				return nil, err
			}
			for _, m := range sm {
				if !slices.Contains(ms, m) {
					ms = append(ms, m)
				}
			}
		}
		if len(labels) > 0 {
			if len(ms) == 0 {
				return nil, fmt.Errorf("%s (%s) over no metric in %q", clause, strings.Join(labels, ", "), expr)
			}
			r.groupings = append(r.groupings, grouping{clause, labels, ms})
		}
		return ms, nil
	}
	if _, err := walk(n); err != nil {
		return r, err
	}
	if len(r.selectors) == 0 {
		return r, fmt.Errorf("no metric in %q", expr)
	}
	return r, nil
}

// TestParsePromQL: the parser's tree gives each selector's metric and
// matcher labels and each label list with its scope, and the parser
// refuses, naming it, what it cannot read.
func TestParsePromQL(t *testing.T) {
	r, err := queryRefs(`histogram_quantile(0.99, sum by (le) (rate(a_bucket{instance=~"$i", x!="}"}[$__rate_interval]))) / ignoring(file) group_left sum(rate(b_total[5m])) by (file)`)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprint([]selector{{"a_bucket", []string{"instance", "x"}}, {"b_total", nil}})
	if got := fmt.Sprint(r.selectors); got != want {
		t.Errorf("selectors %s, want %s", got, want)
	}
	wantG := fmt.Sprint([]grouping{{"by", []string{"le"}, []string{"a_bucket"}}, {"by", []string{"file"}, []string{"b_total"}},
		{"ignoring", []string{"file"}, []string{"a_bucket", "b_total"}}})
	if got := fmt.Sprint(r.groupings); got != wantG {
		t.Errorf("groupings %s, want %s", got, wantG)
	}
	// on covers its operator's operands, not the whole expression.
	r, err = queryRefs(`(m{topic="t"} / on (topic) n) + count(o)`)
	wantG = fmt.Sprint([]grouping{{"on", []string{"topic"}, []string{"m", "n"}}})
	if err != nil || fmt.Sprint(r.groupings) != wantG || fmt.Sprint(r.metrics()) != "[m n o]" {
		t.Errorf("on: %v %v %v, want %s over [m n o]", r.groupings, r.metrics(), err, wantG)
	}
	if r, err := queryRefs(`m{a=")"}`); err != nil || fmt.Sprint(r.selectors) != fmt.Sprint([]selector{{"m", []string{"a"}}}) {
		t.Errorf("a parenthesis in a string: %v %v", r.selectors, err)
	}
	for _, c := range []struct{ expr, want string }{
		{`sum by (x`, "unbalanced parentheses"},
		{`rate(m[5m]`, "unbalanced parentheses"},
		{`m{a=b}`, "malformed matcher a=b"},
		{`m{a=="x"}`, "malformed matcher a==x"},
		{`m{a="x}`, "unterminated string"},
		{`m{a="x"`, "unterminated matchers"},
		{`m{a=~"("}`, "error parsing regexp"},
		{`max by ("x") (m)`, `unexpected "x" in a label list`},
		{`sum by (a) ()`, `unexpected ")"`},
		{`sum by (a) (m) by (b)`, "two by lists"},
		{`1 + 2`, "no metric"},
		{`sum by (a) (1) + m`, "by (a) over no metric"},
		{`{__name__="m", topic="t"} and on (topic) n`, "selector without a metric name"},
		{`m{__name__="m"}`, "__name__ matcher is not read"},
		{`m and on (topic) n`, "and is not read"},
		{`m > 0`, "> is not read"},
		{`sum(rate(b_total[5m:1m]))`, "subquery [5m:1m] is not read"},
		{`rate(b_total[5m] offset 1h)`, "offset is not read"},
		{`sum without (a) (m)`, "without is not read"},
		{`m / on (a) ignoring (b) n`, "two on/ignoring lists"},
		{`m / on (a) group_right n`, "group_right is not read"},
		{`m / on (a) group_left (b) n`, "group_left with labels is not read"},
		{`topk(1, m)`, "aggregation topk is not read"},
		{`delta(m[5m])`, "function delta is not read"},
		{`m{a=~"$v"} / $v`, "grafana variable $v outside a string or range"},
	} {
		if r, err := queryRefs(c.expr); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: read as %+v, error %v, want an error saying %q", c.expr, r, err, c.want)
		}
	}
}
