// Package offbits is a compact set of offsets past a checkpoint, one bit
// each, shared by the dispatcher's key-ordered workers and the shared
// consumer groups.
package offbits

import "math/bits"

// Set is a set of offsets from a base on, one bit each: a worker's or
// consumer group's finished offsets past its checkpoint. Every offset below
// the base counts as set. The zero value is the empty set from 0. Not safe
// for concurrent use.
type Set struct {
	base  int64 // offset of bit 0 of words[0], a multiple of 64
	words []uint64
}

// Reset empties the set and makes off its base (rounded down to a
// multiple of 64).
func (b *Set) Reset(off int64) {
	b.base = off &^ 63
	b.words = b.words[:0]
}

// Set adds off (nothing below the base).
func (b *Set) Set(off int64) {
	if off < b.base {
		return
	}
	i := off - b.base
	wi := int(i >> 6)
	for len(b.words) <= wi {
		b.words = append(b.words, 0)
	}
	b.words[wi] |= 1 << uint(i&63)
}

// Has reports whether off is in the set; every offset below the base is.
func (b *Set) Has(off int64) bool {
	if off < b.base {
		return true // below base everything is finished
	}
	i := off - b.base
	wi := int(i >> 6)
	return wi < len(b.words) && b.words[wi]&(1<<uint(i&63)) != 0
}

// SetRange adds the offsets [lo, hi).
func (b *Set) SetRange(lo, hi int64) {
	for o := max(lo, b.base); o < hi; {
		if o&63 == 0 && hi-o >= 64 {
			wi := int((o - b.base) >> 6)
			for len(b.words) <= wi {
				b.words = append(b.words, 0)
			}
			b.words[wi] = ^uint64(0)
			o += 64
			continue
		}
		b.Set(o)
		o++
	}
}

// FirstUnset is the first offset at or past from whose bit is not set.
func (b *Set) FirstUnset(from int64) int64 {
	from = max(from, b.base)
	i := from - b.base
	for wi := int(i >> 6); wi < len(b.words); wi++ {
		word := b.words[wi]
		if wi == int(i>>6) {
			word |= (1 << uint(i&63)) - 1 // bits below from count as set
		}
		if word != ^uint64(0) {
			return b.base + int64(wi)<<6 + int64(bits.TrailingZeros64(^word))
		}
	}
	return max(from, b.base+int64(len(b.words))<<6)
}

// Drop forgets the bits below off (every one of them is set).
func (b *Set) Drop(off int64) {
	k := int((off - b.base) >> 6)
	if k <= 0 || k < 64 && 2*k < len(b.words) {
		return // moved in bulk, not per commit
	}
	if k >= len(b.words) {
		b.words = b.words[:0]
	} else {
		n := copy(b.words, b.words[k:])
		b.words = b.words[:n]
	}
	b.base += int64(k) << 6
}

// Base is the offset of the set's first bit: everything below it is set.
func (b *Set) Base() int64 { return b.base }

// Words is the number of 64-bit words the set holds (its memory, 8 bytes
// each).
func (b *Set) Words() int { return len(b.words) }

// Clear removes off (nothing below the base: those stay set).
func (b *Set) Clear(off int64) {
	if off < b.base {
		return
	}
	i := off - b.base
	if wi := int(i >> 6); wi < len(b.words) {
		b.words[wi] &^= 1 << uint(i&63)
	}
}
