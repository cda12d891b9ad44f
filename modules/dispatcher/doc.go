// Package dispatcher pushes every message of the topics a Dispatcher
// subscribes to over HTTP to that dispatcher's consumer, one worker per
// (dispatcher, topic), with a durable per-dispatcher checkpoint committed
// strictly in offset order (the Dispatcher of the original Java mmmq, with
// the semantics below). By default a worker has one message in flight, so
// the consumer also sees the messages in offset order.
//
// The pieces:
//
//	Pattern               topic patterns (order.*, news.**): '*' one segment, '**' zero or more
//	Dispatcher            name + consumer Host + patterns + per-dispatcher options (settings.go)
//	Set                   the dispatchers of the value group `group:"dispatchers"`, sorted by name
//	Sender, HTTPSender    one push: POST the stored message (or a batch), read the answer
//	Manager               subscribes to a Source of topics and runs the workers
//	Publisher             appends dead letters and redriven messages durably
//
// Worker loop (the original Java mmmq's "retries and exponential backoff" and
// "commit point and fsync" rules; loop.go):
//
//	next := checkpoint.Offset()
//	loop:
//	  read ahead into the window (wait for data with Topic.Notify, never polling)
//	  commit the contiguous prefix of finished messages (fsync), then
//	  push ready messages, up to MaxInFlight pushes (default 1), one message
//	  or a Batch each, each first waiting (held, not blocking the loop) for
//	  its rate-limit tokens when the dispatcher has a RateLimit (one token
//	  bucket per dispatcher; ratelimit.go); on each answer, per message:
//	    ACK  → finished
//	    NACK → resend, at most MaxResends (3) times, then append it to the
//	           dead-letter topic (durably), then finished; with dead letters
//	           off, log it, then finished
//	    abnormal (transport error, timeout, 3xx, 5xx, other body; AckMode
//	    decides 4xx and bodies) → the worker backs off 1s, 2s, 4s … 60s
//	           (at least a 429/503's Retry-After), forever, until a normal
//	           answer, or until the dispatcher's AbnormalLimit: dead letter
//	  a corrupt entry (*contract.CorruptionError) is logged and its single offset skipped
//
// Delivery is at-least-once: a message whose commit did not finish before a
// crash is sent again after restart, and the checkpoint never passes a
// message that is not finished, whatever order the answers come in.
// Everything plain constructors build here works without Fx; fx.go wires
// the same constructors into an Fx module.
package dispatcher
