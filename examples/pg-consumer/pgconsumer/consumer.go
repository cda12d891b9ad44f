package pgconsumer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Config is one consumer run. Broker, Topic, Group and DSN are required.
type Config struct {
	Broker string // broker base URL, e.g. http://localhost:8080
	Topic  string
	Group  string
	DSN    string // PostgreSQL connection string (pgx syntax)

	Max      int           // messages per fetch; default 100
	Wait     time.Duration // long-poll wait per fetch; default 1s
	AckEvery int           // acknowledge after this many messages; default 10

	// HaltAfter > 0 stops abruptly after that many messages were applied in
	// this run: no ack beyond the last ack point, no session release (the
	// log-queue study's crash between side effect and ack).
	HaltAfter int
	// NoDedup is the negative control: no primary key, plain insert.
	NoDedup bool
	// Follow keeps polling when the group is caught up; without it the run
	// ends at the first empty fetch (acking what it applied, releasing the
	// session).
	Follow bool
	// BusyTimeout bounds how long a run waits while the group answers
	// GROUP_BUSY (a halted run's lease still alive); default 2m.
	BusyTimeout time.Duration

	// Log receives progress lines (CONSUMER_WAIT, CONSUMER_ACK...); nil
	// discards them.
	Log io.Writer
	// HTTPClient is used for the broker; nil means a default client.
	HTTPClient *http.Client
}

func (c *Config) withDefaults() error {
	switch {
	case c.Broker == "":
		return errors.New("broker URL is required")
	case c.Topic == "":
		return errors.New("topic is required")
	case c.Group == "":
		return errors.New("group is required")
	case c.DSN == "":
		return errors.New("dsn is required")
	case c.Max < 0, c.AckEvery < 0, c.HaltAfter < 0, c.Wait < 0, c.BusyTimeout < 0:
		return errors.New("max, wait, ack-every, halt-after and busy-timeout must not be negative")
	}
	if c.Max == 0 {
		c.Max = 100
	}
	if c.Wait == 0 {
		c.Wait = time.Second
	}
	if c.AckEvery == 0 {
		c.AckEvery = 10
	}
	if c.BusyTimeout == 0 {
		c.BusyTimeout = 2 * time.Minute
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return nil
}

// Result summarizes a run.
type Result struct {
	FirstOffset int64 // offset of the first message this run received; -1 if none
	LastOffset  int64 // offset of the last message received; -1 if none
	Seen        int64 // messages received (redeliveries included)
	Applied     int64 // rows inserted
	Skipped     int64 // duplicates: offset already in the table (0 rows affected)
	Committed   int64 // the group's committed offset as last reported by the broker
	Halted      bool  // stopped by HaltAfter: no final ack, session not released
	// Rows and DistinctOffsets count the table at the end of a normal run
	// (not filled after a halt).
	Rows            int64
	DistinctOffsets int64
}

// String is the summary line, in the log-queue study's format:
// CONSUMER_HALT after a halt, CONSUMER_DONE otherwise.
func (r Result) String() string {
	if r.Halted {
		return fmt.Sprintf("CONSUMER_HALT seen=%d lastOffset=%d committed=%d (applied, not acked)",
			r.Seen, r.LastOffset, r.Committed)
	}
	return fmt.Sprintf("CONSUMER_DONE firstOffset=%d seen=%d applied=%d skippedDuplicates=%d | rows=%d distinctOffsets=%d",
		r.FirstOffset, r.Seen, r.Applied, r.Skipped, r.Rows, r.DistinctOffsets)
}

// busyPoll is the pause between fetches while the group is busy.
const busyPoll = 250 * time.Millisecond

// Run consumes until the group is caught up (or, with Follow, until ctx is
// cancelled), applying every message to PostgreSQL and acknowledging every
// AckEvery messages. On a normal end it acknowledges the rest, releases the
// session and counts the table. Cancelling ctx ends the run the same way
// (final ack and release get a few seconds of their own) and is not an error.
func Run(ctx context.Context, cfg Config) (Result, error) {
	res := Result{FirstOffset: -1, LastOffset: -1}
	if err := cfg.withDefaults(); err != nil {
		return res, err
	}
	store, err := OpenStore(ctx, cfg.DSN, cfg.NoDedup)
	if err != nil {
		return res, err
	}
	defer store.Close(context.WithoutCancel(ctx))
	c := &consumer{
		cfg:    cfg,
		client: NewClient(cfg.Broker, cfg.Topic, cfg.Group, cfg.HTTPClient),
		store:  store,
		res:    res,
	}
loop:
	for ctx.Err() == nil {
		next, err := c.round(ctx)
		switch {
		case err != nil:
			return c.res, err
		case next == stepHalt:
			return c.res, nil
		case next == stepEnd:
			break loop
		}
	}
	err = c.finish(ctx)
	return c.res, err
}

// step says how a run goes on after one part of it.
type step int

const (
	stepContinue step = iota // the next message of the batch, or the next fetch
	stepRefetch              // drop the rest of the batch and fetch again
	stepEnd                  // normal end: final ack, release, count the table
	stepHalt                 // abrupt stop (HaltAfter): no ack, no release
)

// consumer is the state of one Run.
type consumer struct {
	cfg    Config
	client *Client
	store  *Store
	res    Result

	pending   int   // messages applied since the last ack
	toAck     int64 // highest applied offset not yet acknowledged
	busySince time.Time
	started   bool // the current session has answered a fetch
}

// round fetches one batch and applies it. A returned error ends the run at
// once, without final ack or release.
func (c *consumer) round(ctx context.Context) (step, error) {
	fr, err := c.client.Fetch(ctx, c.cfg.Max, c.cfg.Wait)
	if ctx.Err() != nil {
		return stepEnd, nil
	}
	if err != nil {
		return c.fetchFailed(ctx, err)
	}
	c.fetched(fr)
	if len(fr.Messages) == 0 {
		if c.cfg.Follow {
			return stepContinue, nil
		}
		return stepEnd, nil
	}
	for _, d := range fr.Messages {
		next, err := c.apply(ctx, fr.Incarnation, d)
		if err != nil || next != stepContinue {
			return next, err
		}
	}
	return stepContinue, nil
}

// fetchFailed handles a fetch error: GROUP_BUSY is retried for up to
// BusyTimeout, SESSION_EXPIRED starts a new session (redelivery from the
// committed offset); any other error is returned.
func (c *consumer) fetchFailed(ctx context.Context, err error) (step, error) {
	switch {
	case HasCode(err, CodeGroupBusy):
		if c.busySince.IsZero() {
			c.busySince = time.Now()
			fmt.Fprintf(c.cfg.Log, "CONSUMER_WAIT group %q is busy (another session holds it); retrying for up to %s\n", c.cfg.Group, c.cfg.BusyTimeout)
		}
		if time.Since(c.busySince) > c.cfg.BusyTimeout {
			return stepEnd, fmt.Errorf("group %q still busy after %s: %w", c.cfg.Group, c.cfg.BusyTimeout, err)
		}
		select {
		case <-ctx.Done():
			return stepEnd, nil
		case <-time.After(busyPoll):
		}
		return stepContinue, nil
	case HasCode(err, CodeSessionExpired):
		// Our lease ran out: what we applied but did not ack will be
		// redelivered to the new session and deduplicated.
		fmt.Fprintf(c.cfg.Log, "CONSUMER_SESSION_EXPIRED redelivery from committed offset; %d unacked messages will come again\n", c.pending)
		c.newSession()
		return stepContinue, nil
	}
	return stepEnd, err
}

// fetched notes a successful fetch: the end of a busy wait, and the start of
// a session (its committed offset).
func (c *consumer) fetched(fr *FetchResult) {
	if !c.busySince.IsZero() {
		fmt.Fprintf(c.cfg.Log, "CONSUMER_WAIT done after %s\n", time.Since(c.busySince).Round(time.Millisecond))
		c.busySince = time.Time{}
	}
	if !c.started {
		c.started = true
		c.res.Committed = fr.Committed
		fmt.Fprintf(c.cfg.Log, "CONSUMER_START session=%s committed=%d\n", c.client.Session(), fr.Committed)
	}
}

// apply writes one delivery to PostgreSQL, counts it, and acknowledges when
// AckEvery messages are pending. It returns stepHalt once HaltAfter
// messages were seen, stepRefetch when the ack found the session expired,
// and stepEnd (with a nil error) when ctx ended during the insert or ack.
func (c *consumer) apply(ctx context.Context, incarnation string, d Delivery) (step, error) {
	if c.res.FirstOffset < 0 {
		c.res.FirstOffset = d.Offset
	}
	c.res.Seen++
	c.res.LastOffset = d.Offset
	if d.Error != "" {
		// Applied with NULL content so the offset is accounted for.
		fmt.Fprintf(c.cfg.Log, "CONSUMER_BAD_RECORD offset=%d: %s\n", d.Offset, d.Error)
	}
	inserted, err := c.store.Apply(ctx, c.cfg.Topic, incarnation, d)
	if err != nil {
		if ctx.Err() != nil {
			return stepEnd, nil
		}
		return stepEnd, err
	}
	if inserted {
		c.res.Applied++
	} else {
		c.res.Skipped++
	}
	c.pending++
	c.toAck = d.Offset // offsets grow within a session
	if c.cfg.HaltAfter > 0 && c.res.Seen >= int64(c.cfg.HaltAfter) {
		// Abrupt stop: the side effect is in PostgreSQL, the ack is
		// not sent and the session is not released.
		c.res.Halted = true
		return stepHalt, nil
	}
	if c.pending < c.cfg.AckEvery {
		return stepContinue, nil
	}
	switch err := c.ack(ctx); {
	case HasCode(err, CodeSessionExpired):
		fmt.Fprintf(c.cfg.Log, "CONSUMER_SESSION_EXPIRED on ack of %d; redelivery from committed offset\n", c.toAck)
		c.newSession()
		return stepRefetch, nil
	case err != nil:
		if ctx.Err() != nil {
			return stepEnd, nil
		}
		return stepEnd, err
	}
	return stepContinue, nil
}

// ack acknowledges up to toAck and records the committed offset.
func (c *consumer) ack(ctx context.Context) error {
	committed, err := c.client.Ack(ctx, c.toAck)
	if err != nil {
		return err
	}
	c.res.Committed = committed
	c.pending = 0
	fmt.Fprintf(c.cfg.Log, "CONSUMER_ACK offset=%d committed=%d\n", c.toAck, committed)
	return nil
}

// newSession forgets the expired session: the next fetch starts a new one
// at the committed offset.
func (c *consumer) newSession() {
	c.client.ResetSession()
	c.pending, c.started = 0, false
}

// finish is the normal end (caught up, or ctx cancelled): it acknowledges
// the rest, releases the session and counts the table, with 10 seconds of
// its own even when ctx is done.
func (c *consumer) finish(ctx context.Context) error {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if c.pending > 0 && c.client.Session() != "" {
		if err := c.ack(fctx); err != nil {
			return fmt.Errorf("final ack: %w", err)
		}
	}
	if err := c.client.Release(fctx); err != nil {
		return err
	}
	rows, distinct, err := c.store.Counts(fctx)
	if err != nil {
		return err
	}
	c.res.Rows, c.res.DistinctOffsets = rows, distinct
	return nil
}
