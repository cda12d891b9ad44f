package crashtest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
)

// finFile is a dispatcher's <topic>/checkpoints/<dispatcher>.finished as
// read from disk: records back to back, each a uint32BE body length, a
// uint32BE CRC32C of the body and the body; a body of kind 1 is a uvarint
// count and count pairs (lo, len) of finished ranges, lo after the first
// stored as the gap from the previous range's end. Read independently of
// the storage package, from its documented layout.
type finFile struct {
	Exists bool
	Raw    []byte
	// Starts holds the byte position of each valid record, in file order;
	// a torn or invalid tail ends the walk.
	Starts []int
	// Ranges are the kind-1 ranges [lo, hi), in file order.
	Ranges [][2]int64
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// readFinished reads the .finished file of each worker (absent: Exists
// false).
func readFinished(t testing.TB, root string, ks []wkey) map[wkey]finFile {
	out := map[wkey]finFile{}
	for _, k := range ks {
		data, err := os.ReadFile(filepath.Join(root, k.T, "checkpoints", k.D+".finished"))
		if os.IsNotExist(err) {
			out[k] = finFile{}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out[k] = parseFinished(data)
	}
	return out
}

func parseFinished(data []byte) finFile {
	f := finFile{Exists: true, Raw: data}
	for pos := 0; pos+8 <= len(data); {
		n := int(binary.BigEndian.Uint32(data[pos:]))
		if n < 1 || pos+8+n > len(data) {
			break
		}
		body := data[pos+8 : pos+8+n]
		if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(data[pos+4:]) {
			break
		}
		f.Starts = append(f.Starts, pos)
		pos += 8 + n
		if body[0] != 1 {
			continue // delivery counts: a shared group's
		}
		p := body[1:]
		next := func() int64 {
			v, m := binary.Uvarint(p)
			if m <= 0 {
				p = nil
				return -1
			}
			p = p[m:]
			return int64(v)
		}
		hi := int64(0)
		for i, c := int64(0), next(); i < c; i++ {
			lo, l := next(), next()
			if lo < 0 || l < 1 {
				break
			}
			if i > 0 {
				lo += hi
			}
			hi = lo + l
			f.Ranges = append(f.Ranges, [2]int64{lo, hi})
		}
	}
	return f
}

// finLossCounts is what checkFinishedKept counted over the power losses.
type finLossCounts struct {
	// Files: .finished files present when the broker was frozen; Records
	// their records; LostLast the power losses that took a file's last
	// record (allowed: its fsync may have been under way).
	Files, Records, LostLast int
}

func (c finLossCounts) String() string {
	return fmt.Sprintf("finished_files_at_power_loss=%d finished_records_at_power_loss=%d finished_last_record_lost=%d", c.Files, c.Records, c.LostLast)
}

// checkFinishedKept is check 6 of TestLazyFSPowerLossKeyOrdering: every
// record of a .finished file written before the broker was frozen
// (frozen, read then) is there after the power loss (after), byte for
// byte, except the last one. RecordFinished fsyncs each append before the
// next, so only the last one can be under way; a file created by it (its
// directory fsync under way) may be gone. A whole-file rewrite under way
// (compaction past 1 MiB, or after a failed write) would show as
// differing bytes; the files of these rounds stay far below that.
func checkFinishedKept(frozen, after map[wkey]finFile, c *finLossCounts) []string {
	var bad []string
	for k, f := range frozen {
		if !f.Exists {
			continue // removed (a commit passed every range) or never written
		}
		c.Files++
		c.Records += len(f.Starts)
		a := after[k]
		keep := 0 // the bytes that must survive: all but the last record
		if n := len(f.Starts); n > 0 {
			keep = f.Starts[n-1]
		}
		switch {
		case !bytes.HasPrefix(f.Raw, a.Raw) && !bytes.HasPrefix(a.Raw, f.Raw):
			bad = append(bad, fmt.Sprintf("check 6: %s.finished: %d bytes before the power loss, %d after, and they differ within the first %d", k, len(f.Raw), len(a.Raw), min(len(f.Raw), len(a.Raw))))
		case len(a.Raw) < keep:
			bad = append(bad, fmt.Sprintf("check 6: %s.finished lost records written before the power loss: %d records (%d bytes) when the broker was frozen, %d bytes after; only the last record (from byte %d) may be lost (file present after: %t)",
				k, len(f.Starts), len(f.Raw), len(a.Raw), keep, a.Exists))
		case len(a.Raw) < len(f.Raw):
			c.LostLast++
		}
	}
	return bad
}

// checkFinishedNotPushed is the .finished part of check 4: no run pushes
// an offset that the .finished files held when it started (finStart),
// below the log's length once it had started (hwStart: ranges past it
// are dropped at startup). n counts those offsets at or past the
// checkpoint the run started from (cpStart; below it ranges are stale).
func checkFinishedNotPushed(dels []delivery, finStart map[int]map[wkey]finFile, cpStart map[int]map[wkey]int64, hwStart map[int]map[string]int64, n *int) []string {
	for r, fs := range finStart {
		for k, f := range fs {
			hw := hwStart[r][k.T]
			seen := map[int64]bool{}
			for _, rg := range f.Ranges {
				for o := max(rg[0], cpStart[r][k]); o < min(rg[1], hw); o++ {
					seen[o] = true
				}
			}
			*n += len(seen)
		}
	}
	var bad []string
	for _, d := range dels {
		k := wkey{d.Dispatcher, d.Topic}
		if d.Offset >= hwStart[d.Round][d.Topic] {
			continue
		}
		for _, rg := range finStart[d.Round][k].Ranges {
			if d.Offset >= rg[0] && d.Offset < rg[1] {
				bad = append(bad, fmt.Sprintf("check 4: %s run %d: offset %d pushed (attempt %d), recorded finished in the .finished file when the run started (range [%d, %d))",
					k, d.Round, d.Offset, d.Attempt, rg[0], rg[1]))
				break
			}
		}
	}
	return bad
}
