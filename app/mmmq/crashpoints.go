//go:build crashpoints

// This file exists only in the crash-test build of mmmq
// (`go build -tags crashpoints ./app/mmmq`, done by app/mmmq/crashtest). It is
// never compiled into the release binary: `make build` and a plain
// `go build` do not set the tag, and there extraOptions adds nothing.

package main

import (
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"

	"go.uber.org/fx"

	"github.com/mmmq/mmmq/modules/admin"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/storage"
)

// Environment of the crash-test build. They are read and then removed from
// the environment before the configuration loads, because the config module
// rejects every unknown MMMQ_ variable.
const (
	// EnvCrashpoint names the injection point (one of crashpointNames).
	envCrashpoint = "MMMQ_CRASHPOINT"
	// EnvCrashpointAfter fires on the N-th time the point is reached
	// (default 1: the first time). The count is process-wide, over all topics.
	envCrashpointAfter = "MMMQ_CRASHPOINT_AFTER"
)

// Injection points for the crash tests. Each one kills the process with SIGKILL
// at that exact moment of the write path or the dispatch loop.
const (
	// Group commit of a topic's log (storage.Hooks), in write order:
	cpAfterSegmentWrite = "after-segment-write" // .mmm write returned, no fsync
	cpAfterSegmentSync  = "after-segment-sync"  // .mmm fsynced, .idx not written
	cpAfterIndexWrite   = "after-index-write"   // .idx write returned, not fsynced
	cpAfterIndexSync    = "after-index-sync"    // .idx fsynced, before the reply (index-sync commit only)
	// The group commit answered its waiters (their HTTP replies may not be
	// written yet). With index-sync lazy its index entries are written and
	// not fsynced; with commit they are fsynced.
	cpAfterReplyBeforeIndexSync = "after-reply-before-index-sync"
	// Rotation: index-sync lazy only, the full segment's index is about to
	// be fsynced (the next segment not yet created).
	cpBeforeSealIndexSync = "before-seal-index-sync"
	cpRotate              = "rotate-between-mmm-and-idx" // rotation: new .mmm created, .idx not
	// Dispatcher: the consumer ACKed, the checkpoint not yet fsynced.
	cpAfterAck = "after-ack-before-checkpoint"
	// A NACK-exhausted message appended (fsynced) to the dispatcher's
	// dead-letter topic, the checkpoint not yet moved past it.
	cpAfterDeadLetter = "after-dead-letter-before-checkpoint"
	// Topic deletion (DELETE /topics/{topic}):
	cpDeleteAfterRename     = "delete-after-rename"      // topic dir renamed aside, data root not fsynced
	cpDeleteAfterRenameSync = "delete-after-rename-sync" // rename durable, nothing removed
	cpDeleteMidRemove       = "delete-mid-remove"        // some files of the renamed dir removed (MMMQ_CRASHPOINT_AFTER: after that many)
	cpBetweenUnlinks        = "between-segment-unlinks"  // retention: head segment's .idx removed, .mmm not yet
	// Admin API: dispatchers.json.tmp written and fsynced, not yet renamed
	// over dispatchers.json.
	cpDispatchersBeforeRename = "dispatchers-before-rename"
)

var crashpointNames = []string{cpAfterSegmentWrite, cpAfterSegmentSync, cpAfterIndexWrite,
	cpAfterIndexSync, cpAfterReplyBeforeIndexSync, cpBeforeSealIndexSync, cpRotate, cpAfterAck, cpAfterDeadLetter,
	cpDeleteAfterRename, cpDeleteAfterRenameSync, cpDeleteMidRemove, cpBetweenUnlinks, cpDispatchersBeforeRename}

func init() {
	extraOptions = crashOptions
}

func crashOptions() fx.Option {
	name := os.Getenv(envCrashpoint)
	after := os.Getenv(envCrashpointAfter)
	os.Unsetenv(envCrashpoint)
	os.Unsetenv(envCrashpointAfter)
	if name == "" {
		return fx.Options()
	}
	known := false
	for _, n := range crashpointNames {
		known = known || n == name
	}
	if !known {
		return fx.Error(fmt.Errorf("%s: unknown crash point %q (want one of %v)", envCrashpoint, name, crashpointNames))
	}
	n := int64(1)
	if after != "" {
		v, err := strconv.ParseInt(after, 10, 64)
		if err != nil || v < 1 {
			return fx.Error(fmt.Errorf("%s: want an integer >= 1, got %q", envCrashpointAfter, after))
		}
		n = v
	}
	fmt.Fprintf(os.Stderr, "mmmq: crash-test build: %s=%s fires on hit %d\n", envCrashpoint, name, n)
	var hits atomic.Int64
	hit := func() {
		if hits.Add(1) == n {
			fmt.Fprintf(os.Stderr, "mmmq: crash point %s reached (hit %d): SIGKILL\n", name, n)
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // SIGKILL is not deliverable late; never go on
		}
	}
	if name == cpDispatchersBeforeRename {
		return fx.Decorate(func(s *admin.Store) *admin.Store {
			s.BeforeRename = hit
			return s
		})
	}
	if name == cpAfterAck {
		return fx.Decorate(func(o dispatcher.Options) dispatcher.Options {
			o.Hooks = &dispatcher.Hooks{AfterAck: func(string, string, int64) { hit() }}
			return o
		})
	}
	if name == cpAfterDeadLetter {
		return fx.Decorate(func(o dispatcher.Options) dispatcher.Options {
			o.Hooks = &dispatcher.Hooks{AfterDeadLetter: func(string, string, int64) { hit() }}
			return o
		})
	}
	h := &storage.Hooks{}
	switch name {
	case cpAfterSegmentWrite:
		h.AfterSegmentWrite = hit
	case cpAfterSegmentSync:
		h.AfterSegmentSync = hit
	case cpAfterIndexWrite:
		h.AfterIndexWrite = hit
	case cpAfterIndexSync:
		h.AfterIndexSync = hit
	case cpRotate:
		h.AfterRotateSegment = hit
	case cpAfterReplyBeforeIndexSync:
		h.AfterAnswer = hit
	case cpBeforeSealIndexSync:
		h.BeforeSealIndexSync = hit
	case cpDeleteAfterRename:
		h.AfterTopicRename = hit
	case cpDeleteAfterRenameSync:
		h.AfterTopicRenameSync = hit
	case cpDeleteMidRemove:
		h.AfterTopicFileRemove = hit
	case cpBetweenUnlinks:
		h.BetweenSegmentUnlinks = hit
	}
	return fx.Supply(h)
}
