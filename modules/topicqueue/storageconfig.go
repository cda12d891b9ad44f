package topicqueue

import (
	"errors"
	"math"
	"strings"
	"time"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/storage"
)

// OnCorruption says what startup does with a topic whose files are corrupt
// (key "mmmq.broker.storage.on-corruption"). It is the one enum of this
// concept.
type OnCorruption string

// Values accepted by mmmq.broker.storage.on-corruption.
const (
	// OnCorruptionFail refuses to start the broker.
	OnCorruptionFail OnCorruption = "fail"
	// OnCorruptionQuarantine refuses only the corrupt topic (files left
	// untouched, error logged) and serves the others.
	OnCorruptionQuarantine OnCorruption = "quarantine"
)

// Storage backends (mmmq.broker.storage.backend).
const (
	// BackendLocal is the segmented log on local disk (the default).
	BackendLocal = "local"
	// BackendJetStream is a NATS JetStream cluster (plugins/jetstream).
	BackendJetStream = "jetstream"
)

// StorageConfig configures the on-disk log: the configuration section
// mmmq.broker.storage (StorageSection), which Module registers.
type StorageConfig struct {
	// Backend is where topics are stored: "local" (the default: one
	// directory per topic under RootDir, segment and offset-index files)
	// or "jetstream" (one replicated NATS JetStream stream per topic, the
	// plugin plugins/jetstream and its section mmmq.jetstream; several
	// broker nodes may share it). The local-only keys index-sync and
	// index-sync-interval must keep their defaults with "jetstream", and
	// mmmq.broker.retention.keep-unconsumed must stay false.
	Backend string `koanf:"backend"`
	// RootDir is the directory holding one sub-directory per topic. Default "./data".
	RootDir string `koanf:"root-dir"`
	// OnCorruption is "fail" (refuse to start) or "quarantine" (refuse only
	// the corrupt topic). Default "fail".
	OnCorruption OnCorruption `koanf:"on-corruption"`
	// MaxTopics caps the number of topics (open topic directories); at least 1.
	// Default 10000.
	MaxTopics int `koanf:"max-topics"`

	// MaxOpenSegments caps the segments, active or sealed, whose .mmm and
	// .idx files are open at once, across all topics (the storage segment
	// cache): 2 file descriptors each. An idle topic holds none. More busy
	// topics than this still work, reopening their files per group commit
	// (slower; mmmq_segment_cache_opens_total climbs). Default 0 =
	// automatic: a quarter of the open-file limit, 1 to 4096 (1024 → 256,
	// 20000 → 4096). A value whose descriptors exceed half of the limit
	// stops startup, naming the limit.
	MaxOpenSegments int `koanf:"max-open-segments"`

	// MinFreeBytes is the disk guard: while the filesystem of RootDir has
	// fewer bytes free than this (statfs: available to non-root),
	// publishes are refused with 507 NO_SPACE and Retry-After, before the
	// disk is actually full, and accepted again once space is freed (no
	// restart). 0 turns the guard off. Default 268435456 (256 MiB).
	MinFreeBytes int64 `koanf:"min-free-bytes"`

	// IndexSync is when a topic's offset index is fsynced: "commit" (the
	// default, the original Java mmmq's order: in every group commit,
	// after the segment's fsync and before the answer; two fsyncs per group
	// commit) or "lazy" (one fsync per group commit, the segment's; the
	// index is fsynced before a segment is sealed, at close and every
	// IndexSyncInterval, and startup recovery indexes again from the
	// segment what a power loss took from it). Both keep every DURABLE
	// acknowledgement through a power loss; lazy answers sooner, and a
	// restart after a power loss may walk up to an interval of segment
	// bytes per topic. A data directory may switch between the two at any
	// restart.
	IndexSync string `koanf:"index-sync"`
	// IndexSyncInterval is the longest a lazily written index stays
	// unsynced; 1ms to 1h. Only index-sync lazy uses it. Default 1s.
	IndexSyncInterval time.Duration `koanf:"index-sync-interval"`

	// Preallocate is how many bytes of written, fsynced zeros a busy
	// topic's active segment keeps ahead of its writer (its offset index
	// an eighth of that, at least 4 KiB), so that group commits overwrite
	// zeros and use fdatasync, which has no file size to flush: less CPU
	// and time per group commit. 0 turns it off: files then hold exactly
	// their entries at every moment. Either way sealed, cleanly closed
	// and repaired segment and index files end exactly at their last
	// entry (what the original Java mmmq reads); only the active files of
	// a running or killed broker carry a zero tail, which startup
	// recovery cuts. 0 or 4096 to 1073741824. Default
	// storage.DefaultPreallocate (see configs/mmmq.yaml).
	Preallocate int64 `koanf:"preallocate"`
	// PreallocateMaxBytes caps the zero bytes preallocated by all topics
	// together (10,000 topics never hold more); a topic is preallocated
	// only while busy, gives its tail back after 10s idle, and never when
	// the chunk would leave less than min-free-bytes free. At least
	// preallocate. Default 268435456 (256 MiB).
	PreallocateMaxBytes int64 `koanf:"preallocate-max-bytes"`
}

// StorageSection is the section mmmq.broker.storage (environment
// MMMQ_BROKER_STORAGE_<KEY>, e.g. MMMQ_BROKER_STORAGE_ROOT_DIR), with the
// defaults above (the disk guard's and the index-sync interval's are the
// storage engine's). Invalid values name their key: an empty root-dir, an
// on-corruption other than fail or quarantine, a max-topics under 1, a
// negative max-open-segments or min-free-bytes, an index-sync other than
// commit or lazy, an index-sync-interval outside 1ms..1h, a preallocate
// other than 0 or 4096..1073741824, a preallocate-max-bytes under
// preallocate, a backend other than local or jetstream, and, with
// jetstream, an index-sync, index-sync-interval or preallocate that is not
// the default.
var StorageSection = config.NewSection("broker.storage", StorageConfig{
	Backend:             BackendLocal,
	RootDir:             "./data",
	OnCorruption:        OnCorruptionFail,
	MaxTopics:           10000,
	MaxOpenSegments:     0,
	MinFreeBytes:        storage.DefaultMinFreeBytes,
	IndexSync:           "commit",
	IndexSyncInterval:   storage.DefaultIndexSyncInterval,
	Preallocate:         storage.DefaultPreallocate,
	PreallocateMaxBytes: storage.DefaultPreallocateMaxBytes,
}, validateStorage)

func validateStorage(s *StorageConfig) error {
	const k = "mmmq.broker.storage."
	var errs []error
	if strings.TrimSpace(s.RootDir) == "" {
		errs = append(errs, config.InvalidValue(k+"root-dir", "must not be empty"))
	}
	switch s.OnCorruption {
	case OnCorruptionFail, OnCorruptionQuarantine:
	default:
		errs = append(errs, config.InvalidValue(k+"on-corruption", "must be %q or %q; got %q", OnCorruptionFail, OnCorruptionQuarantine, s.OnCorruption))
	}
	errs = append(errs,
		config.CheckIntRange(k+"max-topics", int64(s.MaxTopics), 1, math.MaxInt32),
		config.CheckIntRange(k+"max-open-segments", int64(s.MaxOpenSegments), 0, math.MaxInt32),
		config.CheckIntRange(k+"min-free-bytes", s.MinFreeBytes, 0, math.MaxInt64))
	switch s.IndexSync {
	case "commit", "lazy":
	default:
		errs = append(errs, config.InvalidValue(k+"index-sync", "must be %q or %q; got %q", "commit", "lazy", s.IndexSync))
	}
	if d := s.IndexSyncInterval; d < time.Millisecond || d > time.Hour {
		errs = append(errs, config.InvalidValue(k+"index-sync-interval", "must be between 1ms and 1h; got %s", d))
	}
	preallocOK := s.Preallocate == 0 || (s.Preallocate >= 4096 && s.Preallocate <= 1<<30)
	if !preallocOK {
		errs = append(errs, config.InvalidValue(k+"preallocate", "must be 0 (off) or between 4096 and 1073741824 bytes; got %d", s.Preallocate))
	}
	// The cross-check only with a valid preallocate: one cause, one error.
	if m := s.PreallocateMaxBytes; m < 0 || (preallocOK && s.Preallocate > 0 && m < s.Preallocate) {
		errs = append(errs, config.InvalidValue(k+"preallocate-max-bytes", "must be at least mmmq.broker.storage.preallocate (%d bytes): one topic's chunk must fit; got %d", s.Preallocate, m))
	}
	switch s.Backend {
	case BackendLocal:
	case BackendJetStream:
		// The offset index is the local log's: JetStream has none to sync.
		if s.IndexSync != "commit" {
			errs = append(errs, config.InvalidValue(k+"index-sync", "applies to the local backend only; remove it with backend %q (got %q)", BackendJetStream, s.IndexSync))
		}
		if s.IndexSyncInterval != storage.DefaultIndexSyncInterval {
			errs = append(errs, config.InvalidValue(k+"index-sync-interval", "applies to the local backend only; remove it with backend %q (got %s)", BackendJetStream, s.IndexSyncInterval))
		}
		if s.Preallocate != storage.DefaultPreallocate {
			errs = append(errs, config.InvalidValue(k+"preallocate", "applies to the local backend only; remove it with backend %q (got %d)", BackendJetStream, s.Preallocate))
		}
	default:
		errs = append(errs, config.InvalidValue(k+"backend", "must be %q or %q; got %q", BackendLocal, BackendJetStream, s.Backend))
	}
	return errors.Join(errs...)
}

// SegmentConfig sizes segment files: the configuration section
// mmmq.broker.segment (SegmentSection), which Module registers.
type SegmentConfig struct {
	// MaxBytes is the segment size, in bytes, at or above which the next
	// append starts a new segment; at least 1024. Default 67108864 (64 MiB).
	MaxBytes int64 `koanf:"max-bytes"`
	// MaxRecordBytes is the largest stored message JSON, in bytes; between 64
	// and MaxBytes. Default 1048576 (1 MiB).
	MaxRecordBytes int64 `koanf:"max-record-bytes"`
}

// maxRecordLimit is the largest record the entry format can frame: the
// int32 length field counts the 4 CRC bytes plus the JSON.
const maxRecordLimit = math.MaxInt32 - 4

// SegmentSection is the section mmmq.broker.segment (environment
// MMMQ_BROKER_SEGMENT_<KEY>), with the storage engine's defaults
// (storage.DefaultSegmentMaxBytes, storage.DefaultMaxRecordBytes). A
// max-bytes under 1024 or a max-record-bytes outside 64..max-bytes stops
// startup naming the key; when max-bytes is invalid, max-record-bytes is
// checked against the entry format's limit only (one cause reported).
//
// A max-record-bytes that is not set follows a smaller segment size: with
// only max-bytes: 4096 given, it is 4096 (the smaller of its 1 MiB default
// and max-bytes), so the user is not refused over a key they never set.
var SegmentSection = config.NewSection("broker.segment", SegmentConfig{
	MaxBytes:       storage.DefaultSegmentMaxBytes,
	MaxRecordBytes: storage.DefaultMaxRecordBytes,
}, validateSegment).WithNormalize(fitRecordToSegment)

// fitRecordToSegment lowers an unset max-record-bytes to a valid
// max-bytes below it.
func fitRecordToSegment(s *SegmentConfig, w config.View) {
	if !w.IsSet("mmmq.broker.segment.max-record-bytes") && s.MaxBytes >= 1024 {
		s.MaxRecordBytes = min(s.MaxRecordBytes, s.MaxBytes)
	}
}

func validateSegment(s *SegmentConfig) error {
	const k = "mmmq.broker.segment."
	bytesErr := config.CheckIntRange(k+"max-bytes", s.MaxBytes, 1024, math.MaxInt64)
	if bytesErr == nil && s.MaxRecordBytes > s.MaxBytes && s.MaxBytes <= maxRecordLimit {
		return config.InvalidValue(k+"max-record-bytes", "must be between 64 and mmmq.broker.segment.max-bytes (%d): one message must fit in a segment; got %d", s.MaxBytes, s.MaxRecordBytes)
	}
	recordMax := int64(maxRecordLimit)
	if bytesErr == nil {
		recordMax = min(s.MaxBytes, maxRecordLimit)
	}
	return errors.Join(bytesErr, config.CheckIntRange(k+"max-record-bytes", s.MaxRecordBytes, 64, recordMax))
}

// MemoryConfig bounds the broker's memory for requests in flight: the
// configuration section mmmq.broker.memory (MemorySection), which Module
// registers and turns into the in-flight budget (NewBudgetFromConfig).
type MemoryConfig struct {
	// MaxInflightBytes is one broker-wide budget, in bytes, shared by the
	// messages of fetch replies being sent (HTTP and line protocol),
	// read-back pages being sent and ACCEPTED publishes waiting for the
	// storage writer. Work over it is refused with 503 OVERLOADED
	// (Retry-After) / ERR OVERLOADED, or a fetch or page returns fewer
	// messages. 0 means unlimited; otherwise at least
	// mmmq.broker.segment.max-record-bytes, so one message always fits.
	// Default 268435456 (256 MiB).
	MaxInflightBytes int64 `koanf:"max-inflight-bytes"`
}

// MemorySection is the section mmmq.broker.memory (environment
// MMMQ_BROKER_MEMORY_MAX_INFLIGHT_BYTES), default 256 MiB. A budget other
// than 0 under mmmq.broker.segment.max-record-bytes (one message of the
// largest size must fit, or it could never be fetched) stops startup
// naming the key; an invalid max-record-bytes is the one cause reported,
// and the budget is then checked against 64 bytes only.
var MemorySection = config.NewSection("broker.memory", MemoryConfig{
	MaxInflightBytes: 256 << 20,
}, nil).WithCrossCheck(checkMemory)

func checkMemory(m *MemoryConfig, cfg config.View) error {
	const recordKey = "mmmq.broker.segment.max-record-bytes"
	if m.MaxInflightBytes == 0 {
		return nil
	}
	lo := int64(64)
	if rec, ok := cfg.Value(recordKey).(int64); ok && !cfg.Failed(recordKey) {
		lo = rec
	}
	if m.MaxInflightBytes < lo {
		return config.InvalidValue("mmmq.broker.memory.max-inflight-bytes", "must be 0 (unlimited) or at least mmmq.broker.segment.max-record-bytes (%d); got %d", lo, m.MaxInflightBytes)
	}
	return nil
}
