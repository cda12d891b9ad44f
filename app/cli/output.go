package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

// call sends one request and prints its answer: with --json the broker's
// JSON as is (indented); otherwise it decodes the answer into v and prints
// text(). It returns the exit code.
func (r *remote) call(method, path string, body []byte, v any, text func() string) int {
	c := r.client()
	raw, err := c.do(method, path, body)
	if err != nil {
		return fail(err)
	}
	if r.asJSON {
		return printJSON(raw)
	}
	if err := c.decode(raw, v); err != nil {
		return fail(err)
	}
	return show(text())
}

// fail reports err on stderr and returns exit code 1.
func fail(err error) int {
	fmt.Fprintln(os.Stderr, prog+":", err)
	return 1
}

// printJSON writes a JSON answer to stdout as the broker sent it, indented.
func printJSON(raw []byte) int {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return fail(err)
	}
	b.WriteByte('\n')
	return show(b.String())
}

// show writes text to stdout and returns the exit code.
func show(text string) int {
	if _, err := os.Stdout.WriteString(text); err != nil {
		return fail(err)
	}
	return 0
}

// table lays out a header and rows as aligned columns.
func table(header []string, rows [][]string) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, row := range rows {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
	return b.String()
}

// block lays out "key: value" lines, the values aligned.
func block(pairs [][2]string) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, p := range pairs {
		fmt.Fprintf(tw, "%s:\t%s\n", p[0], p[1])
	}
	tw.Flush()
	return b.String()
}

// orDash is s, or "-" for an empty cell.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// when formats an optional time for a cell.
func when(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.Format(time.RFC3339)
}

func num[T int | int64 | uint64](n T) string { return fmt.Sprint(n) }
