package jetstream

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/mmmq/mmmq/modules/contract"
)

// MaxStreamNameBytes is the longest stream name JetStream accepts (the
// server's JSMaxNameLen: streams, consumers and templates alike).
const MaxStreamNameBytes = 255

// MetaTopic is the stream metadata key that holds the topic name. Every
// stream this package creates has it; Topics reads it first, so a hashed
// name (see StreamName) still lists under its topic.
const MetaTopic = "mmmq-topic"

// MetaIncarnation is the stream metadata key that holds the topic's
// incarnation id (32 hex digits, contract.NewIncarnation), made when the
// stream is created: a topic deleted and created again has a new one.
const MetaIncarnation = "mmmq-incarnation"

// hashMark follows "<prefix>_" in a hashed stream name. A direct encoding
// never starts with '_' (that would be a topic starting with '.'), so the
// two forms cannot be confused.
const hashMark = "_h_"

// StreamName returns the stream of topic: "<prefix>_" followed by the topic
// encoded character by character:
//
//	'.'               -> "_"
//	'_'               -> "-_"
//	'-'               -> "--"
//	A-Z a-z 0-9       -> themselves
//
// so "orders.created" is stream "mmmq_orders_created", "eu-west.a_b" is
// "mmmq_eu--west_a-_b". The codes are prefix-free ('_' alone is a dot, '-'
// always starts a pair), so the encoding is reversible and distinct topics
// get distinct names (DecodeStreamName). The result has only [A-Za-z0-9_-],
// valid in a stream name (JetStream refuses whitespace, '.', '*', '>' and,
// for names that become directories, path separators).
//
// A topic is at most 249 bytes but its encoding up to twice that; when
// "<prefix>_<encoding>" would exceed MaxStreamNameBytes the name is
// "<prefix>__h_<64 hex digits of the topic's SHA-256>" instead: distinct in
// practice (a collision would need two topics with the same SHA-256), not
// reversible, so the topic is read from the stream's MetaTopic metadata.
func StreamName(prefix, topic string) string {
	var b strings.Builder
	b.Grow(len(prefix) + 1 + 2*len(topic))
	b.WriteString(prefix)
	b.WriteByte('_')
	for i := 0; i < len(topic); i++ {
		switch c := topic[i]; c {
		case '.':
			b.WriteByte('_')
		case '_':
			b.WriteString("-_")
		case '-':
			b.WriteString("--")
		default:
			b.WriteByte(c)
		}
	}
	if b.Len() <= MaxStreamNameBytes {
		return b.String()
	}
	sum := sha256.Sum256([]byte(topic))
	return prefix + "_" + hashMark + hex.EncodeToString(sum[:])
}

// DecodeStreamName returns the topic whose StreamName(prefix, ...) is name,
// and false when name is not a direct encoding of a valid topic under
// prefix: another prefix, a hashed name (hashed reports those), a code
// that the encoding never makes, or a decoded name that fails
// contract.ValidateTopic.
func DecodeStreamName(prefix, name string) (topic string, hashed, ok bool) {
	rest, found := strings.CutPrefix(name, prefix+"_")
	if !found || rest == "" {
		return "", false, false
	}
	if strings.HasPrefix(rest, hashMark) {
		h := rest[len(hashMark):]
		_, err := hex.DecodeString(h)
		return "", len(h) == 2*sha256.Size && err == nil, false
	}
	var b strings.Builder
	b.Grow(len(rest))
	for i := 0; i < len(rest); i++ {
		switch c := rest[i]; c {
		case '_':
			b.WriteByte('.')
		case '-':
			if i+1 == len(rest) || (rest[i+1] != '-' && rest[i+1] != '_') {
				return "", false, false
			}
			i++
			b.WriteByte(rest[i])
		default:
			b.WriteByte(c)
		}
	}
	topic = b.String()
	if contract.ValidateTopic(topic) != nil || StreamName(prefix, topic) != name {
		return "", false, false
	}
	return topic, false, true
}

// Subject is the one subject of topic's stream: "<prefix>.t.<topic>".
// Topic segments are valid subject tokens ([A-Za-z0-9_-]), so the topic's
// dots become token separators and distinct topics never share a subject.
func Subject(prefix, topic string) string { return prefix + ".t." + topic }
