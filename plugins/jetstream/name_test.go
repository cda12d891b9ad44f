package jetstream

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mmmq/mmmq/modules/contract"
)

func TestStreamNameExamples(t *testing.T) {
	for _, tc := range []struct{ topic, stream string }{
		{"orders", "mmmq_orders"},
		{"orders.created", "mmmq_orders_created"},
		{"eu-west.a_b", "mmmq_eu--west_a-_b"},
		{"a._b", "mmmq_a_-_b"},
		{"a_.b", "mmmq_a-__b"},
		{"_", "mmmq_-_"},
		{"-.-", "mmmq_--_--"},
	} {
		assert.Equal(t, tc.stream, StreamName("mmmq", tc.topic), tc.topic)
		got, hashed, ok := DecodeStreamName("mmmq", tc.stream)
		assert.True(t, ok, tc.stream)
		assert.False(t, hashed)
		assert.Equal(t, tc.topic, got)
	}
	for _, bad := range []string{"mmmq_", "other_orders", "mmmq_a-b", "mmmq_a-", "mmmq__a", "mmmq_a__b", "mmmq_a_", "KV_mmmq-checkpoints"} {
		_, _, ok := DecodeStreamName("mmmq", bad)
		assert.False(t, ok, bad)
	}
}

// A topic whose encoding is too long gets the hashed name: at most the
// limit, different from every direct encoding, recognized as hashed.
func TestStreamNameHashFallback(t *testing.T) {
	long := strings.Repeat("a_", 124) + "b" // 249 bytes, encodes to 373
	require.NoError(t, contract.ValidateTopic(long))
	name := StreamName("mmmq", long)
	assert.True(t, strings.HasPrefix(name, "mmmq__h_"), name)
	assert.LessOrEqual(t, len(name), MaxStreamNameBytes)
	_, hashed, ok := DecodeStreamName("mmmq", name)
	assert.True(t, hashed)
	assert.False(t, ok)
	assert.NotEqual(t, name, StreamName("mmmq", strings.Repeat("a_", 124)+"c"))

	fits := strings.Repeat("a", 249) // encodes to itself: no hash
	assert.Equal(t, "mmmq_"+fits, StreamName("mmmq", fits))
}

// FuzzStreamName: every valid topic round-trips through its stream name
// (or is marked hashed), the name is a valid stream name, and two
// distinct topics never share a name.
func FuzzStreamName(f *testing.F) {
	for _, s := range []string{"a", "a.b", "a_b", "a-b", "a._b", "a_.b", "x-_.y", strings.Repeat("a_", 124) + "b"} {
		f.Add(s, s+"x")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		na, oka := checkName(t, a)
		nb, okb := checkName(t, b)
		if oka && okb && a != b && na == nb {
			t.Fatalf("topics %q and %q share stream name %q", a, b, na)
		}
	})
}

func checkName(t *testing.T, topic string) (string, bool) {
	if contract.ValidateTopic(topic) != nil {
		return "", false
	}
	name := StreamName("mmmq", topic)
	if len(name) > MaxStreamNameBytes || strings.ContainsAny(name, " \t\r\n\f.*>/\\") {
		t.Fatalf("topic %q: invalid stream name %q", topic, name)
	}
	got, hashed, ok := DecodeStreamName("mmmq", name)
	switch {
	case hashed:
		direct := len("mmmq_") + len(topic) + strings.Count(topic, "_") + strings.Count(topic, "-")
		if !strings.HasPrefix(name, "mmmq__h_") || direct <= MaxStreamNameBytes {
			t.Fatalf("topic %q: unexpected hashed name %q", topic, name)
		}
	case !ok || got != topic:
		t.Fatalf("topic %q: stream %q decodes to %q, %v", topic, name, got, ok)
	}
	return name, true
}
