package storage

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/mmmq/mmmq/modules/contract"
)

// The delivery counts of a checkpoint (contract.DeliveryRecorder): for a
// shared consumer group, how many times each message past the committed
// offset that is not finished was handed out, so that a restart or a power
// loss never resets a poison message's count. They share the checkpoint's
// <name>.finished file with the finished ranges, as kind-2 records
// (finished_format.go), and every rule of that file (finished.go) holds
// for them:
//
//	RecordDeliveries(ds) validate (Offset >= Offset(), Count >= 1) → append
//	                     kind-2 records (MaxFinishedRecordBody each) → fsync
//	                     after each (the first record of a new file creates
//	                     it and fsyncs the checkpoints directory) → claim
//	                     them in memory
//	RecordFinished(rs)   forgets the counts of the offsets it finishes (the
//	                     kind-1 record it appends makes them finished in the
//	                     file, where a finished offset has no live count)
//	Commit(next)         forgets the counts below next (stale in the file);
//	                     no range and no count left → the file is removed
//	ClearFinished        removes the file: every count is forgotten
//
// Compaction, the rewrite after a failed write and the rewrite before a
// Commit that moves the offset back write the live counts beside the live
// ranges. In memory the counts are one slice, ascending by offset, at most
// one per offset: the caller bounds how many there are (a shared group's
// max-unacked), and every operation on them is linear.

var _ contract.DeliveryRecorder = (*Checkpoint)(nil)

// Deliveries returns the recorded delivery counts of the offsets at or
// past Offset() that are not finished, ascending by offset, one per offset
// (the latest recorded), as a copy. O(n) in the number of counts.
func (c *Checkpoint) Deliveries() []contract.DeliveryCount {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.dlv)
}

// RecordDeliveries durably stores ds: each must have Offset >= Offset()
// and Count >= 1 (else an error and nothing is written). A later count of
// an offset replaces an earlier one, within ds too (the last one of an
// offset in ds wins); a count equal to the one stored, or of an offset
// already finished (it has no live count), writes nothing. It appends
// kind-2 records to <name>.finished, at most MaxFinishedRecordBody body
// bytes each, fsyncing the file after each one (the first record of a new
// file also fsyncs the checkpoints directory), and returns once all are
// durable. On error the counts are not claimed by Deliveries (some may be
// stored: they are then found again after a restart, a count never lower
// than the one claimed), and the caller must not hand the messages out.
// After Close it returns an error wrapping contract.ErrClosed.
func (c *Checkpoint) RecordDeliveries(ds []contract.DeliveryCount) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("record deliveries %s: %w", c.name, contract.ErrClosed)
	}
	for _, d := range ds {
		if d.Offset < c.offset || d.Count == 0 {
			return fmt.Errorf("record deliveries %s: count %d of offset %d is 0 or below the checkpoint's offset %d", c.name, d.Count, d.Offset, c.offset)
		}
	}
	add := changedDeliveries(c.dlv, dropFinishedDeliveries(normalizeDeliveries(ds), c.fin))
	if len(add) == 0 {
		return nil // nothing new
	}
	union := mergeDeliveries(c.dlv, add)
	if c.finBroken {
		if err := c.rewriteFinished(c.fin, union); err != nil {
			return err
		}
		c.dlv = union
		return nil
	}
	if err := c.appendFinished(encodeDeliveries(add), c.hooks != nil && c.hooks.SkipDeliveriesSync); err != nil {
		c.finBroken = true
		return err
	}
	c.dlv = union
	c.maybeCompact()
	return nil
}

// sortDeliveries sorts ds by offset.
func sortDeliveries(ds []contract.DeliveryCount) {
	slices.SortFunc(ds, func(a, b contract.DeliveryCount) int { return cmp.Compare(a.Offset, b.Offset) })
}

// normalizeDeliveries returns ds (any order, offsets repeated or not)
// sorted by offset with one count per offset, the last one ds gives it, as
// a new slice.
func normalizeDeliveries(ds []contract.DeliveryCount) []contract.DeliveryCount {
	s := slices.Clone(ds)
	slices.SortStableFunc(s, func(a, b contract.DeliveryCount) int { return cmp.Compare(a.Offset, b.Offset) })
	out := s[:0]
	for _, d := range s {
		if n := len(out); n > 0 && out[n-1].Offset == d.Offset {
			out[n-1] = d // stable: d came later in ds
			continue
		}
		out = append(out, d)
	}
	return out
}

// changedDeliveries returns the counts of add (ascending, one per offset)
// that differ from the count cur (ascending, one per offset) holds for the
// offset, or that cur lacks. It reuses add's array.
func changedDeliveries(cur, add []contract.DeliveryCount) []contract.DeliveryCount {
	out := add[:0]
	i := 0
	for _, d := range add {
		for i < len(cur) && cur[i].Offset < d.Offset {
			i++
		}
		if i < len(cur) && cur[i] == d {
			continue
		}
		out = append(out, d)
	}
	return out
}

// mergeDeliveries returns a and b (each ascending, one per offset) as one
// new ascending slice, one per offset: b's count where both have one.
func mergeDeliveries(a, b []contract.DeliveryCount) []contract.DeliveryCount {
	out := make([]contract.DeliveryCount, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && a[i].Offset < b[j].Offset):
			out = append(out, a[i])
			i++
		case i < len(a) && a[i].Offset == b[j].Offset:
			out = append(out, b[j])
			i, j = i+1, j+1
		default:
			out = append(out, b[j])
			j++
		}
	}
	return out
}

// dropFinishedDeliveries returns the counts of ds (ascending) whose offset
// no range of rs (ascending, disjoint) holds, as a new slice (nil when
// none is left).
func dropFinishedDeliveries(ds []contract.DeliveryCount, rs []contract.OffsetRange) []contract.DeliveryCount {
	var out []contract.DeliveryCount
	j := 0
	for _, d := range ds {
		for j < len(rs) && rs[j].Hi <= d.Offset {
			j++
		}
		if j < len(rs) && rs[j].Lo <= d.Offset {
			continue
		}
		out = append(out, d)
	}
	return out
}

// trimDeliveries drops the counts below next from ds (ascending). It
// reuses ds's array.
func trimDeliveries(ds []contract.DeliveryCount, next int64) []contract.DeliveryCount {
	i, _ := slices.BinarySearchFunc(ds, next, func(d contract.DeliveryCount, t int64) int { return cmp.Compare(d.Offset, t) })
	if i == len(ds) {
		return nil
	}
	return ds[i:]
}

// trimDeliveriesAbove returns the counts of ds (ascending) below end, as a
// new slice.
func trimDeliveriesAbove(ds []contract.DeliveryCount, end int64) []contract.DeliveryCount {
	i, _ := slices.BinarySearchFunc(ds, end, func(d contract.DeliveryCount, t int64) int { return cmp.Compare(d.Offset, t) })
	if i == 0 {
		return nil
	}
	return slices.Clone(ds[:i])
}
