package webhooks

import (
	"crypto/hmac"
	"crypto/sha256"
	"hash"
	"strconv"
	"sync"
)

// macSize is the size of an HMAC-SHA256 in bytes; sigLen the length of its
// standard base64 encoding.
const (
	macSize = sha256.Size
	sigLen  = (macSize + 2) / 3 * 4
)

// keyedMAC computes HMAC-SHA256 under one Secret. The keyed hash states are
// pooled: hmac.New hashes the key into fresh inner and outer states on every
// call, a pooled hash only restores them (Reset). Each state is used by one
// goroutine at a time, so a keyedMAC is safe for concurrent use.
type keyedMAC struct {
	secret Secret
	pool   sync.Pool // of *macState
}

// macState is one pooled hash with scratch space for the signed prefix
// ("<id>.<timestamp>.") and the sum, so a signature allocates nothing here.
type macState struct {
	h   hash.Hash
	buf []byte
	sum []byte
}

func newKeyedMAC(s Secret) *keyedMAC {
	if s.IsZero() {
		panic("webhooks: zero Secret (get one from ParseSecret)")
	}
	m := &keyedMAC{secret: s}
	m.pool.New = func() any {
		return &macState{h: hmac.New(sha256.New, s.k.b), buf: make([]byte, 0, 64), sum: make([]byte, 0, macSize)}
	}
	return m
}

// sum writes HMAC-SHA256(key, id + "." + unix + "." + body) to dst.
func (m *keyedMAC) sum(dst *[macSize]byte, id string, unix int64, body []byte) {
	st := m.pool.Get().(*macState)
	st.h.Reset()
	st.buf = append(st.buf[:0], id...)
	st.buf = append(st.buf, '.')
	st.buf = strconv.AppendInt(st.buf, unix, 10)
	st.buf = append(st.buf, '.')
	st.h.Write(st.buf)
	st.h.Write(body)
	st.sum = st.h.Sum(st.sum[:0])
	copy(dst[:], st.sum)
	if cap(st.buf) > 4096 { // an unusually long id: do not keep its buffer
		st.buf = make([]byte, 0, 64)
	}
	m.pool.Put(st)
}
