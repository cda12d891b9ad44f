package storage

import (
	"bytes"
	"encoding/binary"
	"math"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/mmmq/mmmq/modules/contract"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

func TestEntryRoundTrip(t *testing.T) {
	payloads := [][]byte{
		[]byte(`{}`),
		[]byte(`""`),
		[]byte(`{"orderId":"A-1","amount":100}`),
		payload(7, 200),
		payload(8, 1<<16),
	}
	var seg []byte
	for _, p := range payloads {
		before := len(seg)
		seg = AppendEntry(seg, p)
		if got := int64(len(seg) - before); got != EntrySize(len(p)) {
			t.Fatalf("AppendEntry wrote %d bytes for %d-byte payload, EntrySize says %d", got, len(p), EntrySize(len(p)))
		}
		// Header bytes, wire format: length = 4 + len, CRC32C over the JSON.
		hdr := seg[before : before+HeaderSize]
		if l := binary.BigEndian.Uint32(hdr[0:4]); l != uint32(4+len(p)) {
			t.Fatalf("length field %d, want %d", l, 4+len(p))
		}
		if c := binary.BigEndian.Uint32(hdr[4:8]); c != Checksum(p) {
			t.Fatalf("crc field %08x, want %08x", c, Checksum(p))
		}
	}
	// Decode back to back, as recovery and ReadBatch do.
	rest := seg
	for i, p := range payloads {
		got, size, err := DecodeEntry(rest, defaultMaxRecordBytes)
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if !bytes.Equal(got, p) || size != HeaderSize+len(p) {
			t.Fatalf("entry %d: got %d bytes size %d, want %q", i, len(got), size, p)
		}
		rest = rest[size:]
	}
	if len(rest) != 0 {
		t.Fatalf("%d bytes left over", len(rest))
	}
	// Known CRC32C vector ("123456789" → e3069283), so the polynomial is
	// Castagnoli and not IEEE.
	if c := Checksum([]byte("123456789")); c != 0xe3069283 {
		t.Fatalf("Checksum(123456789) = %08x, want e3069283 (CRC32C)", c)
	}
}

func hdrWith(length int32, crc uint32) []byte {
	b := make([]byte, HeaderSize)
	binary.BigEndian.PutUint32(b[0:4], uint32(length))
	binary.BigEndian.PutUint32(b[4:8], crc)
	return b
}

func TestDecodeHeaderRejects(t *testing.T) {
	const max = 100
	tests := []struct {
		name  string
		hdr   []byte
		avail int64
		want  string // substring of the error; "" means valid
	}{
		{"short header slice", make([]byte, 7), 100, "truncated header"},
		{"avail below header", hdrWith(6, 0), 7, "truncated header"},
		{"length 0 (eight zero bytes)", make([]byte, 8), 100, "below minimum"},
		{"length 4 (empty payload)", hdrWith(4, 0), 100, "below minimum"},
		{"length 5 (1-byte payload)", hdrWith(5, 0), 100, "below minimum"},
		{"negative length", hdrWith(-1, 0), 100, "below minimum"},
		{"min int32 length", hdrWith(math.MinInt32, 0), 100, "below minimum"},
		{"length above max", hdrWith(4+max+1, 0), 1 << 30, "above maximum"},
		{"max int32 length", hdrWith(math.MaxInt32, 0), 1 << 40, "above maximum"},
		{"past end of file by one", hdrWith(4+10, 0), HeaderSize + 9, "past end"},
		{"minimum entry", hdrWith(6, 0), HeaderSize + 2, ""},
		{"maximum entry", hdrWith(4+max, 0), HeaderSize + max, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, _, err := DecodeHeader(tc.hdr, tc.avail, max)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if want := int(int32(binary.BigEndian.Uint32(tc.hdr))) - 4; n != want {
					t.Fatalf("payload length %d, want %d", n, want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestDecodeEntryRejects(t *testing.T) {
	const max = 64
	good := AppendEntry(nil, []byte(`{"a":1}`))
	flip := func(i int) []byte { b := bytes.Clone(good); b[i] ^= 0x01; return b }
	tests := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "truncated header"},
		{"header only", good[:HeaderSize], "past end"},
		{"one byte short", good[:len(good)-1], "past end"},
		{"eight zero bytes", make([]byte, 8), "below minimum"},
		{"many zero bytes", make([]byte, 4096), "below minimum"},
		{"crc field bit flip", flip(5), "crc mismatch"},
		{"payload bit flip", flip(len(good) - 1), "crc mismatch"},
		{"length grown by one", func() []byte {
			b := append(bytes.Clone(good), '}')
			binary.BigEndian.PutUint32(b, binary.BigEndian.Uint32(b)+1)
			return b
		}(), "crc mismatch"},
		{"length too large", append(hdrWith(4+max+1, 0), make([]byte, max+1)...), "above maximum"},
		{"length 0xFFFFFFFF", append(hdrWith(-1, 0), make([]byte, 16)...), "below minimum"},
		// A zero length with a zero CRC is the one header whose CRC
		// "matches" (CRC32C of nothing is 0): it must still be rejected.
		{"crc32c of empty is zero", append(hdrWith(4, Checksum(nil)), 0, 0), "below minimum"},
	}
	if Checksum(nil) != 0 {
		t.Fatalf("CRC32C of no bytes is %08x; the zero-bytes case assumes 0", Checksum(nil))
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, size, err := DecodeEntry(tc.b, max)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("DecodeEntry = %q, %d, %v; want error containing %q", p, size, err, tc.want)
			}
			if p != nil || size != 0 {
				t.Fatalf("rejected entry returned payload %q size %d", p, size)
			}
		})
	}
	// Trailing bytes after a valid entry are not part of it.
	p, size, err := DecodeEntry(append(bytes.Clone(good), 0xff, 0xff), max)
	if err != nil || size != len(good) || string(p) != `{"a":1}` {
		t.Fatalf("with trailing bytes: %q %d %v", p, size, err)
	}
}

// TestReadEntryBoundedAllocation: a garbage length field must be rejected
// before anything is allocated from it (a 2 GiB length must not cost 2 GiB).
func TestReadEntryBoundedAllocation(t *testing.T) {
	fsys := vfs.NewMem()
	data := append(hdrWith(math.MaxInt32, 0), make([]byte, 64)...)
	if err := fsys.WriteFile("seg.mmm", data, true); err != nil {
		t.Fatal(err)
	}
	f, err := fsys.Open("seg.mmm")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := &segFiles{mmm: f}
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	for i := 0; i < 100; i++ {
		for _, limit := range []int64{-1, int64(len(data))} {
			if _, err := s.readEntryAt(0, limit, defaultMaxRecordBytes); err == nil {
				t.Fatal("garbage length decoded")
			}
		}
	}
	runtime.ReadMemStats(&ms1)
	if d := ms1.TotalAlloc - ms0.TotalAlloc; d > 1<<20 {
		t.Fatalf("200 rejected reads allocated %d bytes", d)
	}
}

// FuzzDecodeEntry: decoding arbitrary bytes never panics, never returns a
// payload larger than max or outside the input (no allocation from the
// length field), agrees with the file-based reader, and every valid
// encoding round-trips.
func FuzzDecodeEntry(f *testing.F) {
	f.Add([]byte{}, uint16(64))
	f.Add(make([]byte, 8), uint16(64))
	f.Add(make([]byte, 64), uint16(64))
	f.Add(AppendEntry(nil, []byte(`{"a":1}`)), uint16(64))
	f.Add(AppendEntry(nil, []byte(`{}`)), uint16(2))
	f.Add(hdrWith(math.MaxInt32, 0), uint16(1000))
	f.Add(hdrWith(-6, 0), uint16(1000))
	f.Fuzz(func(t *testing.T, b []byte, max16 uint16) {
		max := int(max16)
		p, size, err := DecodeEntry(b, max)
		if err == nil {
			if len(p) < contract.MinPayloadBytes || len(p) > max {
				t.Fatalf("payload of %d bytes outside [%d, %d]", len(p), contract.MinPayloadBytes, max)
			}
			if size != HeaderSize+len(p) || size > len(b) {
				t.Fatalf("size %d for %d-byte payload in %d bytes", size, len(p), len(b))
			}
			if unsafe.SliceData(p) != unsafe.SliceData(b[HeaderSize:]) {
				t.Fatal("payload is not a sub-slice of the input")
			}
			if re := AppendEntry(nil, p); !bytes.Equal(re, b[:size]) {
				t.Fatalf("re-encoding differs: %x vs %x", re, b[:size])
			}
		} else if p != nil || size != 0 {
			t.Fatalf("error %v with payload %d bytes, size %d", err, len(p), size)
		}
		// The file-based reader (recovery, Read) must agree.
		if len(b) > 0 {
			fsys := vfs.NewMem()
			if werr := fsys.WriteFile("f.mmm", b, true); werr != nil {
				t.Fatal(werr)
			}
			fh, oerr := fsys.Open("f.mmm")
			if oerr != nil {
				t.Fatal(oerr)
			}
			rp, rerr := (&segFiles{mmm: fh}).readEntryAt(0, int64(len(b)), max)
			fh.Close()
			if (rerr == nil) != (err == nil) || !bytes.Equal(rp, p) {
				t.Fatalf("readEntryAt = %q, %v; DecodeEntry = %q, %v", rp, rerr, p, err)
			}
		}
		// Valid encodings of the fuzz input as a payload round-trip.
		if len(b) >= contract.MinPayloadBytes && len(b) <= max {
			enc := AppendEntry(nil, b)
			got, n, derr := DecodeEntry(enc, max)
			if derr != nil || n != len(enc) || !bytes.Equal(got, b) {
				t.Fatalf("round trip of %d bytes: %v", len(b), derr)
			}
		}
	})
}
