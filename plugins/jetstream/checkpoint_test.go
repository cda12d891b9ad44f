package jetstream

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mmmq/mmmq/modules/contract"
)

var _ contract.Checkpoint = (*Checkpoint)(nil)

// kvCheckpointStores returns n checkpoint stores over one embedded server,
// each on its own connection: n nodes sharing one JetStream cluster.
func kvCheckpointStores(t *testing.T, n int) []*CheckpointStore {
	t.Helper()
	s := kvServer(t)
	stores := make([]*CheckpointStore, n)
	for i := range stores {
		cs, err := NewCheckpointStore(context.Background(), kvConnect(t, s), "mmmq", 1, nil)
		require.NoError(t, err)
		stores[i] = cs
	}
	return stores
}

func kvOpen(t *testing.T, s *CheckpointStore, topic, name string) *Checkpoint {
	t.Helper()
	c, err := s.Open(topic, name)
	require.NoError(t, err)
	return c
}

func TestCheckpointNewIsZeroAndUnlisted(t *testing.T) {
	s := kvCheckpointStores(t, 1)[0]
	c := kvOpen(t, s, "orders", "billing")
	require.Equal(t, int64(0), c.Offset())
	require.Equal(t, "billing", c.Name())
	require.Equal(t, "nats-kv://mmmq-checkpoints/orders.billing", c.Path())
	names, err := s.List("orders")
	require.NoError(t, err)
	require.Empty(t, names, "an opened but never committed checkpoint is not listed")
}

func TestCheckpointCommitSeenByAnotherNode(t *testing.T) {
	st := kvCheckpointStores(t, 2)
	a := kvOpen(t, st[0], "orders.eu", "billing")
	require.NoError(t, a.Commit(42))
	require.Equal(t, int64(42), a.Offset())

	b := kvOpen(t, st[1], "orders.eu", "billing")
	require.Equal(t, int64(42), b.Offset())
	require.NoError(t, b.Commit(43))
	require.NoError(t, a.Reload())
	require.Equal(t, int64(43), a.Offset())
}

func TestCheckpointSecondWriterIsStale(t *testing.T) {
	st := kvCheckpointStores(t, 2)
	a := kvOpen(t, st[0], "orders", "billing")
	b := kvOpen(t, st[1], "orders", "billing")

	require.NoError(t, a.Commit(5))
	err := b.Commit(7) // b still believes there is no value: its create loses
	require.ErrorIs(t, err, ErrStaleCommit)
	require.Contains(t, err.Error(), "a newer writer owns this checkpoint")
	require.Equal(t, int64(0), b.Offset(), "a rejected commit keeps the previous offset")

	require.NoError(t, b.Reload())
	require.Equal(t, int64(5), b.Offset())
	require.NoError(t, b.Commit(7))

	err = a.Commit(9) // a's revision moved under it
	require.ErrorIs(t, err, ErrStaleCommit)
	require.Equal(t, int64(5), a.Offset())
}

func TestCheckpointStaleEpochIsRejected(t *testing.T) {
	st := kvCheckpointStores(t, 2)
	old := kvOpen(t, st[0], "orders", "billing")
	old.SetEpoch(1)
	require.NoError(t, old.Commit(10))

	cur := kvOpen(t, st[1], "orders", "billing")
	cur.SetEpoch(2)
	require.NoError(t, cur.Commit(12))
	require.Equal(t, uint64(2), cur.StoredEpoch())

	// Even after reading the latest revision, the old epoch may not write.
	require.NoError(t, old.Reload())
	require.Equal(t, int64(12), old.Offset())
	err := old.Commit(15)
	require.ErrorIs(t, err, ErrStaleCommit)
	require.Contains(t, err.Error(), "epoch")
	require.Equal(t, int64(12), old.Offset())

	// A writer that never set an epoch (epoch 0) is fenced out too.
	none := kvOpen(t, st[0], "orders", "billing")
	require.ErrorIs(t, none.Commit(20), ErrStaleCommit)
}

func TestCheckpointBackwardCommitIsRefused(t *testing.T) {
	s := kvCheckpointStores(t, 1)[0]
	c := kvOpen(t, s, "orders", "billing")
	c.SetEpoch(3)
	require.NoError(t, c.Commit(10))
	err := c.Commit(9)
	require.ErrorIs(t, err, ErrBackwardCommit)
	require.Equal(t, int64(10), c.Offset())
	require.NoError(t, c.Commit(10), "committing the same offset again is allowed")
	require.Error(t, c.Commit(-1))

	c.SetEpoch(4) // a new epoch does not license going backwards either
	require.ErrorIs(t, c.Commit(3), ErrBackwardCommit)
	require.Equal(t, int64(10), c.Offset())
}

func TestCheckpointSeekMovesBackAndFencesOldRevision(t *testing.T) {
	st := kvCheckpointStores(t, 2)
	holder := kvOpen(t, st[0], "orders", "billing")
	holder.SetEpoch(3)
	require.NoError(t, holder.Commit(10))

	op := kvOpen(t, st[1], "orders", "billing") // an operator on another node
	require.NoError(t, op.SeekTo(2))
	require.Equal(t, int64(2), op.Offset())
	require.Equal(t, uint64(3), op.StoredEpoch(), "a seek keeps the stored epoch")
	seeked := kvOpen(t, st[0], "orders", "billing")
	require.Equal(t, [2]uint64{2, 3}, [2]uint64{uint64(seeked.Offset()), seeked.StoredEpoch()}, "the stored value after the seek")

	require.ErrorIs(t, holder.Commit(11), ErrStaleCommit)
	require.Equal(t, int64(10), holder.Offset())
	require.NoError(t, holder.Reload())
	require.Equal(t, int64(2), holder.Offset())
	require.NoError(t, holder.Commit(3))

	again := kvOpen(t, st[1], "orders", "billing")
	require.Equal(t, int64(3), again.Offset())
	require.Equal(t, uint64(3), again.StoredEpoch())

	fresh := kvOpen(t, st[0], "orders", "new-group")
	require.NoError(t, fresh.SeekTo(7), "a seek creates a missing checkpoint")
	require.Equal(t, int64(7), kvOpen(t, st[1], "orders", "new-group").Offset())
}

func TestCheckpointListIsSortedAndCommittedOnly(t *testing.T) {
	s := kvCheckpointStores(t, 1)[0]
	for _, tn := range [][2]string{{"a.b", "z"}, {"a.b", "m"}, {"a.b", "x.y"}, {"a", "b.c"}, {"a.b.c", "d"}} {
		require.NoError(t, kvOpen(t, s, tn[0], tn[1]).Commit(1))
	}
	kvOpen(t, s, "a.b", "never-committed")

	for topic, want := range map[string][]string{
		"a.b":   {"m", "x.y", "z"},
		"a":     {"b.c"},
		"a.b.c": {"d"},
	} {
		got, err := s.List(topic)
		require.NoError(t, err)
		require.Equal(t, want, got, "topic %s", topic)
	}
	got, err := s.List("nothing")
	require.NoError(t, err)
	require.Empty(t, got)
}

func TestCheckpointRemove(t *testing.T) {
	st := kvCheckpointStores(t, 2)
	a := kvOpen(t, st[0], "orders", "billing")
	require.NoError(t, a.Commit(9))
	require.NoError(t, kvOpen(t, st[0], "orders", "audit").Commit(1))

	require.NoError(t, st[1].Remove("orders", "billing"))
	require.NoError(t, st[1].Remove("orders", "never-stored"))
	names, err := st[1].List("orders")
	require.NoError(t, err)
	require.Equal(t, []string{"audit"}, names)
	require.Equal(t, int64(0), kvOpen(t, st[1], "orders", "billing").Offset())

	require.ErrorIs(t, a.Commit(10), ErrStaleCommit)
	require.NoError(t, a.Reload())
	require.Equal(t, int64(0), a.Offset())
	require.NoError(t, a.Commit(2))
}

func TestCheckpointInvalidNames(t *testing.T) {
	s := kvCheckpointStores(t, 1)[0]
	for _, tn := range [][2]string{{"", "g"}, {"a..b", "g"}, {"a/b", "g"}, {"t", ""}, {"t", ".hidden"}, {"t", "a/b"}, {"t", strings.Repeat("n", 201)}} {
		_, err := s.Open(tn[0], tn[1])
		require.ErrorIs(t, err, ErrInvalidName, "topic %q name %q", tn[0], tn[1])
	}
	_, err := s.List("a..b")
	require.ErrorIs(t, err, ErrInvalidName)
	_, err = NewCheckpointStore(context.Background(), nil, "bad.prefix", 1, nil)
	require.ErrorIs(t, err, ErrInvalidName)
}

func TestCheckpointGarbledValueRestartsFromZero(t *testing.T) {
	s := kvCheckpointStores(t, 1)[0]
	kvOpen(t, s, "orders", "billing") // a checkpoint in use, then its value garbled
	_, err := s.kv.Put(context.Background(), "orders.billing", []byte{1, 2, 3})
	require.NoError(t, err)
	c := kvOpen(t, s, "orders", "billing")
	require.Equal(t, int64(0), c.Offset())
	require.NoError(t, c.Commit(4), "the next commit replaces the garbled value")
	require.Equal(t, int64(4), kvOpen(t, s, "orders", "billing").Offset())
}

// kvKeyRE is what a key-value key allows (nats.go's validKeyRe).
var kvKeyRE = regexp.MustCompile(`^[-/_=.a-zA-Z0-9]+$`)

func TestKeyPartRoundTrip(t *testing.T) {
	for _, s := range []string{"a", "a.b", "..", "-_", "=", "=2E", "x/y", "ü", "\x00\xff", "orders.eu-west.v2", "a=b.c"} {
		kvCheckKeyPart(t, s)
	}
	key, err := checkpointKey("orders.eu", "a..b.")
	require.NoError(t, err)
	require.Equal(t, "orders=2Eeu.a=2E=2Eb=2E", key)
	topic, name, err := splitCheckpointKey(key)
	require.NoError(t, err)
	require.Equal(t, [2]string{"orders.eu", "a..b."}, [2]string{topic, name})
	for _, bad := range []string{"=", "=2", "=2e", "=G0", "a.b", "a b"} {
		_, err := unescapeKeyPart(bad)
		require.Error(t, err, "%q", bad)
	}
}

func FuzzKeyPart(f *testing.F) {
	for _, s := range []string{"a", "a.b", "=", "x/y", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if s == "" {
			return
		}
		kvCheckKeyPart(t, s)
	})
}

func kvCheckKeyPart(t *testing.T, s string) {
	t.Helper()
	e := escapeKeyPart(s)
	require.Regexp(t, kvKeyRE, e)
	require.NotContains(t, e, ".", "an escaped part is one subject token")
	got, err := unescapeKeyPart(e)
	require.NoError(t, err)
	require.Equal(t, s, got)
}
