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
// client may pipeline (see Pipelining).
//
// Only a complete line is a request. Bytes after the last "\n" when the
// connection ends (the client closes or half-closes it, is killed mid-line,
// or the connection is reset, times out or is ended by Stop) are a fragment:
// it is dropped without a reply and nothing of it is stored (a log entry at
// debug level gives its size). A client that half-closes must therefore end
// its last request with "\n" too.
//
//	request  = auth / pub / pubid / pubx / fetch / ack / ackx / nackx / status
//	auth     = "AUTH" SP token                        ; only when authentication is on, see below
//	pub      = "PUB" SP topic SP level SP payload     ; payload: message content JSON, rest of the line
//	pubid    = "PUBID" SP topic SP level SP id SP payload ; id: the producer's message id, one token
//	pubx     = "PUBX" SP topic SP level *(SP name "=" value) SP payload ; names key, id, ttl, deliver-at, delay; values percent-encoded
//	level    = "ACCEPTED" / "WRITTEN" / "DURABLE"     ; case-insensitive
//	fetch    = "FETCH" SP topic SP group SP max SP wait-ms *(SP fetch-attr)
//	fetch-attr = "from=" offset / "mode=" ("shared" / "exclusive") ; each at most once, any order
//	ack      = "ACK" SP topic SP group SP offset
//	ackx     = "ACKX" SP topic SP group SP "offsets=" offsets       ; shared groups
//	nackx    = "NACKX" SP topic SP group SP "offsets=" offsets [SP "retry-after=" delay] ; any order
//	offsets  = offset *("," offset)                 ; 1 to MaxOffsetsPerLine (10000) decimal offsets
//	delay    = duration / seconds                   ; "30s", "1m30s" (capped at 24h), or 0..86400 seconds
//	status   = "STATUS" [SP topic]
//
//	reply to AUTH    "OK AUTH" SP principal-name       ; authentication on
//	                 "OK AUTH"                         ; authentication off
//	reply to PUB     "OK" SP offset SP level           ; WRITTEN, DURABLE
//	                 "OK - ACCEPTED"                   ; ACCEPTED: the offset is not final (log-queue study), none is given
//	reply to PUBID   "OK" SP offset SP level [SP "DUPLICATE"]   ; PUBX too
//	                 "OK - ACCEPTED" [SP "DUPLICATE"]
//	reply to PUBX    "OK SCHEDULED" SP schedule-id SP deliver-at [SP "DUPLICATE"] ; deliver-at= / delay= in the future; deliver-at RFC 3339 UTC ms
//	reply to FETCH   *("MSG" SP offset SP stored-json) "END" SP count
//	                 *("MSGX" SP offset SP "deliveries=" n SP stored-json) "END" SP count ; FETCH ... mode=shared
//	reply to ACK     "ACKED" SP next                   ; next = the committed offset, after the fsync
//	reply to ACKX    "ACKED" SP committed SP "acked=" n SP "already=" m   ; after the fsync
//	reply to NACKX   "NACKED" SP committed SP "nacked=" n SP "already=" m
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
// # Idempotent publish
//
// PUBID is PUB with the producer's message id, as POST /messages with
// "id": the id is stored as the message's id with "idFromProducer":true,
// and a PUBID whose id was already published to the same topic within
// mmmq.broker.dedup.window (default 2m) stores nothing and answers the
// first message's offset followed by DUPLICATE, so a producer that lost a
// reply (a timeout, a reset connection, a broker restart) sends the same
// line again without storing the message twice. At ACCEPTED the answer is
// "OK - ACCEPTED DUPLICATE" at once (ACCEPTED promises no offset); at
// WRITTEN or DURABLE a duplicate of a message still being committed waits
// for it. The same id on two topics is two messages; a window of 0 turns
// deduplication off (every PUBID is stored). PUB is unchanged: its id is
// generated by the broker and never deduplicated.
//
// The id is one token: 1 to 256 bytes of valid UTF-8 without spaces or
// control characters; anything else is ERR BAD_REQUEST and nothing is
// stored. Ids with spaces or control characters need PUBX or the HTTP API.
//
// # Extensible publish
//
// PUBX is the publish form with named attributes, the one later
// attributes are added to (PUB and PUBID stay as they are): tokens
// <name>=<value> between the level and the payload, values
// percent-encoded (%XX for a byte; '+' is itself). key= is the message's
// ordering key (the HTTP "key" and its rule, contract.ValidateKey), id=
// the producer's id (the HTTP "id" and its rule, deduplicated as PUBID's),
// ttl= the message's time to live (the HTTP "ttl" and its rule,
// contract.ParseTTL; stored as expiresAt), deliver-at= or delay= a
// scheduled message (the HTTP "deliverAt" and "delay" and their rules,
// contract.ParseScheduleAttrs): in the future, the message goes to the
// scheduler (Options.Scheduler, fsynced before the reply) and the reply is
// "OK SCHEDULED <scheduleId> <deliverAt>", with " DUPLICATE" for an id=
// already scheduled on the topic within the dedup window; without a
// scheduler ERR NOT_IMPLEMENTED. An unknown attribute, one given twice or
// an invalid value is ERR BAD_REQUEST naming it (deliver-at= and delay=
// by these names, never the HTTP members'), and nothing is stored.
// Without attributes PUBX is PUB.
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
// # Pipelining
//
// A client may send up to mmmq.lineproto.max-pipeline lines (default 128,
// 1 to 65536) before it reads their replies. The replies come back
// strictly in line order, one per line, whatever finishes first.
//
//   - PUB, PUBID and PUBX are pipelined. Each line is checked when it is read,
//     exactly as one sent alone (authentication, permission, publish rate,
//     sizes, JSON): a refused line stores nothing and its ERR reply takes
//     its place among the replies. The valid ones of one read (see Read
//     loop) are handed to their topics' writers together at the end of the
//     read, without waiting for their ack levels: one append per run of
//     lines to one topic at one level, so lines that arrive together share
//     one group commit (one fsync for many) and one connection can fill
//     it. One connection's PUBs to a topic are queued in line order and get
//     offsets in line order (between connections there is no order). The
//     replies are written as the ack levels are reached: every reply that
//     is ready, in line order, goes out in one write. A run refused as a
//     whole before anything was queued (a stored message over the log's
//     record limit, a full queue) is handed out again line by line, so
//     each line gets the answer it would get alone.
//   - Every other request (AUTH, FETCH, ACK, ACKX, NACKX, STATUS, an unknown command) is
//     a barrier: it runs once every earlier line is answered, as it would
//     if sent alone. STATUS counts the PUBs before it; FETCH delivers them
//     once durable (a DURABLE PUB's message is when it is answered).
//   - At the bound: while max-pipeline lines are unanswered, the server
//     reads nothing more from the connection until the oldest is answered;
//     the client's writes then block (TCP flow control). Nothing is refused
//     or dropped because of the bound. A PUB or PUBID at WRITTEN or DURABLE
//     also holds its stored message's bytes in the broker's in-flight memory
//     budget (mmmq.broker.memory.max-inflight-bytes) until its ack level is
//     reached; when they do not fit, the connection is not read until one
//     of its own earlier PUBs completes (one with none unanswered goes ahead,
//     as a PUB sent alone always did).
//   - A PUBID whose id an earlier line is still committing waits for it
//     before the next line is read, and is then answered DUPLICATE with
//     that line's offset.
//   - A line that closes the connection (a line over max-line-bytes, ERR
//     UNAUTHORIZED) is answered after every earlier line; nothing after it
//     runs.
//   - Each PUB has 30 s from when it is read to reach its ack level (ERR
//     TIMEOUT, outcome unknown). Stop answers every line already read.
//   - max-pipeline 1 answers each line before the next one is read.
//
// Example (nc -N sends the lines at once and closes after the replies):
//
//	$ printf '%s\n' 'PUB t DURABLE {"n":1}' 'PUB t DURABLE {"n":2' 'PUB t DURABLE {"n":3}' 'STATUS t' | nc -N localhost 7070
//	OK 0 DURABLE
//	ERR BAD_REQUEST payload is not valid JSON; usage: PUB <topic> <ACCEPTED|WRITTEN|DURABLE> <payload JSON>
//	OK 1 DURABLE
//	TOPIC t next=2 segments=1 bytes=200 start=0 incarnation=5c1e0a7d9b3f4e21a0c6d2f84b97e310
//	END 1
//
// # Read loop
//
// Each connection is served in the shape of nats-server's client read
// loop: one read takes whatever has arrived into the connection's read
// buffer, every complete line in it is served in order, the read's PUBs
// are handed out together (Pipelining), and a second goroutine, the
// flusher, writes every reply that is ready in one write. A connection
// therefore costs one read and one write per batch of lines, not per line,
// and a topic's group commit wakes each connection waiting on it once:
// the completion of a connection's append wakes its flusher only when it
// makes the oldest unanswered line ready.
//
//   - The read buffer starts at 512 bytes. A read that fills it doubles it,
//     up to 64 KiB (many short lines at once); four reads in a row that
//     fill less than half of it halve it again.
//   - A line longer than the buffer grows it, doubling, up to
//     max-line-bytes plus its line end; once that line is served the
//     buffer goes back to 512 bytes, so a connection holds a large buffer
//     only while a large line is in it.
//   - The bytes after the last "\n" of a read wait for the next read; a
//     line split across any number of reads is served once it is complete.
//   - Barrier replies (FETCH, ACK, ACKX, NACKX, STATUS, AUTH, errors of unknown
//     commands) are written by the reader itself once every earlier reply
//     is out; a FETCH reply longer than 32 KiB is written while it is
//     built.
//
// # Sessions
//
// A connection is a consumer session (as in the log-queue study): its first FETCH of an
// exclusive group (the default mode; see Shared groups for the other)
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
// # Shared groups
//
// A consumer group has a mode, fixed by its first use (stored durably):
// exclusive (the default; Sessions above) or shared (competing consumers:
// any number of connections fetch it at once, each message is leased to
// one of them and acknowledged on its own). The modes are the HTTP API's
// (mode= of its fetch), on the same groups.
//
//   - FETCH ... mode=shared on a connection's first FETCH of a group makes
//     a group not used yet shared, or joins a shared one; mode=exclusive
//     likewise; without mode= a FETCH joins the group as it is (a new
//     group is shared when its name matches mmmq.broker.groups.shared).
//     The other mode than the group's is ERR GROUP_MODE, also on a later
//     FETCH whose mode= differs from what the connection was answered.
//   - A FETCH that says mode=shared is answered with MSGX lines, which
//     add deliveries=<n>: how many times the message has been handed
//     out, this one included (1 the first time; more after a NACKX, a
//     lease expiry or a closed connection). Any other FETCH gets MSG lines
//     as before, so a client that never sends mode= reads a shared group
//     (configured by a glob) unchanged, without the count.
//   - A message is leased to one connection until its lease ends
//     (mmmq.broker.groups.lease-timeout, renewed by its FETCH, ACKX and
//     NACKX) or it closes; its unacknowledged messages are then handed
//     out again, to any connection.
//   - A message with an ordering key (PUBX key=) is handed out only once
//     every earlier message of its key is finished, so per-key order holds
//     across connections; other messages go on meanwhile.
//   - ACKX finishes its offsets durably, then answers the group's
//     committed offset (the contiguous prefix of finished messages), how
//     many offsets the line finished and how many were finished before (a
//     repeat; an offset repeated in the line counts once). NACKX gives its
//     offsets back unfinished, handed out again at once or no sooner than
//     retry-after. Either refuses the whole line with ERR NOT_DELIVERED
//     naming the offsets not leased to this connection (never handed to
//     it, or its lease ended and they went to another one); on a
//     connection that has not fetched the group, ERR NOT_DELIVERED too.
//   - After mmmq.broker.groups.max-deliveries deliveries (default 4; 0
//     never) a message goes to the topic dead-letter.<group> (or the one
//     of mmmq.broker.groups.dead-letter-topics) instead of being handed
//     out again; the HTTP redrive publishes it back.
//   - ACK or FETCH from= of a shared group, and ACKX or NACKX of an
//     exclusive one, are ERR GROUP_MODE.
//   - Values are percent-encoded as PUBX's. An unknown attribute, one
//     given twice, an empty list or element, anything but decimal digits
//     in an offset, more than MaxOffsetsPerLine offsets, or a bad
//     retry-after is ERR BAD_REQUEST, and nothing is acknowledged.
//
// # Authentication
//
// Authentication is on when the application has an Authenticator (the auth
// module, mmmq.auth.tokens) and it is Enabled (at least one token entry).
// Without one, or with no tokens, nothing below applies and the protocol is
// open, as before authentication existed.
//
// The first line of a connection must then be "AUTH <token>" (the rest of
// the line, surrounding spaces trimmed), answered "OK AUTH <name>" with the
// token entry's name. Anything else first, or an unknown token, is
// answered "ERR UNAUTHORIZED <text>" and the connection is closed; nothing
// pipelined after it runs. An unknown token is answered only after a fixed
// delay (Options.AuthFailureDelay, 200 ms), so guessing tokens costs a
// connection slot and time per guess; a connection that has not
// authenticated within 10 s (Options.AuthTimeout) is closed.
//
// On a TLS connection with a verified client certificate, a certificate
// whose subject common name is a token entry's client-cn authenticates the
// connection without AUTH: its first request is simply run as that
// principal. AUTH as the first line is judged by its token even then (an
// unknown token is refused, as over HTTP).
//
//   - AUTH while authentication is off: "OK AUTH" without a name, the token
//     not looked at, so a client configured with a token works against a
//     broker without tokens.
//   - A second AUTH on an authenticated connection is refused ("ERR
//     BAD_REQUEST already authenticated as <name>"; its token is not looked
//     at) and the connection keeps its principal: open a new connection to
//     use another token.
//   - The credentials are looked up again before every request, so a token
//     (or client-cn) removed by a reload of the token list ends the
//     connections that use it at their next request (ERR UNAUTHORIZED, then
//     closed), and changed permissions apply at once. Authentication turned
//     off by a reload lets every request through; turned on, every
//     connection without a principal (opened while it was off, or
//     authenticated before it was turned off) must send AUTH before its
//     next request.
//   - The token is never echoed or logged. Once authenticated, an unknown
//     command word is not echoed either (it may be a token sent by mistake).
//
// Every request is checked against the principal's permissions
// (contract.Authorize):
//
//	command                   action    topic, group
//	PUB, PUBID, PUBX          publish   its topic (then the publish rate)
//	FETCH (from= too)         consume   its topic, as its group
//	ACK, ACKX, NACKX          consume   its topic, as its group
//	STATUS <topic>            read      the topic
//	STATUS                    read      lists only the topics the principal may read (never refused)
//
// A refused request is answered "ERR FORBIDDEN <action> <topic> <text>" and
// the connection stays open; nothing is stored, taken or moved. The
// request's arguments are checked first (ERR BAD_REQUEST), so FORBIDDEN
// only names valid topics; STATUS <topic> is FORBIDDEN before NOT_FOUND, so
// it does not tell whether a topic exists.
//
// Limits per principal (contract.Limiter, a token entry's max-connections
// and publish-rate): a connection over max-connections is answered "ERR
// RATE_LIMITED <retry-after-seconds> <text>" to its AUTH (or first request)
// and closed; its slot is given back when it closes. A PUB or PUBID over
// the publish rate is answered "ERR RATE_LIMITED <retry-after-seconds>
// <text>", stores nothing, and the connection stays open. The seconds are
// rounded up, at least 1.
//
// Refused authentication, FORBIDDEN and RATE_LIMITED are logged at info
// level on the logger named "audit" with the principal (when known), the
// command word (AUTH, PUB, PUBID, PUBX, FETCH, ACK, ACKX, NACKX, STATUS, or "unknown": never
// the word itself), action, topic, group, remote address, code and reason;
// never the token.
//
// # Error codes
//
// The codes are the HTTP API's (one table for both, contract.Classify):
//
//	TOO_LARGE        line over max-line-bytes (the connection is then closed),
//	                 or payload / stored message over max-record-bytes
//	GROUP_BUSY       another consumer holds the group (log-queue study)
//	NOT_DELIVERED    ACK of an offset not delivered to this connection (log-queue study);
//	                 ACKX or NACKX of an offset not leased to it
//	GROUP_MODE       the other consumer-group mode than the group's (see Shared
//	                 groups; HTTP 409)
//	BAD_REQUEST      unknown command, wrong arguments, invalid topic or group
//	                 name, invalid PUBID id, payload not JSON, empty line, a
//	                 second AUTH
//	NO_SPACE         free space under mmmq.broker.storage.min-free-bytes (the
//	                 disk guard; HTTP 507): nothing stored, retry later
//	TOPIC_FAILED     a write or fsync of the topic failed, cause named (ENOSPC,
//	                 EIO, …; HTTP 503): refused until POST /topics/{t}/reopen
//	TIMEOUT          PUB or PUBID did not reach its ack level within 30 s
//	                 (outcome unknown: send the PUBID again)
//	TOO_MANY_TOPICS  a new topic over mmmq.broker.storage.max-topics
//	TOO_MANY_GROUPS  a new group over the consumer-group cap
//	UNAVAILABLE      storage failure (read error, queue full), shutting
//	                 down, too many connections
//	NOT_FOUND        FETCH or STATUS of a topic that does not exist (mmmq)
//	OFFSET_EXPIRED   FETCH from= below the topic's log start offset: retention
//	                 deleted it; the text names the start offset (HTTP 410)
//	SESSION_EXPIRED  the connection's lease on the group expired (mmmq)
//	NAME_TAKEN       the group name is a dispatcher name (mmmq)
//	UNAUTHORIZED     no AUTH first, unknown token or client certificate, or
//	                 credentials removed by a reload (the connection is then closed)
//	FORBIDDEN        the principal may not do the command's action on its
//	                 topic (or as its group): "ERR FORBIDDEN <action> <topic> <text>"
//	RATE_LIMITED     over the principal's max-connections (then closed) or
//	                 publish-rate: "ERR RATE_LIMITED <retry-after-seconds> <text>"
//	OVERLOADED       the in-flight memory budget (mmmq.broker.memory.max-inflight-bytes)
//	                 cannot hold one message of a FETCH, or a PUB(ID) ACCEPTED; nothing
//	                 was delivered or stored: retry shortly (mmmq)
//
// # Limits
//
//	line length      mmmq.lineproto.max-line-bytes (default 1114112) without the
//	                 line end; the server holds at most that much of a line (plus
//	                 3 bytes), so memory per connection stays bounded; over it:
//	                 ERR TOO_LARGE, then the connection is closed
//	payload          mmmq.broker.segment.max-record-bytes (default 1 MiB)
//	connections      1024 at a time; more get ERR UNAVAILABLE and are closed
//	idle             a connection without a request for 5 minutes is closed
//	                 (a FETCH wait is not idle time)
//	authentication   10 s for the first line while authentication is on;
//	                 an unknown token is answered after 200 ms
//	reply write      30 s per write of replies, else the connection is closed
//	pipeline         mmmq.lineproto.max-pipeline (default 128) lines unanswered;
//	                 at the bound the connection is not read until the oldest
//	                 is answered (see Pipelining)
//	PUB wait         30 s for the ack level (PUB and PUBID), then ERR TIMEOUT
//	                 (outcome unknown)
//	PUBID id         1 to 256 bytes of UTF-8, no spaces or control characters
//	FETCH            max capped at mmmq.broker.groups.max-fetch and about 16 MiB
//	                 of payload; wait-ms capped at 30000; fewer messages when the
//	                 broker-wide mmmq.broker.memory.max-inflight-bytes cannot hold them
//	ACKX, NACKX      1 to MaxOffsetsPerLine (10000) offsets per line; retry-after
//	                 at most 86400 seconds, or a duration capped at 24h
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
//	PUBID order.created DURABLE order-44 {"orderId":44}
//	OK 2 DURABLE
//	PUBID order.created DURABLE order-44 {"orderId":44}
//	OK 2 DURABLE DUPLICATE
//	FETCH order.created billing 10 500
//	MSG 0 {"topic":{"name":"order.created"},"content":{"orderId":42},"id":"9f0c2a1b7e4d3c56-1","timestamp":1767225600000}
//	MSG 1 {"topic":{"name":"order.created"},"content":{"orderId":43},"id":"9f0c2a1b7e4d3c56-2","timestamp":1767225600004}
//	MSG 2 {"topic":{"name":"order.created"},"content":{"orderId":44},"id":"order-44","idFromProducer":true,"timestamp":1767225600009}
//	END 3
//	ACK order.created billing 0
//	ACKED 1
//	ACK order.created billing 5
//	ERR NOT_DELIVERED groups: offset not delivered: offset 5 of topic order.created was not delivered to this session of group billing (delivered up to 3, exclusive)
//	STATUS
//	TOPIC order.created next=3 segments=1 bytes=369 start=0 incarnation=5c1e0a7d9b3f4e21a0c6d2f84b97e310
//	GROUP order.created billing committed=1 held=true
//	END 1
//
// Stop closes the listener, ends FETCH waits, lets each connection finish
// the lines it already read (every pipelined PUB gets its real reply) but
// read no more, releases the groups and waits for the handlers.
package lineproto
