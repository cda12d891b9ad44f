package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mmmq/mmmq/modules/admin"
	"github.com/mmmq/mmmq/modules/dispatcher"
)

// dispatchers is `mmmq dispatchers <subcommand>`: the admin API
// (/mmmq/dispatchers) of a running broker.
func dispatchers(args []string) int {
	g := &group{name: "dispatchers", about: `Lists, creates, changes, pauses, resumes, moves and deletes the dispatchers of
a running broker through its admin API (/mmmq/dispatchers), and publishes their
dead letters again. Dispatchers from Go code or the configuration file (source
go, config) can be paused, resumed, sought and redriven; only those created
here (source api) can be updated or deleted. Signing secrets and header values
are never shown: get and list show them redacted.`,
		subs: []subcommand{
			{name: "list", synopsis: "[flags]", run: dispatchersList,
				brief: "List every dispatcher: name, source (go, config or api), paused, host, patterns, commit policy."},
			{name: "get", synopsis: "NAME [flags]", run: dispatchersGet,
				brief: "Show one dispatcher and its progress on each topic it delivers.",
				about: "Per topic: the committed offset, the high watermark, the lag, the age of the oldest\nunacknowledged message, the state, the attempt, the messages delivered, given up on\n(exhausted) and dead-lettered, and the last error."},
			{name: "create", synopsis: "--name NAME --host URL --pattern P [--pattern P ...] [flags] | --file FILE", run: dispatchersCreate,
				brief: "Create a dispatcher; it starts at once and is kept in dispatchers.json.",
				about: specAbout},
			{name: "update", synopsis: "NAME [--host URL] [--pattern P ...] [flags] | NAME --file FILE", run: dispatchersUpdate,
				brief: "Change a dispatcher created through the API; its checkpoints are kept.",
				about: "With flags, update reads the dispatcher, changes the fields given and replaces it\n" +
					"(--pattern, repeated, replaces the whole list). With --file, the file is the whole\n" +
					"new dispatcher (its \"name\" may be left out).\n\n" + specAbout},
			{name: "delete", synopsis: "NAME [--delete-checkpoints] [flags]", run: dispatchersDelete,
				brief: "Delete a dispatcher created through the API.",
				about: "Its checkpoints are kept unless --delete-checkpoints: a dispatcher created again under\nthe name then replays its topics from the start."},
			{name: "pause", synopsis: "NAME [flags]", run: dispatchersPause(true),
				brief: "Stop delivering until resumed (every pause is kept across restarts, in paused.json)."},
			{name: "resume", synopsis: "NAME [flags]", run: dispatchersPause(false),
				brief: "Deliver again, from the checkpoints."},
			{name: "seek", synopsis: "NAME --to earliest|latest|OFFSET|TIME|ts:MS [--topic PATTERN] [--rate N] [flags]", run: dispatchersSeek,
				brief: "Move the dispatcher's checkpoints, backwards too.",
				about: seekAbout},
			{name: "redrive", synopsis: "NAME [--from N] [--to N] [--rate N] [flags]", run: dispatchersRedrive,
				brief: "Publish the dispatcher's dead letters to their original topics again.",
				about: redriveAbout},
		}}
	return g.run(args)
}

// specAbout describes the dispatcher flags of create and update.
const specAbout = `The dispatcher is given either as flags or, with --file FILE ("-": standard
input), as the JSON body of the admin API:
  {"name":"billing","host":"http://localhost:8081","patterns":["order.**"],
   "path":"/mmmq/messages","timeout":"30s",
   "commit":{"policy":"interval","interval":"1s","max-count":1000},"start":"earliest",
   "dead-letter":"dead-letter.billing","expired":"skip","ack-mode":"body","max-abnormal-attempts":0,
   "max-abnormal-duration":"0s","backoff-jitter":false,"signing-secrets":["whsec_..."],"signing-keys":["whsk_..."],
   "headers":{"Authorization":"Bearer ..."},"cloudevents":false,"max-in-flight":8,"ordering":"key","max-unacked":100000,
   "rate-limit":50,"rate-burst":100,"breaker-failures":5,"breaker-cooloff":"1s","pause-after":"24h","adaptive-concurrency":"aimd","batch":{"max-messages":100,"max-bytes":1048576,"max-wait":"0s"},"paused":false}
Fields left out take the broker's defaults (mmmq.broker.dispatch). Signing secrets,
signing keys and header values are never shown back: a secret as
whsec_` + "\u2026" + `(redacted, fingerprint ...), a key as whsk_` + "\u2026" + `(redacted, kid ...),
a header value as (redacted); sent back as shown (update, or a file made from
get --json), they keep the current secret, key or value.`

// redriveAbout describes redrive.
const redriveAbout = `Publishes the dead letters at offsets [--from, --to) of the dispatcher's
dead-letter topic (default: all of them) to the topics they were read from,
durably, with fresh ids and an mmmq-redriven-from header; the dead letters stay.
Redriving the same offsets twice publishes them twice. At most 10000 per call:
when "next" is below "to", run it again with --from NEXT. A dispatcher whose
dead letters are off is 409 NO_DEAD_LETTERS.
--rate N (messages per second, > 0, at most 1000000) paces the delivery, not the
republishing: this dispatcher pushes each topic's redriven backlog at most N
per second (over all those topics together) until its checkpoint reaches the
topic's end as the redrive ended; "get" shows it (replay). Without --rate a
redrive clears the replay rate of the topics it publishes into. Kept in
memory: a pause and resume keep it, a broker restart drops it.`

// seekAbout describes seek's --to.
const seekAbout = `--to is where each topic's checkpoint goes:
  earliest   the log start offset: redeliver everything still stored
  latest     the high watermark: skip the backlog
  OFFSET     an offset, e.g. 1200 (below the log start offset the broker answers
             410 OFFSET_EXPIRED, above the high watermark 400)
  TIME       an RFC 3339 time, e.g. 2026-01-02T15:04:05Z or 2026-01-02T15:04:05+09:00:
             the first message stored at or after it (the high watermark if none is)
  ts:MS      the same with the time in Unix milliseconds, e.g. ts:1767225600000
--topic limits the seek to the topics matching a name or pattern (default: every
topic the dispatcher delivers).
--rate N (messages per second, > 0, at most 1000000) replays each moved topic's
backlog, from the new position to its high watermark as of the seek, at most N
per second (over all the moved topics together), then goes at the normal speed;
"get" shows it (replay). Without --rate a seek clears the replay rate of the
topics it moves. Kept in memory: a pause and resume keep it, a broker restart
drops it.`

// dispatcherPath is the admin API path of the dispatcher name.
func dispatcherPath(name string) string { return "/mmmq/dispatchers/" + url.PathEscape(name) }

func dispatchersList(r *remote, args []string) int {
	if _, code, ok := r.parse(args); !ok {
		return code
	}
	var out struct {
		Dispatchers []admin.Listed `json:"dispatchers"`
	}
	return r.call(http.MethodGet, "/mmmq/dispatchers", nil, &out, func() string {
		rows := make([][]string, 0, len(out.Dispatchers))
		for _, d := range out.Dispatchers {
			rows = append(rows, []string{d.Name, d.Source, yesNo(d.Paused), d.Host, strings.Join(d.Patterns, ","),
				orDash(d.Path), time.Duration(d.Timeout).String(), commitText(d.Commit)})
		}
		return table([]string{"NAME", "SOURCE", "PAUSED", "HOST", "PATTERNS", "PATH", "TIMEOUT", "COMMIT"}, rows)
	})
}

func dispatchersGet(r *remote, args []string) int {
	pos, code, ok := r.parse(args, "NAME")
	if !ok {
		return code
	}
	var st admin.Status
	return r.call(http.MethodGet, dispatcherPath(pos[0]), nil, &st, func() string {
		if len(st.Topics) == 0 {
			why := "no open topic matches its patterns"
			if st.Paused {
				why = "paused, or " + why
			}
			return dispatcherBlock(st.Listed) + pauseBlock(st) + rateBlock(st.RateLimit) + breakerBlock(st.Breaker) + concurrencyBlock(st.Concurrency) + "\ntopics: none shown (" + why + ")\n"
		}
		rows := make([][]string, 0, len(st.Topics))
		for _, t := range st.Topics {
			age := "-"
			if t.OldestUnackedAgeSeconds > 0 {
				age = time.Duration(t.OldestUnackedAgeSeconds * float64(time.Second)).Round(time.Millisecond).String()
			}
			rows = append(rows, []string{t.Topic, num(t.Committed), num(t.HighWatermark), num(t.Lag), t.State,
				num(t.Attempt), num(t.Delivered), num(t.Exhausted), num(t.DeadLettered), age, when(t.NextRetry), orDash(t.LastError)})
		}
		out := dispatcherBlock(st.Listed) + pauseBlock(st) + "\n" + table([]string{"TOPIC", "COMMITTED", "HIGH-WATERMARK", "LAG", "STATE",
			"ATTEMPT", "DELIVERED", "EXHAUSTED", "DEAD-LETTERED", "OLDEST-UNACKED", "NEXT-RETRY", "LAST-ERROR"}, rows)
		return out + rateBlock(st.RateLimit) + breakerBlock(st.Breaker) + concurrencyBlock(st.Concurrency) + replayBlock(st.Topics) + keysBlock(st.Topics)
	})
}

// replayBlock lists the topics with a replay rate (a seek or redrive with
// --rate); "" when none has one.
func replayBlock(topics []admin.TopicStatus) string {
	var b strings.Builder
	for _, t := range topics {
		if t.Replay != nil {
			fmt.Fprintf(&b, "replay: %s %s\n", t.Topic, replayText(t.Replay))
		}
	}
	if b.Len() == 0 {
		return ""
	}
	return "\n" + b.String()
}

// replayText describes a replay in a few words.
func replayText(r *dispatcher.Replay) string {
	until := num(r.Until)
	if r.Until == math.MaxInt64 {
		until = "the end of the redrive (still publishing)"
	}
	return fmt.Sprintf("at %s messages/s, offsets %d until %s", strconv.FormatFloat(r.Rate, 'f', -1, 64), r.From, until)
}

// rateFlag adds --rate to r's flags; given reports, after parse, whether
// it was on the command line and the value.
func rateFlag(r *remote, what string) func() *float64 {
	var rate finiteFloat
	r.fs.Var(&rate, "rate", what+" at most this many messages per second (> 0; left out: no replay rate)")
	return func() *float64 {
		var given *float64
		r.fs.Visit(func(fl *flag.Flag) {
			if fl.Name == "rate" {
				given = (*float64)(&rate)
			}
		})
		return given
	}
}

// dispatcherBlock shows one dispatcher as "key: value" lines (secrets and
// header values as the broker shows them: redacted).
func dispatcherBlock(d admin.Listed) string {
	deadLetter := "off (log and skip)"
	if d.DeadLetter == nil || *d.DeadLetter != "" {
		deadLetter = orDash(deref(d.DeadLetter))
	}
	abnormal := "retry for ever"
	if d.MaxAbnormalAttempts > 0 || d.MaxAbnormalDuration > 0 {
		abnormal = fmt.Sprintf("dead-letter after %d attempts or %s (0: no limit)", d.MaxAbnormalAttempts, time.Duration(d.MaxAbnormalDuration))
	}
	headers := make([]string, 0, len(d.Headers))
	for _, name := range slices.Sorted(maps.Keys(d.Headers)) {
		headers = append(headers, name+": "+d.Headers[name])
	}
	return block([][2]string{
		{"name", d.Name}, {"source", d.Source}, {"paused", yesNo(d.Paused)}, {"host", d.Host},
		{"patterns", strings.Join(d.Patterns, ", ")}, {"path", orDash(d.Path)},
		{"timeout", time.Duration(d.Timeout).String()}, {"commit", commitText(d.Commit)}, {"start", orDash(d.Start)},
		{"dead-letter", deadLetter}, {"expired", expiredText(d.Expired)}, {"ack-mode", orDash(string(d.AckMode))}, {"abnormal-limit", abnormal},
		{"backoff-jitter", yesNo(d.BackoffJitter)}, {"signing-secrets", orDash(strings.Join(d.SigningSecrets, ", "))},
		{"signing-keys", orDash(strings.Join(d.SigningKeys, ", "))},
		{"headers", orDash(strings.Join(headers, ", "))}, {"cloudevents", yesNo(d.CloudEvents)},
		{"max-in-flight", num(d.MaxInFlight)}, {"ordering", orderingText(d.Settings)}, {"batch", batchText(d.Batch)},
		{"rate-limit", rateText(d.Settings)},
		{"breaker", breakerText(d.Settings)},
		{"pause-after", pauseAfterText(d.Settings)},
		{"adaptive-concurrency", concurrencyText(d.Settings)},
	})
}

// expiredText describes an expired setting: what is done with a message
// whose ttl ran out before its push.
func expiredText(a dispatcher.ExpiredAction) string {
	if a == dispatcher.ExpiredDeadLetter {
		return "dead-letter (expired messages go to the dead-letter topic)"
	}
	return "skip (expired messages are counted and not pushed)"
}

// concurrencyText describes an adaptive-concurrency setting.
func concurrencyText(s dispatcher.Settings) string {
	if s.AdaptiveConcurrency != dispatcher.AdaptiveAIMD {
		return "off"
	}
	return fmt.Sprintf("aimd: 1..%d pushes outstanding over its topics on this node", s.MaxInFlight)
}

// concurrencyBlock is the adaptive concurrency limit on the broker; ""
// when it is off.
func concurrencyBlock(c *admin.ConcurrencyStatus) string {
	if c == nil {
		return ""
	}
	return fmt.Sprintf("\nconcurrency: limit %d of %d, %d in flight, lowered %d times, raised %d times, round trip %s\n",
		c.Limit, c.Max, c.InFlight, c.Decreases, c.Increases, time.Duration(c.RTTSeconds*float64(time.Second)).Round(time.Microsecond))
}

// rateText describes a rate limit setting in a few words.
func rateText(s dispatcher.Settings) string {
	if s.RateLimit <= 0 {
		return "off"
	}
	burst := num(max(1, int(math.Ceil(s.RateLimit)))) + " (default)"
	if s.RateBurst > 0 {
		burst = num(s.RateBurst)
	}
	return fmt.Sprintf("%s messages/s over its topics on this node, burst %s", strconv.FormatFloat(s.RateLimit, 'f', -1, 64), burst)
}

// rateBlock is the rate limit's state on the broker: the topics waiting
// for tokens; "" when the limit is off.
func rateBlock(rl *admin.RateLimitStatus) string {
	if rl == nil {
		return ""
	}
	return fmt.Sprintf("\nrate limit: %s messages/s, burst %d: %d topics waiting for tokens\n",
		strconv.FormatFloat(rl.Limit, 'f', -1, 64), rl.Burst, rl.Waiting)
}

// pauseAfterText describes a pause-after setting.
func pauseAfterText(s dispatcher.Settings) string {
	if s.PauseAfter <= 0 {
		return "off"
	}
	return time.Duration(s.PauseAfter).String() + " of failures without a success"
}

// pauseBlock says who paused the dispatcher and when; "" when it is not
// paused.
func pauseBlock(st admin.Status) string {
	if !st.Paused || st.PauseReason == "" {
		return ""
	}
	out := "paused by: " + string(st.PauseReason)
	if st.PauseReason == dispatcher.PauseAuto {
		out += " (pause-after: its endpoint kept failing; resume it to deliver again)"
	}
	if st.PausedAt != nil {
		out += ", at " + st.PausedAt.UTC().Format(time.RFC3339Nano)
	}
	return out + "\n"
}

// breakerText describes a circuit breaker setting in a few words.
func breakerText(s dispatcher.Settings) string {
	if s.BreakerFailures <= 0 {
		return "off"
	}
	c := "backoff-initial"
	if s.BreakerCooloff > 0 {
		c = time.Duration(s.BreakerCooloff).String()
	}
	return fmt.Sprintf("opens after %d consecutive abnormal answers, cool-off %s doubling to backoff-max", s.BreakerFailures, c)
}

// breakerBlock is the circuit breaker's state on the broker; "" when it
// is off.
func breakerBlock(b *admin.BreakerStatus) string {
	if b == nil {
		return ""
	}
	out := fmt.Sprintf("\nbreaker: %s, %d consecutive failures, cool-off %s, opened %d times, %d probes", b.State, b.Failures,
		time.Duration(b.CooloffSeconds*float64(time.Second)).Round(time.Millisecond), b.Opened, b.Probes)
	if b.NextProbe != nil {
		out += ", next probe " + b.NextProbe.UTC().Format(time.RFC3339Nano)
	}
	return out + "\n"
}

// batchText describes a batch setting in a few words.
func batchText(b dispatcher.BatchSettings) string {
	if b.MaxMessages == 0 {
		return "off"
	}
	return fmt.Sprintf("up to %d messages or %d bytes, waiting up to %s", b.MaxMessages, b.MaxBytes, time.Duration(b.MaxWait))
}

// deref is *p, or "" for nil.
func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// commitText describes a commit policy in a few words.
func commitText(c dispatcher.CommitSettings) string {
	switch {
	case c.Policy == "":
		return "every-message"
	case c.Policy == "interval":
		return fmt.Sprintf("interval (%s or %d messages)", time.Duration(c.Interval), c.MaxCount)
	}
	return string(c.Policy)
}

func dispatchersCreate(r *remote, args []string) int {
	f := addSpecFlags(r, true)
	if _, code, ok := r.parse(args); !ok {
		return code
	}
	body, code, ok := f.fileBody()
	if !ok {
		return code
	}
	if body == nil {
		var s admin.Spec
		f.apply(&s)
		switch {
		case s.Name == "":
			return r.usageError("--name is required (or --file)")
		case s.Host == "":
			return r.usageError("--host is required (or --file)")
		case len(s.Patterns) == 0:
			return r.usageError("--pattern is required, at least once (or --file)")
		}
		var err error
		if body, err = json.Marshal(s); err != nil {
			return fail(fmt.Errorf("encode the request: %w", err))
		}
	}
	var out admin.Listed
	return r.call(http.MethodPost, "/mmmq/dispatchers", body, &out, func() string { return dispatcherBlock(out) })
}

func dispatchersUpdate(r *remote, args []string) int {
	f := addSpecFlags(r, false)
	pos, code, ok := r.parse(args, "NAME")
	if !ok {
		return code
	}
	body, code, ok := f.fileBody()
	if !ok {
		return code
	}
	if body == nil {
		if len(f.given()) == 0 {
			return r.usageError("nothing to change: give the fields to change as flags, or the whole dispatcher with --file")
		}
		// The current dispatcher, with the fields given changed.
		c := r.client()
		raw, err := c.do(http.MethodGet, dispatcherPath(pos[0]), nil)
		if err != nil {
			return fail(err)
		}
		var cur admin.Status
		if err := c.decode(raw, &cur); err != nil {
			return fail(err)
		}
		f.apply(&cur.Spec)
		if body, err = json.Marshal(cur.Spec); err != nil {
			return fail(fmt.Errorf("encode the request: %w", err))
		}
	}
	var out admin.Listed
	return r.call(http.MethodPut, dispatcherPath(pos[0]), body, &out, func() string { return dispatcherBlock(out) })
}

func dispatchersDelete(r *remote, args []string) int {
	delCheckpoints := r.fs.Bool("delete-checkpoints", false, "delete its checkpoints too (a dispatcher created again under the name replays from the start)")
	pos, code, ok := r.parse(args, "NAME")
	if !ok {
		return code
	}
	path := dispatcherPath(pos[0])
	if *delCheckpoints {
		path += "?delete-checkpoints=true"
	}
	var out struct {
		Name               string `json:"name"`
		CheckpointsDeleted bool   `json:"checkpointsDeleted"`
	}
	return r.call(http.MethodDelete, path, nil, &out, func() string {
		if out.CheckpointsDeleted {
			return fmt.Sprintf("deleted dispatcher %s and its checkpoints\n", out.Name)
		}
		return fmt.Sprintf("deleted dispatcher %s; its checkpoints are kept\n", out.Name)
	})
}

// dispatchersPause is pause (paused true) or resume.
func dispatchersPause(paused bool) func(r *remote, args []string) int {
	action := "resume"
	if paused {
		action = "pause"
	}
	return func(r *remote, args []string) int {
		pos, code, ok := r.parse(args, "NAME")
		if !ok {
			return code
		}
		var out admin.Listed
		return r.call(http.MethodPost, dispatcherPath(pos[0])+"/"+action, nil, &out, func() string { return dispatcherBlock(out) })
	}
}

func dispatchersSeek(r *remote, args []string) int {
	to := r.fs.String("to", "", "earliest, latest, an offset, an RFC 3339 time or ts:<unix ms> (required)")
	topic := r.fs.String("topic", "", "only the topics matching this name or pattern (default: all it delivers)")
	rate := rateFlag(r, "replay the backlog of each moved topic")
	pos, code, ok := r.parse(args, "NAME")
	if !ok {
		return code
	}
	if *to == "" {
		return r.usageError("--to is required")
	}
	target, err := seekTarget(*to)
	if err != nil {
		return r.usageError("%v", err)
	}
	body, err := json.Marshal(struct {
		Topic string   `json:"topic,omitempty"`
		To    any      `json:"to"`
		Rate  *float64 `json:"rate,omitempty"`
	}{*topic, target, rate()})
	if err != nil {
		return fail(fmt.Errorf("encode the request: %w", err))
	}
	var out struct {
		Name   string                  `json:"name"`
		Topics []dispatcher.SeekResult `json:"topics"`
	}
	return r.call(http.MethodPost, dispatcherPath(pos[0])+"/seek", body, &out, func() string {
		rows := make([][]string, 0, len(out.Topics))
		for _, t := range out.Topics {
			replay := "-"
			if t.Replay != nil {
				replay = replayText(t.Replay)
			}
			rows = append(rows, []string{t.Topic, num(t.Previous), num(t.Offset), replay})
		}
		return table([]string{"TOPIC", "PREVIOUS", "OFFSET", "REPLAY"}, rows)
	})
}

func dispatchersRedrive(r *remote, args []string) int {
	// Given or not is what counts (Visit below): no default is shown.
	from := r.fs.Int64("from", 0, "the first offset of the dead-letter topic to redrive (left out: its first)")
	to := r.fs.Int64("to", 0, "one past the last offset to redrive (left out: its high watermark)")
	rate := rateFlag(r, "deliver the redriven backlog of each topic")
	pos, code, ok := r.parse(args, "NAME")
	if !ok {
		return code
	}
	req := admin.RedriveRequest{Rate: rate()}
	var bad []string
	r.fs.Visit(func(fl *flag.Flag) {
		switch {
		case fl.Name == "from" && *from < 0, fl.Name == "to" && *to < 0:
			bad = append(bad, "--"+fl.Name)
		case fl.Name == "from":
			req.From = from
		case fl.Name == "to":
			req.To = to
		}
	})
	if len(bad) > 0 {
		return r.usageError("%s must be an offset >= 0", strings.Join(bad, " and "))
	}
	var body []byte
	if req.From != nil || req.To != nil || req.Rate != nil {
		// Never an empty body for a request that had fields: an empty
		// redrive body means every dead letter.
		var err error
		if body, err = json.Marshal(req); err != nil {
			return fail(fmt.Errorf("encode the request: %w", err))
		}
	}
	var out dispatcher.RedriveResult
	return r.call(http.MethodPost, dispatcherPath(pos[0])+"/redrive", body, &out, func() string { return redriveText(out) })
}

// redriveText summarises a redrive: the range, how many were published
// again and skipped (with why, the first few), and where to go on.
func redriveText(res dispatcher.RedriveResult) string {
	next := num(res.Next)
	if res.Next < res.To {
		next += fmt.Sprintf(" (stopped at the per-call limit: run again with --from %d)", res.Next)
	}
	text := block([][2]string{
		{"dead-letter topic", res.DeadLetterTopic}, {"range", fmt.Sprintf("[%d, %d)", res.From, res.To)},
		{"redriven", num(len(res.Redriven))}, {"skipped", num(len(res.Skipped))}, {"next", next},
	})
	const shown = 10
	for i, sk := range res.Skipped {
		if i == shown {
			text += fmt.Sprintf("  ... and %d more skipped (--json lists them all)\n", len(res.Skipped)-shown)
			break
		}
		text += fmt.Sprintf("  skipped offset %d: %s\n", sk.Offset, sk.Reason)
	}
	for _, rp := range res.Replay {
		text += fmt.Sprintf("replay: %s %s\n", rp.Topic, replayText(&rp.Replay))
	}
	return text
}

// keysBlock lists, for each topic delivered with ordering "key", the
// window's fill and the parked keys (the oldest first, as many as the
// broker lists); "" when no topic has one.
func keysBlock(topics []admin.TopicStatus) string {
	var b strings.Builder
	for _, t := range topics {
		k := t.Keys
		if k == nil {
			continue
		}
		held := ""
		if k.HeldBy != nil {
			held = fmt.Sprintf(", held by key %q", *k.HeldBy)
		}
		fmt.Fprintf(&b, "\n%s: %d keys in flight, %d parked, window %d/%d%s\n", t.Topic, k.InFlight, k.ParkedKeys, k.Unacked, k.MaxUnacked, held)
		if len(k.Parked) == 0 {
			continue
		}
		rows := make([][]string, 0, len(k.Parked))
		for _, p := range k.Parked {
			rows = append(rows, []string{strconv.Quote(p.Key), num(p.Offset), p.Since.Format(time.RFC3339), num(p.Attempts), when(&p.NextRetry), orDash(p.LastError)})
		}
		b.WriteString(table([]string{"PARKED-KEY", "OFFSET", "SINCE", "ATTEMPTS", "NEXT-RETRY", "LAST-ERROR"}, rows))
	}
	return b.String()
}

// orderingText is a dispatcher's ordering, with its max-unacked under key.
func orderingText(s dispatcher.Settings) string {
	if s.Ordering == dispatcher.OrderKey {
		return fmt.Sprintf("key (at most %d messages past the checkpoint)", s.MaxUnacked)
	}
	return orDash(string(s.Ordering))
}
