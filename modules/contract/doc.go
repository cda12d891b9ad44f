// Package contract holds what mmmq's modules and plugins share, so that none
// of them imports another for it, and it imports no other mmmq package:
//
//   - the stored message: its JSON shape, its encoder and decoder
//     ([EncodeMessage], [EncodeKeyedMessage], [DecodeMessage]), the
//     producer message id ([MessageID]), the ordering key ([ValidateKey],
//     [MessageKey]), the time to live ([ParseTTL], [MessageExpiresAt],
//     [Expired]), the W3C trace context ([ApplyTrace], [ValidTraceparent],
//     [ValidTracestate], [MessageTrace], [TraceDropped]) and the topic
//     name rules ([ValidateTopic]);
//   - one JSON scanner (grammar, UTF-8 and depth in one pass, no
//     allocation) used by all of the above and by batch splitting, and
//     [FindMemberCase], which finds a request body's member name that
//     encoding/json would take for a struct's member only by ignoring
//     case;
//   - the error table: error codes, sentinel errors that carry their code
//     ([NewError]), client input errors ([InputError]) and [Classify], which
//     turns any error into its HTTP status and code for the HTTP API, the
//     consumer-group routes and the line protocol alike;
//   - HTTP route registration: the [Route] interface, its value-group tag
//     and the [ProvideRoute] helper, plus the JSON error body writers;
//   - the storage-backend seam: the [Log] interface through which the topic
//     registry hands out topics, and the [Checkpoint] interface, with the
//     value types they use ([AckLevel], [Entry], [Stats]), the seam's
//     vocabulary every backend returns and everything above it tests
//     ([ErrClosed], [ErrOutOfRange], [ErrRecordTooLarge], [ErrEmptyRecord],
//     [ErrQueueFull], [CorruptionError], [ValidCheckpointName],
//     [MinPayloadBytes], [RetentionPolicy]) and the optional capabilities a
//     backend may have (capabilities.go);
//   - the topic patterns ([Pattern]) and the reserved topic prefixes
//     ([ReservedPrefixes], [Pattern.Reaches]): a pattern reaches a topic
//     under a reserved prefix only when it names the prefix (README.md,
//     "Reserved topics").
//
// The stored message keeps the original Java mmmq's shape so the data stays
// readable by both, plus mmmq's own fields:
//
//	{"topic":{"name":"order.created"},"content":<any JSON>,"id":"...","idFromProducer":true,"key":"...","timestamp":<Unix ms>,"headers":{"k":"v"}}
//
// (idFromProducer only for a producer's id, key only for a message
// published with one, headers only when there are some; README.md,
// "Stored message", lists every member.)
package contract
