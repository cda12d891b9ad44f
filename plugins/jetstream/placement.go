package jetstream

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.uber.org/zap"
)

// probeMark starts the name of the throwaway stream checkPlacement makes
// ("<prefix>__probe_<unique id>"): it decodes to no topic (the name
// encoding never starts a topic with "_"), so no broker takes it for one.
const probeMark = "_probe_"

// checkPlacement tells at startup whether a stream of the configured
// replicas can be placed: JetStream accepts a key-value bucket made
// earlier, with fewer replicas or on a larger cluster, without a word, and
// would refuse every new topic instead (503, "no suitable peers for
// placement"). It creates and deletes a memory stream of cfg.Replicas
// replicas that holds nothing, named with probeMark. With one replica it
// does nothing.
//
// Errors: only a definite refusal: a server that is not clustered and
// cfg.Replicas > 1 (the error names mmmq.jetstream.replicas). A
// placement that fails now (fewer JetStream servers than replicas, or one
// of them down) is logged as a warning naming the key, not an error: a
// node restarting while a NATS server is down must still serve the topics
// that exist.
func (b *Backend) checkPlacement() error {
	if b.cfg.Replicas <= 1 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*b.cfg.RequestTimeout)
	defer cancel()
	id := nuid.Next()
	name := b.cfg.StreamPrefix + "_" + probeMark + id
	_, err := b.js.CreateStream(ctx, jetstream.StreamConfig{
		Name:        name,
		Description: "mmmq startup check: can streams of the configured replicas be placed (deleted at once)",
		Subjects:    []string{b.cfg.StreamPrefix + ".probe." + id},
		Storage:     jetstream.MemoryStorage,
		Replicas:    int(b.cfg.Replicas),
		MaxMsgs:     1,
	})
	if err == nil {
		if derr := b.js.DeleteStream(ctx, name); derr != nil && !errors.Is(derr, jetstream.ErrStreamNotFound) {
			b.opts.Logger.Warn("delete the placement check's stream", zap.String("stream", name), zap.Error(derr))
		}
		return nil
	}
	hint := replicasHint(err, int(b.cfg.Replicas))
	if apiErrorCode(err) == codeReplicasUnsupported {
		return fmt.Errorf("check stream placement: %w%s", err, hint)
	}
	b.opts.Logger.Warn("a stream of mmmq.jetstream.replicas copies cannot be placed now: new topics are refused (503) until enough JetStream servers are up",
		zap.Int64("replicas", b.cfg.Replicas), zap.Error(err))
	return nil
}
