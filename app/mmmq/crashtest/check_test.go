package crashtest

import (
	"bytes"
	"fmt"
	"sort"
)

// sentMsg is one publish of the harness and what it got back.
type sentMsg struct {
	Round   int
	Topic   string
	ID      string
	Level   string // accepted | written | durable
	Key     string // ordering key given at publish ("" for none)
	Content []byte // compact JSON, as the broker stores it
	Res     pubResult
	// Retrying: sent by a retrying producer (retrier), which publishes a
	// message without an answer again with the same id and content;
	// Attempt numbers the publishes of that id (1: the first).
	Retrying bool
	Attempt  int
}

// wkey is one dispatch worker: (dispatcher, topic).
type wkey struct{ D, T string }

func (k wkey) String() string { return k.D + "/" + k.T }

// tally are the counters of the summary line.
type tally struct {
	AckedDurable, AckedWritten, AckedAccepted int
	LostDurable, LostWritten, LostAccepted    int
	Delivered, Duplicates                     int
}

// checkPrefix: everything visible in prev (an earlier read-back) is still
// at the same offset, byte-identical, in cur: a visible offset never
// changes owner, even across kill -9 (an invariant of the log-queue study).
func checkPrefix(prev, cur map[string][]stored) []string {
	var bad []string
	for t, p := range prev {
		c := cur[t]
		if len(c) < len(p) {
			bad = append(bad, fmt.Sprintf("topic %s: high watermark went back from %d to %d", t, len(p), len(c)))
		}
		for i := 0; i < len(p) && i < len(c); i++ {
			if !bytes.Equal(p[i].Raw, c[i].Raw) {
				bad = append(bad, fmt.Sprintf("topic %s offset %d changed: was %s, now %s", t, i, p[i].Raw, c[i].Raw))
				break
			}
		}
	}
	return bad
}

// checkAcked: every DURABLE and WRITTEN acknowledgement is at its offset with
// its id and content, byte for byte. A process crash keeps the page cache,
// so WRITTEN must survive kill -9 as well (the log-queue study: after a
// process kill a WRITTEN entry is "usually still there"); only a power loss
// may take WRITTEN away. ACCEPTED has no offset: it is counted lost when its
// id is nowhere in the log (allowed: ACCEPTED promises neither an offset nor
// survival).
func checkAcked(sent []sentMsg, cur map[string][]stored, tl *tally) []string {
	var bad []string
	ids := map[string]bool{}
	for _, l := range cur {
		for _, s := range l {
			ids[s.ID] = true
		}
	}
	for _, m := range sent {
		if !m.Res.Ack {
			continue
		}
		switch m.Level {
		case "accepted":
			tl.AckedAccepted++
			if !ids[m.ID] {
				tl.LostAccepted++
			}
			continue
		case "written":
			tl.AckedWritten++
		case "durable":
			tl.AckedDurable++
		}
		l := cur[m.Topic]
		var problem string
		switch {
		case m.Res.Offset < 0:
			problem = "acknowledged without an offset"
		case m.Res.Offset >= int64(len(l)):
			problem = fmt.Sprintf("offset %d beyond the high watermark %d", m.Res.Offset, len(l))
		case l[m.Res.Offset].ID != m.ID:
			problem = fmt.Sprintf("offset %d holds id %q", m.Res.Offset, l[m.Res.Offset].ID)
		case !bytes.Equal(l[m.Res.Offset].Content, m.Content):
			problem = fmt.Sprintf("offset %d content %s, sent %s", m.Res.Offset, l[m.Res.Offset].Content, m.Content)
		}
		if problem == "" {
			continue
		}
		if m.Level == "durable" {
			tl.LostDurable++
		} else {
			tl.LostWritten++
		}
		bad = append(bad, fmt.Sprintf("%s-acknowledged %s (topic %s, round %d) lost: %s", m.Level, m.ID, m.Topic, m.Round, problem))
	}
	return bad
}

// checkLogIDs: every message in the log is one the harness sent, with the
// content sent, and appears once (the plain producers never retry, and the
// retrying ones publish again with the same id, which the broker's
// idempotent-publish window must recognise: a second copy is a failure).
func checkLogIDs(sent []sentMsg, cur map[string][]stored) []string {
	var bad []string
	byID := make(map[string]*sentMsg, len(sent))
	for i := range sent {
		byID[sent[i].ID] = &sent[i]
	}
	where := map[string]string{}
	for t, l := range cur {
		for off, s := range l {
			at := fmt.Sprintf("%s@%d", t, off)
			if w, dup := where[s.ID]; dup {
				bad = append(bad, fmt.Sprintf("id %s stored twice: %s and %s", s.ID, w, at))
			}
			where[s.ID] = at
			m := byID[s.ID]
			switch {
			case m == nil:
				bad = append(bad, fmt.Sprintf("%s holds id %q that was never sent", at, s.ID))
			case m.Topic != t || !bytes.Equal(m.Content, s.Content):
				bad = append(bad, fmt.Sprintf("%s holds id %s with other content/topic than sent", at, s.ID))
			}
		}
	}
	return bad
}

// checkDeliveries checks what the consumer received against the log and the
// checkpoints read from disk between runs:
//
//   - every delivery is in the log at its offset, same id, byte-identical
//     body: nothing beyond the high watermark was ever pushed;
//   - per worker, within a run offsets go up by one (a resend repeats one);
//   - a run starts exactly at the checkpoint on disk before it (cpStart), and
//     never past the highest offset seen + 1 (no gap);
//   - a run killed with every-message commits leaves the checkpoint at the
//     last offset seen or one past it (cpEnd): at most that one offset, whose
//     ACK was not committed, is delivered again. With the interval policy
//     (interval[k]) the checkpoint may lag: cpStart <= cpEnd <= last + 1.
//
// cpStart[r] / cpEnd[r] map a worker to its checkpoint before run r started
// and after run r was killed (absent worker: 0 / not checked). Duplicates are
// deliveries of an offset already seen.
func checkDeliveries(dels []delivery, cur map[string][]stored, cpStart, cpEnd map[int]map[wkey]int64, interval map[wkey]bool, tl *tally) []string {
	var bad []string
	byKey := map[wkey][]delivery{}
	for _, d := range dels {
		tl.Delivered++
		if v := notInLog(d, cur); v != "" {
			bad = append(bad, v)
		}
		k := wkey{d.Dispatcher, d.Topic}
		byKey[k] = append(byKey[k], d)
	}
	keys := make([]wkey, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	for _, m := range cpEnd {
		for k := range m {
			if _, ok := byKey[k]; !ok {
				byKey[k] = nil
				keys = append(keys, k)
			}
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	rounds := map[int]bool{}
	for r := range cpStart {
		rounds[r] = true
	}
	for r := range cpEnd {
		rounds[r] = true
	}
	for _, d := range dels {
		rounds[d.Round] = true
	}
	order := make([]int, 0, len(rounds))
	for r := range rounds {
		order = append(order, r)
	}
	sort.Ints(order)
	for _, k := range keys {
		ds := byKey[k]
		sort.SliceStable(ds, func(i, j int) bool { return ds[i].Round < ds[j].Round })
		maxSeen := int64(-1)
		i := 0
		for _, r := range order {
			start := cpStart[r][k]
			j := i
			for j < len(ds) && ds[j].Round == r {
				j++
			}
			run := ds[i:j]
			i = j
			if len(run) > 0 {
				if first := run[0].Offset; first != start {
					bad = append(bad, fmt.Sprintf("%s run %d resumed at offset %d, but the checkpoint on disk was %d", k, r, first, start))
				}
				if run[0].Offset > maxSeen+1 {
					bad = append(bad, fmt.Sprintf("%s run %d: gap, offsets %d..%d never delivered", k, r, maxSeen+1, run[0].Offset-1))
				}
			}
			for n, d := range run {
				if n > 0 && d.Offset != run[n-1].Offset+1 && d.Offset != run[n-1].Offset {
					bad = append(bad, fmt.Sprintf("%s run %d: offset %d after %d (out of order or gap)", k, r, d.Offset, run[n-1].Offset))
				}
				if d.Offset <= maxSeen {
					tl.Duplicates++
					if d.Offset < start {
						bad = append(bad, fmt.Sprintf("%s run %d: offset %d sent again below the checkpoint %d", k, r, d.Offset, start))
					}
				} else {
					maxSeen = d.Offset
				}
			}
			end, ok := cpEnd[r][k]
			if !ok {
				continue
			}
			if len(run) == 0 {
				if end != start {
					bad = append(bad, fmt.Sprintf("%s run %d: checkpoint moved from %d to %d without a delivery", k, r, start, end))
				}
				continue
			}
			last := run[len(run)-1].Offset
			if interval[k] {
				if end < start || end > last+1 {
					bad = append(bad, fmt.Sprintf("%s run %d: killed with checkpoint %d after delivering %d..%d (want %d..%d)", k, r, end, run[0].Offset, last, start, last+1))
				}
				continue
			}
			if end != last && end != last+1 {
				bad = append(bad, fmt.Sprintf("%s run %d: killed with checkpoint %d after delivering offset %d (want %d or %d)", k, r, end, last, last, last+1))
			}
		}
	}
	return bad
}

// notInLog describes how delivery d differs from the log cur: beyond the
// high watermark, or another id or other bytes at its offset ("" when it
// is the message there, byte for byte).
func notInLog(d delivery, cur map[string][]stored) string {
	l := cur[d.Topic]
	switch {
	case d.Offset < 0 || d.Offset >= int64(len(l)):
		return fmt.Sprintf("delivered %s/%s@%d (id %s, run %d) is beyond the high watermark %d",
			d.Dispatcher, d.Topic, d.Offset, d.ID, d.Round, len(l))
	case l[d.Offset].ID != d.ID || !bytes.Equal(l[d.Offset].Raw, d.Body):
		return fmt.Sprintf("delivered %s/%s@%d id %s (run %d) but the log holds id %s there",
			d.Dispatcher, d.Topic, d.Offset, d.ID, d.Round, l[d.Offset].ID)
	}
	return ""
}

// checkComplete: after the final drain every offset of every worker's topic
// was delivered and ACKed at least once.
func checkComplete(dels []delivery, cur map[string][]stored, keys []wkey) []string {
	var bad []string
	seen := map[wkey]map[int64]bool{}
	for _, d := range dels {
		if !d.Acked {
			continue
		}
		k := wkey{d.Dispatcher, d.Topic}
		if seen[k] == nil {
			seen[k] = map[int64]bool{}
		}
		seen[k][d.Offset] = true
	}
	for _, k := range keys {
		missing := 0
		first := int64(-1)
		for off := range int64(len(cur[k.T])) {
			if !seen[k][off] {
				if first < 0 {
					first = off
				}
				missing++
			}
		}
		if missing > 0 {
			bad = append(bad, fmt.Sprintf("%s: %d of %d offsets never delivered and ACKed (first %d)", k, missing, len(cur[k.T]), first))
		}
	}
	return bad
}

// retryTally counts the retrying producers' messages and publishes.
type retryTally struct {
	Messages       int // distinct ids
	Acked          int // ids acknowledged (by the first publish or a retry)
	Retried        int // ids published more than once
	Retries        int // publishes after the first
	RetryDuplicate int // retries answered "duplicate": true (the first was stored)
	RetryStored    int // retries answered as new messages (the first was lost)
	RetryNoReply   int // retries again without a reply (or a 503), retried later
	StoredTwice    int // copies of a retrying producer's id in the log beyond the first
}

func (rt retryTally) String() string {
	return fmt.Sprintf("messages=%d acked=%d retried_messages=%d retries=%d retries_duplicate=%d retries_stored=%d retries_no_reply=%d ids_stored_twice=%d",
		rt.Messages, rt.Acked, rt.Retried, rt.Retries, rt.RetryDuplicate, rt.RetryStored, rt.RetryNoReply, rt.StoredTwice)
}

// checkRetries checks the retrying producers' messages against the log:
// no id of theirs is stored twice (the retry of a message whose first
// publish was stored without an answer must be recognised as its
// duplicate), and an ACK with "duplicate": true names the offset where
// that id is stored. With final, every one of their messages must have
// been acknowledged and be in the log: each id exactly once. (That every
// ACK's offset holds the message sent is checkAcked's part.)
func checkRetries(sent []sentMsg, cur map[string][]stored, final bool, rt *retryTally) []string {
	type loc struct {
		topic string
		off   int64
	}
	where := map[string][]loc{}
	for tp, l := range cur {
		for off, s := range l {
			where[s.ID] = append(where[s.ID], loc{tp, int64(off)})
		}
	}
	var (
		bad     []string
		order   []string
		acked   = map[string]bool{}
		retried = map[string]bool{}
	)
	for _, m := range sent {
		if !m.Retrying {
			continue
		}
		if m.Attempt == 1 {
			order = append(order, m.ID)
		} else {
			rt.Retries++
			retried[m.ID] = true
			switch {
			case m.Res.Ack && m.Res.Duplicate:
				rt.RetryDuplicate++
			case m.Res.Ack:
				rt.RetryStored++
			default:
				rt.RetryNoReply++
			}
		}
		if !m.Res.Ack {
			continue
		}
		acked[m.ID] = true
		if !m.Res.Duplicate {
			continue
		}
		at := where[m.ID]
		if len(at) == 0 || at[0].topic != m.Topic || at[0].off != m.Res.Offset {
			bad = append(bad, fmt.Sprintf("publish %d of %s (round %d) answered duplicate at %s@%d, but the id is stored at %v",
				m.Attempt, m.ID, m.Round, m.Topic, m.Res.Offset, at))
		}
	}
	rt.Messages, rt.Acked, rt.Retried = len(order), len(acked), len(retried)
	for _, id := range order {
		at := where[id]
		if len(at) > 1 {
			rt.StoredTwice += len(at) - 1
			bad = append(bad, fmt.Sprintf("retried id %s stored %d times: %v", id, len(at), at))
		}
		if final && !acked[id] {
			bad = append(bad, fmt.Sprintf("retried id %s never acknowledged", id))
		}
		if final && len(at) == 0 {
			bad = append(bad, fmt.Sprintf("retried id %s not in the log", id))
		}
	}
	return bad
}

// checkWindowDeliveries checks the deliveries of the dispatchers named in
// window (max-in-flight above 1, or batches), whose pushes may overlap and
// be answered in any order, against the log and the checkpoints read from
// disk between runs (cpStart, cpEnd as in checkDeliveries):
//
//   - every delivery is in the log at its offset, byte-identical;
//   - a run sends nothing below the checkpoint it started from;
//   - a run starts from, and is killed (or stopped) with, a checkpoint of
//     at most P, the first offset the consumer had not ACKed in any run so
//     far (P - 1 ends the contiguous ACKed prefix): the checkpoint never
//     passes a message that was not ACKed when the broker died;
//   - the checkpoint never moves back within a run;
//   - for the dispatchers in ordered (max-in-flight 1: one push at a time,
//     a batch's messages in offset order) a run sends the offsets from
//     its checkpoint in order: each one is the next after the highest
//     sent so far, or a resend of one sent already.
//
// Only ACKed deliveries count for P (a NACK does not finish a message).
// The consumer records its ACK before answering, so what it ACKed is all
// the broker can have seen ACKed.
func checkWindowDeliveries(dels []delivery, cur map[string][]stored, cpStart, cpEnd map[int]map[wkey]int64, window, ordered map[string]bool, tl *tally) []string {
	var bad []string
	byKey := map[wkey][]delivery{}
	rounds := map[int]bool{}
	for _, d := range dels {
		if !window[d.Dispatcher] {
			continue
		}
		tl.Delivered++
		if v := notInLog(d, cur); v != "" {
			bad = append(bad, v)
		}
		k := wkey{d.Dispatcher, d.Topic}
		byKey[k] = append(byKey[k], d)
		rounds[d.Round] = true
	}
	for _, cps := range []map[int]map[wkey]int64{cpStart, cpEnd} {
		for r, m := range cps {
			rounds[r] = true
			for k := range m {
				if _, ok := byKey[k]; !ok && window[k.D] {
					byKey[k] = nil
				}
			}
		}
	}
	keys := make([]wkey, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	order := make([]int, 0, len(rounds))
	for r := range rounds {
		order = append(order, r)
	}
	sort.Ints(order)
	for _, k := range keys {
		ds := byKey[k]
		sort.SliceStable(ds, func(i, j int) bool { return ds[i].Round < ds[j].Round })
		acked := map[int64]bool{}
		seen := map[int64]bool{}
		prefix := int64(0) // the first offset not ACKed so far
		i := 0
		for _, r := range order {
			start := cpStart[r][k]
			if start > prefix {
				bad = append(bad, fmt.Sprintf("%s run %d started from checkpoint %d, past offset %d, which was never ACKed", k, r, start, prefix))
			}
			j := i
			for j < len(ds) && ds[j].Round == r {
				j++
			}
			run := ds[i:j]
			i = j
			top := start - 1 // the highest offset sent in this run
			for _, d := range run {
				if d.Offset < start {
					bad = append(bad, fmt.Sprintf("%s run %d: offset %d sent below the checkpoint %d", k, r, d.Offset, start))
				}
				if ordered[k.D] && d.Offset > top+1 {
					bad = append(bad, fmt.Sprintf("%s run %d: offset %d sent before %d (one push at a time goes in offset order)", k, r, d.Offset, top+1))
				}
				top = max(top, d.Offset)
				if seen[d.Offset] {
					tl.Duplicates++
				}
				seen[d.Offset] = true
				if d.Acked {
					acked[d.Offset] = true
				}
			}
			for acked[prefix] {
				prefix++
			}
			end, ok := cpEnd[r][k]
			if !ok {
				continue
			}
			if end < start {
				bad = append(bad, fmt.Sprintf("%s run %d: checkpoint went back from %d to %d", k, r, start, end))
			}
			if end > prefix {
				bad = append(bad, fmt.Sprintf("%s run %d: killed with checkpoint %d, past offset %d, which the consumer had not ACKed (ACKed prefix ends at %d)", k, r, end, prefix, prefix-1))
			}
		}
	}
	return bad
}

// checkDeadLetters checks the dead-letter topic dlTopic, read back as dl,
// of dispatcher disp for the message orig, which disp's consumer NACKed on
// every attempt at offset off of topic: it is there at least once, and
// every copy has orig's content, a fresh id (neither orig's nor another
// copy's) and the headers mmmq-dl-topic, mmmq-dl-offset, mmmq-dl-attempts
// (attempts), mmmq-dl-reason "nack-exhausted", mmmq-dl-original-id and
// mmmq-dl-dispatcher. dl holds nothing else.
func checkDeadLetters(dl []stored, dlTopic, disp, topic string, off int64, orig stored, attempts int) []string {
	var bad []string
	if len(dl) == 0 {
		return []string{fmt.Sprintf("%s@%d (id %s) was NACKed %d times and is not in %s", topic, off, orig.ID, attempts, dlTopic)}
	}
	want := map[string]string{
		"mmmq-dl-topic":       topic,
		"mmmq-dl-offset":      fmt.Sprint(off),
		"mmmq-dl-attempts":    fmt.Sprint(attempts),
		"mmmq-dl-reason":      "nack-exhausted",
		"mmmq-dl-original-id": orig.ID,
		"mmmq-dl-dispatcher":  disp,
	}
	names := make([]string, 0, len(want))
	for h := range want {
		names = append(names, h)
	}
	sort.Strings(names)
	ids := map[string]int{}
	for i, s := range dl {
		at := fmt.Sprintf("%s@%d", dlTopic, i)
		if s.Topic != dlTopic {
			bad = append(bad, fmt.Sprintf("%s: stored topic %q", at, s.Topic))
		}
		for _, h := range names {
			if got, ok := s.Headers[h]; !ok || got != want[h] {
				bad = append(bad, fmt.Sprintf("%s: header %s = %q (present %t), want %q", at, h, got, ok, want[h]))
			}
		}
		if !bytes.Equal(s.Content, orig.Content) {
			bad = append(bad, fmt.Sprintf("%s: content %s, the original's is %s", at, s.Content, orig.Content))
		}
		switch {
		case s.ID == "" || s.ID == orig.ID:
			bad = append(bad, fmt.Sprintf("%s: id %q is not a fresh id (the original's is %q)", at, s.ID, orig.ID))
		case ids[s.ID] > 0:
			bad = append(bad, fmt.Sprintf("%s: id %q already used by %s@%d", at, s.ID, dlTopic, ids[s.ID]-1))
		}
		ids[s.ID] = i + 1
	}
	return bad
}
