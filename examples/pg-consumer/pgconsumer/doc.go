// Package pgconsumer is the core of examples/pg-consumer: a pull consumer
// that reads one topic through an mmmq consumer group and applies every
// message to PostgreSQL, deduplicating redeliveries by the topic's
// incarnation id and the log offset (the
// log-queue study's "consumer progress and redelivery" part, its
// consumer_redelivery_dedup_by_offset experiment).
//
// # The experiment
//
// Each message becomes one row of
//
//	applied(topic_incarnation text, log_offset bigint, message_id text,
//	        topic text, content jsonb, applied_at timestamptz default now(),
//	        primary key (topic_incarnation, log_offset))
//
// written with insert ... on conflict (topic_incarnation, log_offset) do
// nothing. The incarnation id is the fetch answer's "incarnation": a topic
// deleted and created again starts at offset 0 under a new one, so the
// offset alone would take its new messages for ones already applied. A
// command tag with 0 rows affected means the message was applied before: a redelivered
// duplicate, counted in skippedDuplicates. The consumer acknowledges every
// AckEvery messages (default 10), always the highest offset it has applied,
// so progress and side effects live in two stores with a window between them:
// "process first, save the position after", i.e. at-least-once. Stopping after
// 25 messages with 20 acknowledged (HaltAfter) and starting again redelivers
// offsets 20..24; the primary key absorbs them (60 rows, 60 distinct offsets,
// 5 duplicates skipped). With NoDedup the table has no key and a plain insert
// is used, the negative control: the same crash leaves 65 rows, offsets
// 20..24 applied twice.
//
// # Why a pull group and not a push endpoint
//
// The experiment is about the consumer choosing when its progress is saved:
// apply ten messages, then acknowledge the tenth. A pull group gives the
// consumer exactly that control: the broker commits only the offsets the
// consumer acknowledges with POST .../ack, and a consumer that stops between
// two acks is redelivered from the last commit. A push dispatcher
// (modules/dispatcher) commits its checkpoint after every ACK answer, one
// message at a time; a push consumer cannot "apply now, acknowledge later"
// without holding the HTTP answer open, and the dispatcher's per-attempt
// timeout, NACK-resend and backoff rules would then decide the redelivery
// instead of the experiment. Pulling also lets the consumer fetch in batches
// (-max) and bound its own pace, and the one-consumer-per-group lease
// (GROUP_BUSY) makes the restart semantics explicit: the second run waits
// until the halted one's lease is gone and starts at the committed offset.
//
// # Broker contract used
//
//	POST   /topics/{topic}/groups/{group}/fetch?max=N&wait=MS   (mmmq-session header)
//	POST   /topics/{topic}/groups/{group}/ack   {"offset": n}    → {"committed": n+1}
//	DELETE /topics/{topic}/groups/{group}/session
//
// The session id comes back in the mmmq-session response header and is sent
// on every later request of the same run. A halted run (HaltAfter) does not
// release its session, like a crashed process; the next run gets 409
// GROUP_BUSY until the broker's lease (mmmq.broker.groups.lease-timeout)
// expires, and waits for it up to BusyTimeout.
package pgconsumer
