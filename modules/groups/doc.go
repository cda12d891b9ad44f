// Package groups is mmmq's pull consumer groups (consumer progress and
// redelivery, after the log-queue study): consumers fetch a topic's
// messages in offset order and acknowledge them; the broker stores each
// group's progress durably and lets one consumer at a time hold a group. The
// Coordinator is shared by the HTTP routes of this package and the TCP line
// protocol (plugins/lineproto). It works without Fx; fx.go wires it.
//
// # State and rules
//
// Per (topic, group):
//
//   - committed offset: the next offset the group has not acknowledged,
//     stored in <root>/<topic>/checkpoints/<group>.checkpoint (the
//     dispatchers' checkpoint file, 8 bytes big-endian, fsynced per
//     commit). A group that never committed starts at 0. A group name that
//     is also a dispatcher name is refused (ErrNameTaken): both would
//     write the same file.
//   - one session at a time (a second consumer gets GROUP_BUSY): a
//     session is an opaque 32-hex-digit id with a lease of
//     mmmq.broker.groups.lease-timeout (default 30s), renewed by every fetch
//     and ack; a fetch that is waiting holds it. An expired lease is released
//     lazily by the next request on the group and by a janitor (every
//     lease/4, 10ms..5s).
//   - the session's delivered-up-to offset: a fetch returns entries from
//     there, below the high watermark (only durable entries are visible),
//     and moves it forward. A new session starts at the committed offset,
//     so what an earlier session fetched and did not acknowledge is
//     delivered again: at-least-once.
//
// Ack(offset) commits offset+1 and answers only after the fsync. An offset
// the session was not delivered is ErrNotDelivered; an offset below the
// committed one is a no-op (the committed offset never moves back); an ack
// from a session that lost the group is ErrSessionExpired, so a stale
// consumer never commits.
//
// Corrupt entries (CRC mismatch at read time) are skipped one offset at a
// time with an error log, as the dispatcher does (the original Java mmmq's
// integrity check: log and skip the corrupt entry):
// the consumer never sees that offset and a later ack commits past it.
//
// # HTTP
//
// The session travels in the header mmmq-session (SessionHeader).
//
//	POST /topics/{topic}/groups/{group}/fetch?max=N&wait=MS
//	  max   1.. (default 100, above mmmq.broker.groups.max-fetch capped)
//	  wait  milliseconds 0.. (default 0; above 30000 capped)
//	  without mmmq-session: starts a session (409 GROUP_BUSY if another
//	  live session holds the group); with it: continues that session
//	  (409 SESSION_EXPIRED if it no longer holds the group).
//	  200 mmmq-session: <id>
//	      {"topic":"t","group":"g","session":"<id>",
//	       "messages":[{"offset":0,"message":<stored message JSON>}, ...],
//	       "committed":0,"next":1}
//	  The topic is never created: 404 NOT_FOUND when it does not exist.
//
//	POST /topics/{topic}/groups/{group}/ack   mmmq-session: <id>
//	  {"offset": n}  → 200 {"topic":"t","group":"g","committed": n+1} after the fsync
//	  409 NOT_DELIVERED   n was not delivered to this session
//	  409 SESSION_EXPIRED the session does not hold the group
//	  an n below the committed offset answers the unchanged committed offset
//
//	DELETE /topics/{topic}/groups/{group}/session   mmmq-session: <id>
//	  200 {"topic":"t","group":"g","released":true|false,"committed":c}
//	  the next session starts at the committed offset
//
// Errors use contract.ErrorBody {"acknowledgement":"NACK","error":"...",
// "code":"..."}: 400 BAD_REQUEST (invalid topic or group name, max, wait,
// body, missing header), 404 NOT_FOUND (unknown topic), 409 GROUP_BUSY,
// NOT_DELIVERED, SESSION_EXPIRED, NAME_TAKEN (group named like a
// dispatcher), 503 UNAVAILABLE (I/O or fsync error, topic closing), 507
// NO_SPACE, 503 OVERLOADED with Retry-After (the broker-wide in-flight
// memory budget, mmmq.broker.memory.max-inflight-bytes, cannot hold even
// one message: nothing delivered, the session did not move). A fetch the
// budget cannot hold whole returns fewer messages (at least one).
//
// An expired session gets SESSION_EXPIRED rather than GROUP_BUSY because the
// client's remedy differs: drop the header and fetch again (a new session,
// redelivery from the committed offset), whereas GROUP_BUSY means another
// consumer is active and retrying later is the remedy.
package groups
