package jetstream

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// How the client finds out that its server stopped answering: a ping every
// pingInterval, the connection given up after maxPingsOut unanswered (3 to
// 4 s), then a reconnect to another server of mmmq.jetstream.servers. It
// runs in parallel with the cluster electing new stream leaders (several
// seconds), so it stays shorter than an election; a loaded server answers
// a ping within milliseconds, far from 3 s.
const (
	pingInterval = 1 * time.Second
	maxPingsOut  = 3
)

// Backend stores every topic in a JetStream stream of one NATS cluster
// (topicqueue.Backend, Deleter, TopicWatcher: topics created and deleted
// through other brokers, and HealthChecker: /readyz follows the
// connection): several brokers with the same servers and stream prefix
// share the topics, each broker stateless.
// It holds one NATS connection, which reconnects for ever once made.
type Backend struct {
	cfg  Config
	opts Options
	nc   *nats.Conn
	js   jetstream.JetStream
	cps  checkpointStore

	// opened holds, by stream name, what Open last opened, for the topic
	// watch (WatchTopics).
	openedMu sync.Mutex
	opened   map[string]openedStream

	// The last Healthy answer and when it was made.
	healthMu  sync.Mutex
	healthAt  time.Time
	healthErr error
}

// Backend implements the registry's seam, deletion included, and *Log
// and *Checkpoint the storage seam, with the optional capabilities of the
// table in modules/contract/capabilities.go that this backend has (it is
// no Reopener, FailureReporter or Retainer, and its checkpoints are no
// CheckpointExister). The admin store: adminstore.go.
var (
	_ topicqueue.Backend          = (*Backend)(nil)
	_ contract.TopicDeleter       = (*Backend)(nil)
	_ contract.TopicWatcher       = (*Backend)(nil)
	_ contract.HealthChecker      = (*Backend)(nil)
	_ contract.Log                = (*Log)(nil)
	_ contract.Incarnationer      = (*Log)(nil)
	_ contract.CheckpointLister   = (*Log)(nil)
	_ contract.CheckpointRemover  = (*Log)(nil)
	_ contract.WorkLeaser         = (*Log)(nil)
	_ contract.Checkpoint         = (*Checkpoint)(nil)
	_ contract.CheckpointReloader = (*Checkpoint)(nil)
	_ contract.CheckpointSeeker   = (*Checkpoint)(nil)
	_ contract.EpochCheckpoint    = (*epochCheckpoint)(nil)
)

// Connect connects to cfg.Servers (credentials and TLS from cfg, client
// name "mmmq-<hostname>", reconnecting for ever once connected, with no
// reconnect buffer: while disconnected, appends fail at once), checks
// that JetStream answers and opens the checkpoint bucket. maxRecordBytes
// is mmmq.broker.segment.max-record-bytes; budget (may be nil) the
// broker's in-flight memory budget, which ACCEPTED appends draw from.
// Then it checks that streams of cfg.Replicas replicas can be placed
// (checkPlacement: an error for an unclustered server, a warning for a
// cluster short of servers now). Errors name the servers:
// "jetstream: connect nats://...: ..." when no server answered within
// cfg.ConnectTimeout, when JetStream is not enabled for the account, when
// the buckets cannot be made, or when cfg.Replicas cannot ever be placed.
func Connect(cfg Config, maxRecordBytes int, budget *contract.Budget, log *zap.Logger) (*Backend, error) {
	if log == nil {
		log = zap.NewNop()
	}
	nc, err := nats.Connect(cfg.Servers, natsOptions(cfg, log)...)
	if err != nil {
		return nil, fmt.Errorf("jetstream: connect %s: %w", cfg.redactedServers(), err)
	}
	b := &Backend{cfg: cfg, nc: nc, opts: Options{
		Prefix: cfg.StreamPrefix, Replicas: int(cfg.Replicas), MaxRecordBytes: maxRecordBytes,
		RequestTimeout: cfg.RequestTimeout, Logger: log, Budget: budget, Holder: holderName(""),
	}}
	if err := b.initRetrying(); err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: connect %s: %w", cfg.redactedServers(), err)
	}
	if err := b.checkPlacement(); err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: connect %s: %w", cfg.redactedServers(), err)
	}
	if int64(maxRecordBytes)+headerReserve > nc.MaxPayload() {
		log.Warn("the NATS servers' max_payload is below mmmq.broker.segment.max-record-bytes: larger messages are refused (413)",
			zap.Int64("max-payload", nc.MaxPayload()), zap.Int("max-record-bytes", maxRecordBytes))
	}
	log.Info("connected to JetStream", zap.String("server", nc.ConnectedUrlRedacted()),
		zap.Int64("replicas", cfg.Replicas), zap.String("stream-prefix", cfg.StreamPrefix))
	return b, nil
}

// initRetrying runs init until it succeeds or fails for good (retrying).
func (b *Backend) initRetrying() error { return b.retrying("connect", b.init) }

// startupWait is the least time startup waits for the cluster to answer
// its first requests (connect-timeout when longer): a new bucket or stream
// has no leader for a few seconds, nor one whose leader was just lost.
const startupWait = 30 * time.Second

// retrying runs f until it succeeds or fails for good: a timeout or "no
// responders" (a stream or bucket without a leader while the cluster
// elects one: all brokers starting at once, or one restarting with a NATS
// node) is retried every 500ms for up to startupWait (or
// cfg.ConnectTimeout when longer); any other error is returned at once.
func (b *Backend) retrying(what string, f func() error) error {
	deadline := time.Now().Add(max(startupWait, b.cfg.ConnectTimeout))
	for {
		err := f()
		if err == nil || !transient(err) || time.Now().After(deadline) {
			return err
		}
		b.opts.Logger.Warn("JetStream did not answer at startup; retrying", zap.String("step", what), zap.Error(err))
		time.Sleep(500 * time.Millisecond)
	}
}

// transient: the cluster did not answer (yet), as opposed to refusing.
func transient(err error) bool {
	return errors.Is(err, ErrTimeout) || errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

// init checks the account has JetStream and opens the checkpoint bucket.
func (b *Backend) init() error {
	js, err := jetstream.New(b.nc, jetstream.WithDefaultTimeout(b.cfg.RequestTimeout))
	if err != nil {
		return err
	}
	b.js = js
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.RequestTimeout)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("jetstream account info: %w", err)
	}
	cs, err := NewCheckpointStore(ctx, js, b.cfg.StreamPrefix, int(b.cfg.Replicas), b.opts.Logger)
	if err != nil {
		return fmt.Errorf("open the checkpoint bucket: %w%s", classify(err), replicasHint(err, int(b.cfg.Replicas)))
	}
	b.cps = kvCheckpoints{cs}
	b.opts.Leases, err = NewLeaseStore(ctx, js, b.cfg.StreamPrefix, int(b.cfg.Replicas), b.cfg.LeaseTimeout)
	if err != nil {
		return fmt.Errorf("open the lease buckets: %w%s", classify(err), replicasHint(err, int(b.cfg.Replicas)))
	}
	return nil
}

// natsOptions maps the section to the NATS client's options.
func natsOptions(cfg Config, log *zap.Logger) []nats.Option {
	host, _ := os.Hostname()
	opts := []nats.Option{
		nats.Name("mmmq-" + host),
		nats.Timeout(cfg.ConnectTimeout),
		nats.MaxReconnects(-1),
		// A server that stops answering without closing the connection (a
		// frozen process, a partition) is given up after pingInterval x
		// maxPingsOut, and the client moves to another server: with the
		// client's defaults (2 minutes x 2) the broker would refuse
		// publishes for minutes.
		nats.PingInterval(pingInterval),
		nats.MaxPingsOutstanding(maxPingsOut),
		// No reconnect buffer: a publish while disconnected fails at once
		// (503, nothing sent) instead of waiting in the client and being
		// stored after its producer was told it failed.
		nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if !nc.IsClosed() {
				log.Warn("disconnected from NATS; reconnecting", zap.Error(err))
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("reconnected to NATS", zap.String("server", nc.ConnectedUrlRedacted()))
		}),
		nats.ErrorHandler(func(_ *nats.Conn, s *nats.Subscription, err error) {
			log.Warn("NATS asynchronous error", zap.Error(err))
		}),
	}
	if cfg.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	if cfg.User != "" {
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	}
	if cfg.Token != "" {
		opts = append(opts, nats.Token(cfg.Token))
	}
	if cfg.TLS.CAFile != "" {
		opts = append(opts, nats.RootCAs(cfg.TLS.CAFile))
	}
	if cfg.TLS.CertFile != "" {
		opts = append(opts, nats.ClientCert(cfg.TLS.CertFile, cfg.TLS.KeyFile))
	}
	return opts
}

// Close closes the NATS connection. Close the logs first (the registry
// does, on stop).
func (b *Backend) Close() error {
	b.nc.Close()
	return nil
}

// Conn is the backend's NATS connection.
func (b *Backend) Conn() *nats.Conn { return b.nc }

// Open opens topic name's stream (StreamName) as a *Log. With create a
// missing stream is created (file storage, the configured replicas,
// limits retention with the topic's retention policy as MaxAge and
// MaxBytes and DiscardOld, DenyDelete so that sequences stay without
// gaps, DenyPurge off, atomic batch publish on, MetaTopic and
// MetaIncarnation metadata); another broker creating it at the same
// moment is fine (its creation wins, and this one opens the stream it
// made). An existing stream whose MaxAge or MaxBytes differ from the
// topic's policy is updated to it (the rest of its configuration kept;
// logged at Info): the last broker to open a topic sets its limits.
// Without create the stream must exist: ErrNoTopic otherwise.
func (b *Backend) Open(name string, create bool) (contract.Log, error) {
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.RequestTimeout)
	defer cancel()
	sname := StreamName(b.cfg.StreamPrefix, name)
	str, err := b.js.Stream(ctx, sname)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if !create {
			return nil, fmt.Errorf("open topic %s: %w (stream %s)", name, ErrNoTopic, sname)
		}
		str, err = b.js.CreateStream(ctx, b.streamConfig(name))
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			str, err = b.js.Stream(ctx, sname)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open topic %s: stream %s: %w%s", name, sname, classify(err), replicasHint(err, int(b.cfg.Replicas)))
	}
	if t := str.CachedInfo().Config.Metadata[MetaTopic]; t != "" && t != name {
		return nil, fmt.Errorf("open topic %s: stream %s holds topic %q", name, sname, t)
	}
	if str, err = b.applyRetention(ctx, str, name); err != nil {
		return nil, fmt.Errorf("open topic %s: %w", name, err)
	}
	l, err := openLog(ctx, b.nc, str, name, b.opts, b.cps)
	if err != nil {
		return nil, err
	}
	b.noteOpen(sname, name, l.incarnation, l)
	return l, nil
}

// streamConfig is the configuration of topic's new stream (see Open).
func (b *Backend) streamConfig(topic string) jetstream.StreamConfig {
	cfg := jetstream.StreamConfig{
		Name:               StreamName(b.cfg.StreamPrefix, topic),
		Description:        "mmmq topic " + topic,
		Subjects:           []string{Subject(b.cfg.StreamPrefix, topic)},
		Retention:          jetstream.LimitsPolicy,
		Storage:            jetstream.FileStorage,
		Replicas:           int(b.cfg.Replicas),
		Discard:            jetstream.DiscardOld,
		MaxMsgs:            -1,
		DenyDelete:         true,
		DenyPurge:          false,
		AllowAtomicPublish: true,
		Duplicates:         b.opts.DedupWindow,
		Metadata:           map[string]string{MetaTopic: topic, MetaIncarnation: contract.NewIncarnation()},
	}
	setLimits(&cfg, b.policy(topic))
	return cfg
}

// policy is topic's retention policy (Options.Retention); none keeps
// everything.
func (b *Backend) policy(topic string) contract.RetentionPolicy {
	if b.opts.Retention == nil {
		return contract.RetentionPolicy{}
	}
	return b.opts.Retention(topic)
}

// setLimits makes p cfg's limits: MaxAge p.MaxAge (0 = none), MaxBytes
// p.MaxBytes (0 = unlimited, JetStream's -1). A duplicate window longer
// than MaxAge is cut to it (JetStream refuses a longer one).
func setLimits(cfg *jetstream.StreamConfig, p contract.RetentionPolicy) {
	cfg.MaxAge, cfg.MaxBytes = p.MaxAge, p.MaxBytes
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = -1
	}
	if cfg.MaxAge > 0 && cfg.Duplicates > cfg.MaxAge {
		cfg.Duplicates = cfg.MaxAge
	}
}

// applyRetention updates str to topic's retention policy when its MaxAge
// or MaxBytes differ (UpdateStream with its current configuration,
// metadata included, and the new limits and the duplicate window a new
// stream gets) and logs the change at Info. Without Options.Retention
// the stream is left as it is. Errors: "update stream <name>: ..."
// (classified).
func (b *Backend) applyRetention(ctx context.Context, str jetstream.Stream, topic string) (jetstream.Stream, error) {
	if b.opts.Retention == nil {
		return str, nil
	}
	cur := str.CachedInfo().Config
	fresh := b.streamConfig(topic)
	want := cur
	want.MaxAge, want.MaxBytes, want.Duplicates = fresh.MaxAge, fresh.MaxBytes, fresh.Duplicates
	if want.MaxAge == cur.MaxAge && want.MaxBytes == cur.MaxBytes {
		return str, nil
	}
	upd, err := b.js.UpdateStream(ctx, want)
	if err != nil {
		return nil, fmt.Errorf("update stream %s: %w", cur.Name, classify(err))
	}
	b.opts.Logger.Info("retention policy applied to the topic's stream",
		zap.String("topic", topic), zap.String("stream", cur.Name),
		zap.Duration("max-age-was", cur.MaxAge), zap.Duration("max-age", want.MaxAge),
		zap.Int64("max-bytes-was", cur.MaxBytes), zap.Int64("max-bytes", want.MaxBytes))
	return upd, nil
}

// Topics lists the streams whose subjects are under "<prefix>.t.": their
// topic is the MetaTopic metadata when it names the stream, else the
// decoded stream name (DecodeStreamName); a stream with neither is
// skipped.
func (b *Backend) Topics() (names, skipped []string, err error) {
	streams, skipped, err := b.listStreams()
	if err != nil {
		return nil, nil, err
	}
	for _, s := range streams {
		names = append(names, s.topic)
	}
	sort.Strings(names)
	return names, skipped, nil
}

// Lock returns at once with a no-op release: brokers sharing the cluster
// share its topics by design; JetStream orders their appends.
func (b *Backend) Lock() (func() error, error) { return func() error { return nil }, nil }

// Delete deletes topic name's stream, then its checkpoints. stored is
// false once the stream is gone (checkpoints left behind by an error are
// harmless: a topic created again starts its readers from them only if
// they are not purged, and the error is returned).
func (b *Backend) Delete(name string) (stored bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.RequestTimeout)
	defer cancel()
	sname := StreamName(b.cfg.StreamPrefix, name)
	if err := b.js.DeleteStream(ctx, sname); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return true, fmt.Errorf("delete stream %s: %w", sname, classify(err))
	}
	b.forgetOpen(sname)
	return false, b.cps.remove(name)
}

// FinishDeletions has nothing to finish: a stream deletion is one request.
func (b *Backend) FinishDeletions() ([]string, error) { return nil, nil }
