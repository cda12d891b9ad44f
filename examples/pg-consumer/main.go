// Command pg-consumer pulls one topic through an mmmq consumer group and
// applies every message to PostgreSQL, deduplicating redeliveries by log
// offset: the log-queue study's consumer_redelivery_dedup_by_offset
// experiment and its negative control, against the real broker. The logic
// lives in package pgconsumer (see its documentation for the table, the ack
// policy and why a pull group rather than a push endpoint).
//
//	go run ./examples/pg-consumer -topic orders -group pg -dsn postgres://postgres@127.0.0.1:5432/mmmq
//	go run ./examples/pg-consumer ... -halt-after 25        # crash after 25 applied, 20 acked
//	go run ./examples/pg-consumer ...                       # restart: redelivery from 20, 5 duplicates skipped
//	go run ./examples/pg-consumer ... -no-dedup             # negative control (own database): 65 rows
//
// Flags:
//
//	-broker URL        broker base URL (default http://localhost:8080)
//	-topic T           topic to consume (required)
//	-group G           consumer group (default pg-consumer)
//	-dsn DSN           PostgreSQL connection string (default $DATABASE_URL)
//	-max N             messages per fetch (default 100)
//	-wait D            long-poll wait per fetch (default 1s; a number alone is milliseconds)
//	-ack-every N       acknowledge the highest applied offset every N messages (default 10)
//	-halt-after N      stop abruptly after N applied messages: no further ack, no session release
//	-no-dedup          negative control: table without primary key, plain insert
//	-follow            keep polling when caught up (default: stop at the first empty fetch)
//	-busy-timeout D    how long to wait while the group is held by another session (default 2m)
//	-v                 print progress lines (acks, waits) on stderr
//
// Output: one summary line on stdout,
//
//	CONSUMER_HALT seen=25 lastOffset=24 committed=20 (applied, not acked)
//	CONSUMER_DONE firstOffset=20 seen=40 applied=35 skippedDuplicates=5 | rows=60 distinctOffsets=60
//
// Exit status 0 on success (halt included), 1 on errors, 2 on bad flags.
// SIGINT/SIGTERM end a run like catching up does: final ack, session
// release, summary.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/mmmq/mmmq/examples/pg-consumer/pgconsumer"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// waitFlag is a duration flag that also takes a bare number of milliseconds
// (the fetch API's wait=MS).
type waitFlag struct{ d *time.Duration }

func (w waitFlag) String() string {
	if w.d == nil {
		return ""
	}
	return w.d.String()
}

func (w waitFlag) Set(s string) error {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		*w.d = time.Duration(ms) * time.Millisecond
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("want a duration (500ms, 2s) or milliseconds")
	}
	*w.d = d
	return nil
}

// run is main without the process: it parses args, runs the consumer and
// returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("pg-consumer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := pgconsumer.Config{Wait: time.Second}
	verbose := false
	fs.StringVar(&cfg.Broker, "broker", "http://localhost:8080", "broker base URL")
	fs.StringVar(&cfg.Topic, "topic", "", "topic to consume (required)")
	fs.StringVar(&cfg.Group, "group", "pg-consumer", "consumer group")
	fs.StringVar(&cfg.DSN, "dsn", os.Getenv("DATABASE_URL"), "PostgreSQL connection string (default $DATABASE_URL)")
	fs.IntVar(&cfg.Max, "max", 100, "messages per fetch")
	fs.Var(waitFlag{&cfg.Wait}, "wait", "long-poll wait per fetch (duration, or milliseconds)")
	fs.IntVar(&cfg.AckEvery, "ack-every", 10, "acknowledge the highest applied offset every N messages")
	fs.IntVar(&cfg.HaltAfter, "halt-after", 0, "stop abruptly after N applied messages (no further ack, session not released)")
	fs.BoolVar(&cfg.NoDedup, "no-dedup", false, "negative control: no primary key, plain insert")
	fs.BoolVar(&cfg.Follow, "follow", false, "keep polling when caught up")
	fs.DurationVar(&cfg.BusyTimeout, "busy-timeout", 2*time.Minute, "how long to wait while another session holds the group")
	fs.BoolVar(&verbose, "v", false, "progress lines on stderr")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "pg-consumer: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if cfg.Topic == "" || cfg.DSN == "" {
		fmt.Fprintln(stderr, "pg-consumer: -topic and -dsn (or $DATABASE_URL) are required")
		fs.Usage()
		return 2
	}
	if cfg.Max <= 0 || cfg.AckEvery <= 0 || cfg.HaltAfter < 0 || cfg.Wait < 0 || cfg.BusyTimeout <= 0 {
		fmt.Fprintln(stderr, "pg-consumer: -max, -ack-every and -busy-timeout must be positive; -wait and -halt-after not negative")
		return 2
	}
	if verbose {
		cfg.Log = stderr
	}
	res, err := pgconsumer.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "pg-consumer: %v\n", err)
		fmt.Fprintf(stderr, "pg-consumer: stopped at seen=%d lastOffset=%d committed=%d\n", res.Seen, res.LastOffset, res.Committed)
		return 1
	}
	fmt.Fprintln(stdout, res)
	return 0
}
