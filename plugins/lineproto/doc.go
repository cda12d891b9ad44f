// Package lineproto is the optional TCP line protocol of the log-queue study
// ("a TCP text protocol of one request per line"), extended with a topic. It
// is off by
// default; mmmq.lineproto.addr turns it on. It publishes through the same
// topic registry and message encoder as the HTTP API (contract.EncodeMessage),
// so dispatchers and consumer groups deliver the same stored message JSON,
// and consumes through the shared consumer-group coordinator (modules/groups).
//
// # Grammar
//
// One request per line, one reply per request (a reply may span several
// lines and then ends with an END line). Lines end with "\n" ("\r\n" is
// accepted). Tokens are separated by single spaces; the command word is
// case-insensitive. Requests on one connection are answered in order; a
// client may pipeline.
//
// Only a complete line is a request. Bytes after the last "\n" when the
// connection ends (the client closes or half-closes it, is killed mid-line,
// or the connection is reset, times out or is ended by Stop) are a fragment:
// it is dropped without a reply and nothing of it is stored (a log entry at
// debug level gives its size). A client that half-closes must therefore end
// its last request with "\n" too.
//
//	request  = pub / fetch / ack / status
//	pub      = "PUB" SP topic SP level SP payload     ; payload: message content JSON, rest of the line
//	level    = "ACCEPTED" / "WRITTEN" / "DURABLE"     ; case-insensitive
//	fetch    = "FETCH" SP topic SP group SP max SP wait-ms [SP "from=" offset]
//	ack      = "ACK" SP topic SP group SP offset
//	status   = "STATUS" [SP topic]
//
//	reply to PUB     "OK" SP offset SP level           ; WRITTEN, DURABLE
//	                 "OK - ACCEPTED"                   ; ACCEPTED: the offset is not final (log-queue study), none is given
//	reply to FETCH   *("MSG" SP offset SP stored-json) "END" SP count
//	reply to ACK     "ACKED" SP next                   ; next = the committed offset, after the fsync
//	reply to STATUS  *("TOPIC" SP name SP "next=" hw SP "segments=" n SP "bytes=" b
//	                   SP "start=" log-start-offset SP "incarnation=" (id / "-")
//	                   *("GROUP" SP name SP group SP "committed=" c SP "held=" ("true"/"false")))
//	                 "END" SP count-of-topics
//	any error        "ERR" SP code SP text
//
// The payload of PUB is the content (any JSON value, on one line); the
// stored message is {"topic":{"name":...},"content":<payload>,"id":...,
// "timestamp":...} exactly as POST /messages stores it, and that stored
// JSON (always one line) is what MSG carries. PUB creates the topic on its
// first message, as HTTP publishing does; FETCH never creates a topic.
//
// FETCH returns up to max messages (capped at mmmq.broker.groups.max-fetch)
// from the group's position, waiting up to wait-ms (capped at 30000) when
// there is nothing yet; after the wait it answers "END 0" (the log-queue study: an empty
// fetch returns 0 messages after the wait). END was added to the log-queue study's
// protocol so clients know where a FETCH or STATUS reply stops. GROUP lines
// list the groups used since the broker started.
//
// FETCH with from= first moves the session's position to that offset, as
// the HTTP fetch's from= does: to take again what a lost reply carried, it
// must lie between the group's committed offset and what this session was
// delivered; below the topic's log start offset (deleted by retention) it
// is ERR OFFSET_EXPIRED naming the start offset. STATUS gives each topic's
// log start offset and its incarnation id (new when a deleted topic is
// created again; "-" for a topic that has none).
//
// # Sessions
//
// A connection is a consumer session (as in the log-queue study): its first FETCH of a group
// takes the group (ERR GROUP_BUSY while another connection or HTTP session
// holds it), and it keeps it while it fetches or acks within
// mmmq.broker.groups.lease-timeout (default 30s). ACK commits offset+1
// durably and answers after the fsync; an offset not delivered on this
// connection is ERR NOT_DELIVERED; an offset below the committed one is
// answered with the unchanged committed offset (it never moves back).
// Closing the connection releases its groups: the next consumer starts at
// the committed offset, so unacknowledged messages are redelivered
// (at-least-once). A connection whose lease expired gets ERR
// SESSION_EXPIRED once (for FETCH or ACK) and its next FETCH starts a new
// session from the committed offset.
//
// # Error codes
//
// The codes are the HTTP API's (one table for both, contract.Classify):
//
//	TOO_LARGE        line over max-line-bytes (the connection is then closed),
//	                 or payload / stored message over max-record-bytes
//	GROUP_BUSY       another consumer holds the group (log-queue study)
//	NOT_DELIVERED    ACK of an offset not delivered to this connection (log-queue study)
//	BAD_REQUEST      unknown command, wrong arguments, invalid topic or group
//	                 name, payload not JSON, empty line
//	NO_SPACE         free space under mmmq.broker.storage.min-free-bytes (the
//	                 disk guard; HTTP 507): nothing stored, retry later
//	TOPIC_FAILED     a write or fsync of the topic failed, cause named (ENOSPC,
//	                 EIO, …; HTTP 503): refused until POST /topics/{t}/reopen
//	TIMEOUT          PUB did not reach its ack level within 30 s (outcome unknown)
//	TOO_MANY_TOPICS  a new topic over mmmq.broker.storage.max-topics
//	TOO_MANY_GROUPS  a new group over the consumer-group cap
//	UNAVAILABLE      storage failure (read error, queue full), shutting
//	                 down, too many connections
//	NOT_FOUND        FETCH or STATUS of a topic that does not exist (mmmq)
//	OFFSET_EXPIRED   FETCH from= below the topic's log start offset: retention
//	                 deleted it; the text names the start offset (HTTP 410)
//	SESSION_EXPIRED  the connection's lease on the group expired (mmmq)
//	NAME_TAKEN       the group name is a dispatcher name (mmmq)
//	OVERLOADED       the in-flight memory budget (mmmq.broker.memory.max-inflight-bytes)
//	                 cannot hold one message of a FETCH, or a PUB ACCEPTED; nothing
//	                 was delivered or stored: retry shortly (mmmq)
//
// # Limits
//
//	line length      mmmq.lineproto.max-line-bytes (default 1114112) without the
//	                 line end; the server reads at most that much of a line, so
//	                 memory per connection stays bounded; over it: ERR TOO_LARGE,
//	                 then the connection is closed
//	payload          mmmq.broker.segment.max-record-bytes (default 1 MiB)
//	connections      1024 at a time; more get ERR UNAVAILABLE and are closed
//	idle             a connection without a request for 5 minutes is closed
//	                 (a FETCH wait is not idle time)
//	reply write      30 s per reply, else the connection is closed
//	PUB wait         30 s for the ack level, then ERR TIMEOUT (outcome unknown)
//	FETCH            max capped at mmmq.broker.groups.max-fetch and about 16 MiB
//	                 of payload; wait-ms capped at 30000; fewer messages when the
//	                 broker-wide mmmq.broker.memory.max-inflight-bytes cannot hold them
//
// A connection is not read while it waits in FETCH: a client that closes
// during the wait is noticed when the wait ends.
//
// # Example
//
//	$ nc localhost 7070
//	PUB order.created DURABLE {"orderId":42}
//	OK 0 DURABLE
//	PUB order.created ACCEPTED {"orderId":43}
//	OK - ACCEPTED
//	FETCH order.created billing 10 500
//	MSG 0 {"topic":{"name":"order.created"},"content":{"orderId":42},"id":"9f0c2a1b7e4d3c56-1","timestamp":1767225600000}
//	MSG 1 {"topic":{"name":"order.created"},"content":{"orderId":43},"id":"9f0c2a1b7e4d3c56-2","timestamp":1767225600004}
//	END 2
//	ACK order.created billing 0
//	ACKED 1
//	ACK order.created billing 5
//	ERR NOT_DELIVERED groups: offset not delivered: offset 5 of topic order.created was not delivered to this session of group billing (delivered up to 2, exclusive)
//	STATUS
//	TOPIC order.created next=2 segments=1 bytes=262 start=0 incarnation=5c1e0a7d9b3f4e21a0c6d2f84b97e310
//	GROUP order.created billing committed=1 held=true
//	END 1
//
// Stop closes the listener, ends FETCH waits, lets each connection finish
// the request in progress (a PUB is answered), releases the groups and
// waits for the handlers.
package lineproto
