package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
)

// How each broker learns of the topics the others create and delete
// (contract.TopicWatcher): JetStream's stream-created and stream-deleted
// advisories, at once, and a full listing every topicRelist in case an
// advisory was missed: a stream this broker knew of that the listing no
// longer holds, and that a direct lookup does not find, was deleted.
// Advisories are missed across a reconnect, and the nats-server (2.15)
// can drop a stream-deleted advisory outright: the stream queues it on its
// own outbound queue and then closes the loop that sends that queue, whose
// select may take the quit first. A deletion through another broker is
// then seen at the next listing. A stream whose MetaIncarnation differs from the one of the log
// this broker opened (Backend.Open records it) was deleted and created
// again in between: reported deleted, then created.

// topicRelist is how often WatchTopics lists every stream again (a
// variable for tests).
var topicRelist = 30 * time.Second

// The subjects of JetStream's stream advisories (the nats-server's
// JSAdvisoryStreamCreatedPre and JSAdvisoryStreamDeletedPre): the stream
// name is the last token and the "stream" member of the JSON body
// (JSStreamActionAdvisory).
const (
	advisoryStreamCreated = "$JS.EVENT.ADVISORY.STREAM.CREATED.>"
	advisoryStreamDeleted = "$JS.EVENT.ADVISORY.STREAM.DELETED.>"
)

// openedStream is what Backend.Open last opened as a stream: its topic,
// incarnation and log (nil in tests that note an open by hand).
type openedStream struct {
	topic, incarnation string
	log                *Log
}

// noteOpen records that topic's stream sname, of incarnation inc, is open
// here as l (Open), for the topic watch to compare with what it sees and
// to raise l's high watermark to what its listings show.
func (b *Backend) noteOpen(sname, topic, inc string, l *Log) {
	b.openedMu.Lock()
	defer b.openedMu.Unlock()
	if b.opened == nil {
		b.opened = map[string]openedStream{}
	}
	b.opened[sname] = openedStream{topic, inc, l}
}

// forgetOpen drops the record of noteOpen (the stream is deleted).
func (b *Backend) forgetOpen(sname string) {
	b.openedMu.Lock()
	delete(b.opened, sname)
	b.openedMu.Unlock()
}

func (b *Backend) openedAs(sname string) (openedStream, bool) {
	b.openedMu.Lock()
	defer b.openedMu.Unlock()
	o, ok := b.opened[sname]
	return o, ok
}

// streamAdvisory is one stream advisory: the stream and whether it was
// deleted (else created).
type streamAdvisory struct {
	stream  string
	deleted bool
}

// WatchTopics calls fn, on one goroutine of its own, with every topic of
// the cluster (a full listing at start and every topicRelist), every topic
// created later by any broker (stream-created advisories) and every topic
// deleted later by any broker (stream-deleted advisories, or a listing
// without it confirmed by a lookup), until stop (contract.TopicWatcher).
// Events carry the stream's MetaIncarnation when known. Errors: the
// advisory subscriptions'.
func (b *Backend) WatchTopics(fn func(contract.TopicEvent)) (stop func(), err error) {
	advs := make(chan streamAdvisory, 256)
	subscribe := func(subj string, deleted bool) (*nats.Subscription, error) {
		return b.nc.Subscribe(subj, func(m *nats.Msg) {
			var a struct {
				Stream string `json:"stream"`
			}
			if json.Unmarshal(m.Data, &a) == nil && strings.HasPrefix(a.Stream, b.cfg.StreamPrefix+"_") {
				select {
				case advs <- streamAdvisory{a.Stream, deleted}:
				default: // full: the next listing finds it
				}
			}
		})
	}
	created, err := subscribe(advisoryStreamCreated, false)
	if err != nil {
		return nil, fmt.Errorf("jetstream: subscribe to stream advisories: %w", err)
	}
	deleted, err := subscribe(advisoryStreamDeleted, true)
	if err != nil {
		_ = created.Unsubscribe()
		return nil, fmt.Errorf("jetstream: subscribe to stream advisories: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	w := &topicWatch{b: b, fn: fn, reported: map[string]string{}}
	go func() {
		defer close(done)
		w.loop(ctx, advs)
	}()
	return func() {
		_ = created.Unsubscribe()
		_ = deleted.Unsubscribe()
		cancel()
		<-done
	}, nil
}

// topicWatch is the state of one WatchTopics, used by its goroutine only.
type topicWatch struct {
	b  *Backend
	fn func(contract.TopicEvent)
	// reported holds, by stream name, the topic of every stream reported
	// existing and not since deleted: what a later listing must still hold,
	// and how a deleted hashed stream name maps back to its topic.
	reported map[string]string
}

func (w *topicWatch) loop(ctx context.Context, advs <-chan streamAdvisory) {
	relist := time.NewTicker(topicRelist)
	defer relist.Stop()
	w.list(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case a := <-advs:
			if a.deleted {
				w.streamDeleted(ctx, a.stream)
			} else {
				w.streamCreated(ctx, a.stream)
			}
		case <-relist.C:
			w.list(ctx)
		}
	}
}

// list reports every listed topic existing and, when the listing is
// complete, every stream reported or opened before that it no longer holds
// and that a lookup does not find, deleted.
func (w *topicWatch) list(ctx context.Context) {
	streams, _, err := w.b.listStreams()
	if err != nil {
		w.b.opts.Logger.Warn("list topics for the topic watch", zap.Error(err))
		return
	}
	listed := make(map[string]bool, len(streams))
	for _, s := range streams {
		if ctx.Err() != nil {
			return
		}
		listed[s.stream] = true
		w.exists(ctx, s)
		if o, ok := w.b.openedAs(s.stream); ok && o.log != nil && s.incarnation == o.incarnation {
			o.log.listed(s.last)
		}
	}
	gone := map[string]string{}
	for s, t := range w.reported {
		if !listed[s] {
			gone[s] = t
		}
	}
	w.b.openedMu.Lock()
	for s, o := range w.b.opened {
		if !listed[s] {
			gone[s] = o.topic
		}
	}
	w.b.openedMu.Unlock()
	for s, t := range gone {
		if ctx.Err() != nil {
			return
		}
		if _, err := w.b.lookupStream(ctx, s); errors.Is(err, jetstream.ErrStreamNotFound) {
			w.deleted(s, t)
		}
	}
}

// streamCreated reports the topic of stream s, created by some broker.
func (w *topicWatch) streamCreated(ctx context.Context, s string) {
	info, err := w.lookupCreated(ctx, s)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return // deleted again: its deleted advisory follows
	case err == nil:
		if t, ok := w.b.topicOfConfig(info.Config); ok {
			w.exists(ctx, listedStream{stream: s, topic: t, incarnation: info.Config.Metadata[MetaIncarnation]})
		}
	default:
		if t, _, ok := DecodeStreamName(w.b.cfg.StreamPrefix, s); ok {
			w.exists(ctx, listedStream{stream: s, topic: t})
		}
	}
}

// lookupCreated looks up stream s of a created advisory. The server sends
// that advisory before it registers the stream with the account, so a
// lookup right after it may not find the stream yet: ErrStreamNotFound is
// retried, 5 times over about 600ms.
func (w *topicWatch) lookupCreated(ctx context.Context, s string) (*jetstream.StreamInfo, error) {
	delay := 20 * time.Millisecond
	for i := 0; ; i++ {
		info, err := w.b.lookupStream(ctx, s)
		if !errors.Is(err, jetstream.ErrStreamNotFound) || i == 5 {
			return info, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(delay):
		}
		delay *= 2
	}
}

// streamDeleted reports the topic of stream s deleted, unless the stream
// exists again and is not another incarnation than the one open here (the
// advisory is of an older one, deleted and created again since, maybe
// through this broker). A hashed stream name maps back to its topic only
// when this broker reported or opened it.
func (w *topicWatch) streamDeleted(ctx context.Context, s string) {
	t, ok := w.reported[s]
	o, opened := w.b.openedAs(s)
	switch {
	case ok:
	case opened:
		t = o.topic
	default:
		if t, _, ok = DecodeStreamName(w.b.cfg.StreamPrefix, s); !ok {
			return
		}
	}
	if info, err := w.b.lookupStream(ctx, s); err == nil {
		if cur := info.Config.Metadata[MetaIncarnation]; !opened || o.incarnation == cur {
			return
		}
	}
	w.deleted(s, t)
}

// exists reports s's topic existing; first deleted when the log open here
// is of another incarnation than s's, and a lookup confirms the stream's
// incarnation is s's (a listing may be older than this broker's open).
func (w *topicWatch) exists(ctx context.Context, s listedStream) {
	if o, ok := w.b.openedAs(s.stream); ok && s.incarnation != "" && o.incarnation != "" && o.incarnation != s.incarnation {
		info, err := w.b.lookupStream(ctx, s.stream)
		if err == nil && info.Config.Metadata[MetaIncarnation] == s.incarnation {
			w.deleted(s.stream, o.topic)
		}
	}
	w.reported[s.stream] = s.topic
	w.fn(contract.TopicEvent{Name: s.topic, Incarnation: s.incarnation})
}

// deleted reports topic t of stream s deleted, with the incarnation open
// here if any (the registry ignores the deletion of another one).
func (w *topicWatch) deleted(s, t string) {
	o, _ := w.b.openedAs(s)
	delete(w.reported, s)
	w.b.forgetOpen(s)
	w.fn(contract.TopicEvent{Name: t, Deleted: true, Incarnation: o.incarnation})
}

// lookupStream reads stream s's info. Errors: one wrapping
// jetstream.ErrStreamNotFound when there is no such stream, else the
// cluster's.
func (b *Backend) lookupStream(ctx context.Context, s string) (*jetstream.StreamInfo, error) {
	ictx, cancel := context.WithTimeout(ctx, b.cfg.RequestTimeout)
	defer cancel()
	str, err := b.js.Stream(ictx, s)
	if err != nil {
		return nil, err
	}
	return str.CachedInfo(), nil
}

// listedStream is one topic stream: its name, topic, MetaIncarnation (""
// when unknown) and, from a listing, its last sequence (0 otherwise).
type listedStream struct {
	stream, topic, incarnation string
	last                       int64
}

// topicOfConfig is the topic of the stream configured as c: its MetaTopic
// metadata when that names the stream, else the decoded stream name
// (DecodeStreamName); false with neither.
func (b *Backend) topicOfConfig(c jetstream.StreamConfig) (string, bool) {
	if t := c.Metadata[MetaTopic]; t != "" && contract.ValidateTopic(t) == nil && StreamName(b.cfg.StreamPrefix, t) == c.Name {
		return t, true
	}
	t, _, ok := DecodeStreamName(b.cfg.StreamPrefix, c.Name)
	return t, ok
}

// listStreams lists the streams whose subjects are under "<prefix>.t.",
// with their topic (topicOfConfig); skipped are those under the prefix
// without one. Errors: the listing's, when it did not complete.
func (b *Backend) listStreams() (streams []listedStream, skipped []string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*b.cfg.RequestTimeout)
	defer cancel()
	l := b.js.ListStreams(ctx, jetstream.WithStreamListSubject(b.cfg.StreamPrefix+".t.>"))
	for info := range l.Info() {
		name := info.Config.Name
		if t, ok := b.topicOfConfig(info.Config); ok {
			streams = append(streams, listedStream{name, t, info.Config.Metadata[MetaIncarnation], int64(info.State.LastSeq)})
		} else if strings.HasPrefix(name, b.cfg.StreamPrefix+"_") {
			skipped = append(skipped, name)
		}
	}
	if err := l.Err(); err != nil {
		return nil, nil, fmt.Errorf("jetstream: list streams: %w", classify(err))
	}
	return streams, skipped, nil
}
