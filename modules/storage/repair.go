package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// TmpExt marks files written through tmp + fsync + rename; a leftover one is
// from an interrupted rename and is removed by repair when the topic opens.
const TmpExt = ".tmp"

// RepairReport is what repair (the per-topic startup check run by Open)
// found in one topic and what it did (or, when checking only, would do) to
// bring it to the last state the offset index vouches for. Counts are in
// entries, sizes in bytes; the JSON field names are part of `mmmq verify
// --json` output.
type RepairReport struct {
	Topic          string   `json:"topic"`
	Segments       int      `json:"segments"`
	Entries        int64    `json:"entries"`        // the high watermark after repair
	CutIndexBytes  int64    `json:"cutIndexBytes"`  // torn or invalid trailing index bytes removed
	CutEntries     int64    `json:"cutEntries"`     // trailing index entries removed (never acknowledged)
	TruncatedBytes int64    `json:"truncatedBytes"` // segment bytes beyond the last indexed entry removed
	Removed        []string `json:"removed,omitempty"`
	Actions        []string `json:"actions,omitempty"` // one line per change, for logs and `mmmq verify`
}

// RecoveryReport is the old name of RepairReport.
//
// Deprecated: use RepairReport.
type RecoveryReport = RepairReport

// Clean reports whether repair found nothing to change.
func (r RepairReport) Clean() bool { return len(r.Actions) == 0 }

// segPlan is the repair decision for one segment, applied only when the whole
// topic is free of corruption (so a refused topic keeps its files untouched).
type segPlan struct {
	base             int64
	mmmPath, idxPath string
	mmm, idx         vfs.File
	createIdx        bool  // complete an interrupted rotation
	removeMMM        bool  // drop a lone empty file left by rotation
	removeIdx        bool  // drop a lone empty file left by rotation
	idxSize          int64 // current sizes
	mmmSize          int64
	count            int64 // index entries kept
	end              int64 // segment bytes kept
}

// repairDir runs repair of the topic in dir. With
// apply=false nothing is modified: the segments come back opened read-only
// as they would be kept (idx may be nil for a rotation to complete) and the
// report says what would be done. A missing dir returns no segments.
func repairDir(fsys vfs.FS, dir, topic string, o Options, apply bool) (segs []*segment, rep RepairReport, err error) {
	rep.Topic = topic
	ents, err := fsys.List(dir)
	if vfs.IsNotExist(err) {
		return nil, rep, nil
	}
	if err != nil {
		return nil, rep, fmt.Errorf("list topic dir %s: %w", dir, err)
	}
	log := o.Logger.With(zap.String("topic", topic))
	type pair struct{ mmm, idx bool }
	pairs := map[int64]*pair{}
	var tmps []string
	for _, e := range ents {
		if e.IsDir {
			if e.Name != CheckpointDir {
				log.Warn("ignoring unknown directory in topic", zap.String("name", e.Name))
			}
			continue
		}
		if b, ok := parseSegmentName(e.Name, SegmentExt); ok {
			p := pairs[b]
			if p == nil {
				p = &pair{}
				pairs[b] = p
			}
			p.mmm = true
			continue
		}
		if b, ok := parseSegmentName(e.Name, IndexExt); ok {
			p := pairs[b]
			if p == nil {
				p = &pair{}
				pairs[b] = p
			}
			p.idx = true
			continue
		}
		if strings.HasSuffix(e.Name, TmpExt) {
			tmps = append(tmps, e.Name)
			continue
		}
		log.Warn("ignoring unknown file in topic", zap.String("name", e.Name))
	}
	bases := make([]int64, 0, len(pairs))
	for b := range pairs {
		bases = append(bases, b)
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })

	plans := make([]*segPlan, 0, len(bases))
	closeAll := func() {
		for _, p := range plans {
			if p.mmm != nil {
				p.mmm.Close()
			}
			if p.idx != nil {
				p.idx.Close()
			}
		}
	}
	open := fsys.Open
	if apply {
		open = fsys.OpenRW
	}
	corrupt := func(file string, pos, offset int64, format string, args ...any) error {
		closeAll()
		return &CorruptionError{Topic: topic, File: file, Pos: pos, Offset: offset, Reason: fmt.Sprintf(format, args...)}
	}
	var nextBase int64 = -1
	for i, base := range bases {
		last := i == len(bases)-1
		pr := pairs[base]
		p := &segPlan{base: base}
		p.mmmPath, p.idxPath = segmentPaths(dir, base)
		plans = append(plans, p)
		if pr.mmm {
			if p.mmm, err = open(p.mmmPath); err != nil {
				closeAll()
				return nil, rep, fmt.Errorf("open segment %s: %w%s", p.mmmPath, err, fdHint(err))
			}
			if p.mmmSize, err = p.mmm.Size(); err != nil {
				closeAll()
				return nil, rep, fmt.Errorf("stat segment %s: %w", p.mmmPath, err)
			}
		}
		if pr.idx {
			if p.idx, err = open(p.idxPath); err != nil {
				closeAll()
				return nil, rep, fmt.Errorf("open index %s: %w%s", p.idxPath, err, fdHint(err))
			}
			if p.idxSize, err = p.idx.Size(); err != nil {
				closeAll()
				return nil, rep, fmt.Errorf("stat index %s: %w", p.idxPath, err)
			}
		}
		if nextBase >= 0 && base != nextBase {
			f := p.mmmPath
			if !pr.mmm {
				f = p.idxPath
			}
			return nil, rep, corrupt(f, 0, base, "segment starts at offset %d but the previous segment ends at %d", base, nextBase)
		}
		// A pair with one file missing: only a crash during rotation at the
		// tail, leaving the other file empty, is expected.
		if !pr.mmm || !pr.idx {
			switch {
			case last && !pr.idx && p.mmmSize == 0:
				p.createIdx = true
				rep.Actions = append(rep.Actions, fmt.Sprintf("complete interrupted rotation: create %s", filepath.Base(p.idxPath)))
				nextBase = base
				continue
			case last && !pr.mmm && p.idxSize == 0:
				p.removeIdx = true
				rep.Actions = append(rep.Actions, fmt.Sprintf("remove lone empty index %s left by an interrupted rotation", filepath.Base(p.idxPath)))
				continue
			case !pr.idx:
				return nil, rep, corrupt(p.mmmPath, 0, base, "offset index file %s is missing", filepath.Base(p.idxPath))
			default:
				return nil, rep, corrupt(p.idxPath, 0, base, "segment file %s is missing", filepath.Base(p.mmmPath))
			}
		}
		if err := checkSegment(p, last, o, &rep, corrupt); err != nil {
			if _, ok := err.(*CorruptionError); !ok {
				closeAll()
			}
			return nil, rep, err
		}
		nextBase = base + p.count
	}
	for _, t := range tmps {
		rep.Removed = append(rep.Removed, t)
		rep.Actions = append(rep.Actions, fmt.Sprintf("remove leftover %s", t))
	}

	// No corruption. When only checking, hand back the read-only segments
	// as they would be kept.
	if !apply {
		for _, p := range plans {
			if p.removeIdx {
				p.idx.Close()
				continue
			}
			segs = append(segs, &segment{base: p.base, mmm: p.mmm, idx: p.idx, mmmPath: p.mmmPath, idxPath: p.idxPath, size: p.end, count: p.count})
			rep.Entries = p.base + p.count
		}
		rep.Segments = len(segs)
		return segs, rep, nil
	}
	dirDirty := false
	for _, p := range plans {
		switch {
		case p.removeIdx:
			p.idx.Close()
			if err := fsys.Remove(p.idxPath); err != nil {
				closeAll()
				return nil, rep, fmt.Errorf("remove %s: %w", p.idxPath, err)
			}
			rep.Removed = append(rep.Removed, filepath.Base(p.idxPath))
			p.idx = nil
			dirDirty = true
			continue
		case p.createIdx:
			if p.idx, err = fsys.Create(p.idxPath); err != nil {
				closeAll()
				return nil, rep, fmt.Errorf("create index %s: %w", p.idxPath, err)
			}
			dirDirty = true
		}
		if p.idxSize > p.count*IndexEntrySize {
			if err := truncSync(p.idx, p.count*IndexEntrySize); err != nil {
				closeAll()
				return nil, rep, fmt.Errorf("truncate index %s: %w", p.idxPath, err)
			}
		}
		if p.mmmSize > p.end {
			if err := truncSync(p.mmm, p.end); err != nil {
				closeAll()
				return nil, rep, fmt.Errorf("truncate segment %s: %w", p.mmmPath, err)
			}
		}
		segs = append(segs, &segment{base: p.base, mmm: p.mmm, idx: p.idx, mmmPath: p.mmmPath, idxPath: p.idxPath, size: p.end, count: p.count})
	}
	for _, t := range tmps {
		if err := fsys.Remove(filepath.Join(dir, t)); err != nil && !vfs.IsNotExist(err) {
			closeAll()
			return nil, rep, fmt.Errorf("remove %s: %w", t, err)
		}
		dirDirty = true
	}
	if dirDirty {
		if err := fsys.SyncDir(dir); err != nil {
			closeAll()
			return nil, rep, fmt.Errorf("sync topic dir %s: %w", dir, err)
		}
	}
	rep.Segments = len(segs)
	if len(segs) > 0 {
		l := segs[len(segs)-1]
		rep.Entries = l.base + l.count
	}
	if !rep.Clean() {
		log.Warn("recovery changed the topic to the last state its offset index vouches for",
			zap.Strings("actions", rep.Actions), zap.Int64("cut-entries", rep.CutEntries),
			zap.Int64("truncated-bytes", rep.TruncatedBytes))
	}
	return segs, rep, nil
}

func truncSync(f vfs.File, size int64) error {
	if err := f.Truncate(size); err != nil {
		return err
	}
	return f.Sync()
}

// checkSegment decides how much of one segment to keep, index-based (no full
// scan): the index must be a plausible increasing sequence, the last kept
// entry must be complete with a valid CRC and must start where the entry
// before it ends. Only the last segment may lose a torn or invalid tail.
func checkSegment(p *segPlan, last bool, o Options, rep *RepairReport,
	corrupt func(file string, pos, offset int64, format string, args ...any) error) error {
	name := filepath.Base(p.idxPath)
	if rem := p.idxSize % IndexEntrySize; rem != 0 {
		if !last {
			return corrupt(p.idxPath, p.idxSize-rem, p.base+p.idxSize/IndexEntrySize, "sealed offset index has a torn entry (%d bytes)", rem)
		}
		rep.CutIndexBytes += rem
		rep.Actions = append(rep.Actions, fmt.Sprintf("cut torn index tail of %s: %d bytes", name, rem))
	}
	n := p.idxSize / IndexEntrySize
	pos := make([]int64, n)
	if n > 0 {
		buf := make([]byte, n*IndexEntrySize)
		if _, err := p.idx.ReadAt(buf, 0); err != nil {
			return fmt.Errorf("read index %s: %w", p.idxPath, err)
		}
		for i := range pos {
			pos[i] = int64(binary.BigEndian.Uint64(buf[i*IndexEntrySize:]))
		}
	}
	maxGap := int64(HeaderSize + MaxEntryPayload)
	plausible := func(i int) bool {
		if i == 0 {
			return pos[0] == 0
		}
		d := pos[i] - pos[i-1]
		return d >= HeaderSize+MinPayloadBytes && d <= maxGap
	}
	// Structural scan of the index alone.
	k := int64(0)
	for k < n && plausible(int(k)) {
		k++
	}
	if k < n {
		if !last {
			return corrupt(p.idxPath, k*IndexEntrySize, p.base+k, "offset index entry holds implausible position %d", pos[k])
		}
		// Invalid index entries are a torn tail only if no valid entry
		// follows them.
		floor := int64(0)
		if k > 0 {
			floor = pos[k-1] + HeaderSize + MinPayloadBytes
		}
		for j := k; j < n; j++ {
			if pos[j] >= floor && pos[j] < p.mmmSize {
				if _, err := (&segment{mmm: p.mmm}).readEntryAt(pos[j], p.mmmSize, MaxEntryPayload); err == nil {
					return corrupt(p.idxPath, k*IndexEntrySize, p.base+k,
						"offset index entry %d is invalid (position %d) but entry %d after it is valid", p.base+k, pos[k], p.base+j)
				}
			}
		}
		cut := n - k
		rep.CutEntries += cut
		rep.CutIndexBytes += cut * IndexEntrySize
		rep.Actions = append(rep.Actions, fmt.Sprintf("cut %d invalid trailing index entries of %s from offset %d (never acknowledged)", cut, name, p.base+k))
		n = k
	}
	// Walk back over trailing entries whose bytes are torn.
	seg := &segment{mmm: p.mmm}
	for n > 0 {
		at := pos[n-1]
		if at >= p.mmmSize {
			return corrupt(p.mmmPath, at, p.base+n-1, "segment is shorter (%d bytes) than its offset index says (entry at %d)", p.mmmSize, at)
		}
		payload, err := seg.readEntryAt(at, p.mmmSize, MaxEntryPayload)
		if err == nil {
			p.end = at + EntrySize(len(payload))
			break
		}
		var be *badEntry
		if !errors.As(err, &be) {
			return fmt.Errorf("read segment %s at %d: %w", p.mmmPath, at, err)
		}
		if !last {
			return corrupt(p.mmmPath, at, p.base+n-1, "last entry of a sealed segment is invalid: %s", be.reason)
		}
		rep.CutEntries++
		rep.CutIndexBytes += IndexEntrySize
		rep.Actions = append(rep.Actions, fmt.Sprintf("cut torn entry at offset %d (%s byte %d: %s; never acknowledged)", p.base+n-1, filepath.Base(p.mmmPath), at, be.reason))
		n--
	}
	// The entry before the last one must end where the last one starts.
	if n >= 2 {
		var hdr [HeaderSize]byte
		at := pos[n-2]
		if _, err := p.mmm.ReadAt(hdr[:], at); err != nil {
			return fmt.Errorf("read segment %s at %d: %w", p.mmmPath, at, err)
		}
		pl, _, err := DecodeHeader(hdr[:], p.mmmSize-at, MaxEntryPayload)
		if err != nil || at+EntrySize(pl) != pos[n-1] {
			return corrupt(p.idxPath, (n-1)*IndexEntrySize, p.base+n-1,
				"offset index entry %d (position %d) does not start where entry %d ends", p.base+n-1, pos[n-1], p.base+n-2)
		}
	}
	p.count = n
	if n == 0 {
		p.end = 0
	}
	if p.mmmSize > p.end {
		rep.TruncatedBytes += p.mmmSize - p.end
		rep.Actions = append(rep.Actions, fmt.Sprintf("truncate %s from %d to %d bytes (not indexed, never acknowledged)", filepath.Base(p.mmmPath), p.mmmSize, p.end))
	}
	return nil
}
