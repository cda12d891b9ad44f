package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/mmmq/mmmq/modules/admin"
)

// specFlags are the dispatcher fields create and update take as flags,
// named after the fields of the admin API's body.
type specFlags struct {
	r        *remote
	file     string
	name     string
	host     string
	patterns []string
	path     string
	timeout  time.Duration
	policy   string
	interval time.Duration
	maxCount int
	start    string
	paused   bool
}

// addSpecFlags adds the dispatcher flags to r (--name only with withName:
// update takes the name as its argument).
func addSpecFlags(r *remote, withName bool) *specFlags {
	f := &specFlags{r: r}
	fs := r.fs
	fs.StringVar(&f.file, "file", "", `the whole dispatcher as the API's JSON body ("-": standard input), instead of the flags below`)
	if withName {
		fs.StringVar(&f.name, "name", "", "dispatcher name (required)")
	}
	fs.StringVar(&f.host, "host", "", "consumer base URL, e.g. http://localhost:8081")
	fs.Func("pattern", "topic pattern; repeat for more (* one segment, ** any number)", func(s string) error {
		f.patterns = append(f.patterns, s)
		return nil
	})
	fs.StringVar(&f.path, "path", "", "path the messages are posted to (default /mmmq/messages)")
	fs.DurationVar(&f.timeout, "timeout", 0, "timeout of one push to the consumer, e.g. 30s (default mmmq.broker.dispatch)")
	fs.StringVar(&f.policy, "commit-policy", "", "every-message or interval (default every-message)")
	fs.DurationVar(&f.interval, "commit-interval", 0, "with --commit-policy interval: commit at most this often")
	fs.IntVar(&f.maxCount, "commit-max-count", 0, "with --commit-policy interval: or after this many messages")
	fs.StringVar(&f.start, "start", "", "earliest (default: every stored message) or latest (skip what the topics hold now)")
	fs.BoolVar(&f.paused, "paused", false, "create it paused (update: --paused=false resumes it)")
	return f
}

// specFlagNames are the flags that are a field of the dispatcher.
var specFlagNames = []string{"name", "host", "pattern", "path", "timeout", "commit-policy", "commit-interval", "commit-max-count", "start", "paused"}

// given returns the dispatcher flags set on the command line.
func (f *specFlags) given() []string {
	set := map[string]bool{}
	f.r.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	var out []string
	for _, n := range specFlagNames {
		if set[n] {
			out = append(out, "--"+n)
		}
	}
	return out
}

// apply sets the fields of s that were given as flags.
func (f *specFlags) apply(s *admin.Spec) {
	commit := func() *admin.CommitSpec {
		if s.Commit == nil {
			s.Commit = &admin.CommitSpec{}
		}
		return s.Commit
	}
	f.r.fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "name":
			s.Name = f.name
		case "host":
			s.Host = f.host
		case "pattern":
			s.Patterns = f.patterns
		case "path":
			s.Path = f.path
		case "timeout":
			s.Timeout = admin.Duration(f.timeout)
		case "commit-policy":
			commit().Policy = f.policy
		case "commit-interval":
			commit().Interval = admin.Duration(f.interval)
		case "commit-max-count":
			commit().MaxCount = f.maxCount
		case "start":
			s.Start = f.start
		case "paused":
			s.Paused = f.paused
		}
	})
}

// fileBody returns the body --file names (nil without --file), or the
// exit code of a usage error: --file with a dispatcher flag, or a file
// that cannot be read.
func (f *specFlags) fileBody() ([]byte, int, bool) {
	if f.file == "" {
		return nil, 0, true
	}
	if g := f.given(); len(g) > 0 {
		return nil, f.r.usageError("--file is the whole dispatcher: give no %s with it", strings.Join(g, ", ")), false
	}
	var b []byte
	var err error
	if f.file == "-" {
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(f.file)
	}
	if err == nil && len(strings.TrimSpace(string(b))) == 0 {
		err = errors.New("empty")
	}
	if err != nil {
		return nil, f.r.usageError("--file %s: %v", f.file, err), false
	}
	return b, 0, true
}

// seekTarget turns --to into the "to" of a seek body: "earliest",
// "latest", an offset, or {"timestamp": <unix ms>} for an RFC 3339 time
// or ts:<unix ms>.
func seekTarget(s string) (any, error) {
	if s == "earliest" || s == "latest" {
		return s, nil
	}
	bad := fmt.Errorf("--to must be earliest, latest, an offset >= 0, an RFC 3339 time (2026-01-02T15:04:05Z) or ts:<unix ms>; got %q", s)
	if ms, ok := strings.CutPrefix(s, "ts:"); ok {
		n, err := strconv.ParseInt(ms, 10, 64)
		if err != nil || n < 0 {
			return nil, bad
		}
		return map[string]int64{"timestamp": n}, nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 {
			return nil, bad
		}
		return n, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.UnixMilli() < 0 {
		return nil, bad
	}
	return map[string]int64{"timestamp": t.UnixMilli()}, nil
}
