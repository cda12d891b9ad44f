// Package groups is mmmq's pull consumer groups (consumer progress and
// redelivery, after the log-queue study): consumers fetch a topic's
// messages and acknowledge them; the broker stores each group's progress
// durably. A group is exclusive (below: one consumer at a time holds it,
// messages in offset order, cumulative acks) or shared (competing
// consumers: any number of sessions, each message leased to one of them,
// per-message acks and nacks, one message per ordering key out at a time,
// dead letters after max-deliveries; see shared.go and AcquireMode),
// fixed by its first use. The
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
// committed one is a no-op (an ack never moves the committed offset back);
// an ack from a session that lost the group is ErrSessionExpired, so a
// stale consumer never commits.
//
// An operator moves a group's committed offset with a seek
// (SeekCommitted), forwards or backwards: it is the one way a committed
// offset moves back. A seek is refused with ErrGroupBusy while a session
// holds the group, so it never races a consumer's acks; the next session
// starts at the new offset, and retention's keep-unconsumed holds from it.
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
//	POST /topics/{topic}/groups/{group}/fetch?mode=shared|exclusive
//	  mode fixes a new group's mode (409 GROUP_MODE when the other is
//	  stored); a shared group's messages carry "deliveries" and the
//	  answer "mode":"shared"
//
//	POST /topics/{topic}/groups/{group}/ack  {"offsets": [n, ...]}  (shared)
//	  → 200 {"topic","group","committed","acked","already"} once durable
//	POST /topics/{topic}/groups/{group}/nack {"offsets": [...], "retryAfter": "30s"} (shared)
//	  → 200 {"topic","group","committed","nacked","already"}
//	POST /topics/{topic}/groups/{group}/redrive {"from": n, "to": n} (admin)
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
//	GET /topics/{topic}/groups   (HEAD too)
//	  200 {"topic":"t","highWatermark":N,"startOffset":S,
//	       "groups":[{"group":"g","committed":c,"lag":l,"held":true,
//	                  "leaseExpiresInMs":ms}, ...]}
//	  groups sorted by name: those used since the broker started, and the
//	  topic's stored checkpoints that are not a dispatcher's (so groups
//	  show after a restart; a group that never committed has none).
//	  lag = N - max(c, S), never below 0: messages retention deleted
//	  before the group read them are not lag. leaseExpiresInMs (the
//	  milliseconds left on the holder's lease) only when held. Listing a
//	  group does not make it hold data for keep-unconsumed.
//
//	POST /topics/{topic}/groups/{group}/seek
//	  {"to": "earliest"}               the log start offset S
//	  {"to": "latest"}                 the high watermark N
//	  {"to": n}                        offset n, S <= n <= N
//	  {"to": {"timestamp": ms}}        the first offset whose stored
//	                                   "timestamp" (Unix ms) is >= ms (for
//	                                   a time between two messages, the
//	                                   later one); N when there is none
//	  → 200 {"topic":"t","group":"g","committed":<new>,"previous":<old>}
//	  after the fsync. A group never used before may be sought: its
//	  checkpoint is created.
//	  409 GROUP_BUSY (with Retry-After) while a session holds the group
//	  410 OFFSET_EXPIRED with "startOffset" for n < S
//	  400 BAD_REQUEST for n > N (naming the high watermark), a negative
//	  n or ms, an unknown "to" string, a body of another shape, or
//	  unknown members
//
// Errors use contract.ErrorBody {"acknowledgement":"NACK","error":"...",
// "code":"..."}: 400 BAD_REQUEST (invalid topic or group name, max, wait,
// body, missing header, a seek above the high watermark), 404 NOT_FOUND
// (unknown topic), 410 OFFSET_EXPIRED (a from= or a seek below the log
// start offset, with "startOffset"), 409 GROUP_BUSY,
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
