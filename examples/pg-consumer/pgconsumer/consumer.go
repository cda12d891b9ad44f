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
	// seed's crash between side effect and ack).
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

// String is the summary line of seed 003: CONSUMER_HALT after a halt,
// CONSUMER_DONE otherwise.
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
	client := NewClient(cfg.Broker, cfg.Topic, cfg.Group, cfg.HTTPClient)

	var (
		pending   int   // messages applied since the last ack
		toAck     int64 // highest applied offset not yet acknowledged
		busySince time.Time
		started   bool // the current session has answered a fetch
	)
	ack := func(ctx context.Context) error {
		committed, err := client.Ack(ctx, toAck)
		if err != nil {
			return err
		}
		res.Committed = committed
		pending = 0
		fmt.Fprintf(cfg.Log, "CONSUMER_ACK offset=%d committed=%d\n", toAck, committed)
		return nil
	}

loop:
	for ctx.Err() == nil {
		fr, err := client.Fetch(ctx, cfg.Max, cfg.Wait)
		switch {
		case ctx.Err() != nil:
			break loop
		case HasCode(err, CodeGroupBusy):
			if busySince.IsZero() {
				busySince = time.Now()
				fmt.Fprintf(cfg.Log, "CONSUMER_WAIT group %q is busy (another session holds it); retrying for up to %s\n", cfg.Group, cfg.BusyTimeout)
			}
			if time.Since(busySince) > cfg.BusyTimeout {
				return res, fmt.Errorf("group %q still busy after %s: %w", cfg.Group, cfg.BusyTimeout, err)
			}
			select {
			case <-ctx.Done():
				break loop
			case <-time.After(busyPoll):
			}
			continue
		case HasCode(err, CodeSessionExpired):
			// Our lease ran out: what we applied but did not ack will be
			// redelivered to the new session and deduplicated.
			fmt.Fprintf(cfg.Log, "CONSUMER_SESSION_EXPIRED redelivery from committed offset; %d unacked messages will come again\n", pending)
			client.ResetSession()
			pending, started = 0, false
			continue
		case err != nil:
			return res, err
		}
		if !busySince.IsZero() {
			fmt.Fprintf(cfg.Log, "CONSUMER_WAIT done after %s\n", time.Since(busySince).Round(time.Millisecond))
			busySince = time.Time{}
		}
		if !started {
			started = true
			res.Committed = fr.Committed
			fmt.Fprintf(cfg.Log, "CONSUMER_START session=%s committed=%d\n", client.Session(), fr.Committed)
		}
		if len(fr.Messages) == 0 {
			if cfg.Follow {
				continue
			}
			break loop
		}
		for _, d := range fr.Messages {
			if res.FirstOffset < 0 {
				res.FirstOffset = d.Offset
			}
			res.Seen++
			res.LastOffset = d.Offset
			if d.Error != "" {
				// Applied with NULL content so the offset is accounted for.
				fmt.Fprintf(cfg.Log, "CONSUMER_BAD_RECORD offset=%d: %s\n", d.Offset, d.Error)
			}
			inserted, err := store.Apply(ctx, cfg.Topic, d)
			if err != nil {
				if ctx.Err() != nil {
					break loop
				}
				return res, err
			}
			if inserted {
				res.Applied++
			} else {
				res.Skipped++
			}
			pending++
			toAck = d.Offset // offsets grow within a session
			if cfg.HaltAfter > 0 && res.Seen >= int64(cfg.HaltAfter) {
				// Abrupt stop: the side effect is in PostgreSQL, the ack is
				// not sent and the session is not released.
				res.Halted = true
				return res, nil
			}
			if pending >= cfg.AckEvery {
				switch err := ack(ctx); {
				case HasCode(err, CodeSessionExpired):
					fmt.Fprintf(cfg.Log, "CONSUMER_SESSION_EXPIRED on ack of %d; redelivery from committed offset\n", toAck)
					client.ResetSession()
					pending, started = 0, false
					continue loop
				case err != nil:
					if ctx.Err() != nil {
						break loop
					}
					return res, err
				}
			}
		}
	}

	// Normal end (caught up, or ctx cancelled): ack the rest, release, count.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if pending > 0 && client.Session() != "" {
		if err := ack(fctx); err != nil {
			return res, fmt.Errorf("final ack: %w", err)
		}
	}
	if err := client.Release(fctx); err != nil {
		return res, err
	}
	rows, distinct, err := store.Counts(fctx)
	if err != nil {
		return res, err
	}
	res.Rows, res.DistinctOffsets = rows, distinct
	return res, nil
}
