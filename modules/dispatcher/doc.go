// Package dispatcher pushes every message of the topics a Dispatcher
// subscribes to over HTTP to that dispatcher's consumer, one worker per
// (dispatcher, topic), strictly in offset order, with a durable per-dispatcher
// checkpoint (the Dispatcher of the original Java mmmq, with the semantics
// below).
//
// The pieces:
//
//	Pattern               topic patterns (order.*, news.**): '*' one segment, '**' zero or more
//	Dispatcher            name + consumer Host + patterns + per-dispatcher options
//	Set                   the dispatchers of the value group `group:"dispatchers"`, sorted by name
//	Sender, HTTPSender    one delivery attempt: POST the stored message, read ACK/NACK
//	Manager               subscribes to a Source of topics and runs the workers
//
// Worker loop (the original Java mmmq's "retries and exponential backoff" and
// "commit point and fsync" rules):
//
//	next := checkpoint.Offset()
//	loop:
//	  wait until HighWatermark() > next (Topic.Notify, never polling)
//	  for each entry in ReadBatch(next, BatchSize), in order:
//	    send; ACK  → commit next+1 (fsync) → next entry
//	          NACK → resend, at most MaxResends (3) times, then log, commit, move on
//	          abnormal (transport error, timeout, 3xx/4xx/5xx, other body)
//	               → exponential backoff 1s, 2s, 4s … 60s, forever, until a normal answer
//	  a corrupt entry (*storage.CorruptionError) is logged and its single offset skipped
//
// Delivery is at-least-once: a message whose commit did not finish before a
// crash is sent again after restart. Everything plain constructors build here
// works without Fx; fx.go wires the same constructors into an Fx module.
package dispatcher
