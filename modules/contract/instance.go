package contract

import (
	"slices"
	"sync"
)

// HeaderInstanceID is the push header (modules/dispatcher) that carries the
// pushing broker's instance id (Instance.ID). The HTTP API refuses a
// publish carrying its own instance id with 508 LOOP ([ErrLoop]): a
// dispatcher pointed at the broker itself would otherwise publish every
// message again, for ever. A publish from another broker (another id) is
// accepted, so one mmmq may forward to another.
const HeaderInstanceID = "mmmq-instance-id"

// ErrLoop is a publish that carries this broker's own instance id: one of
// its dispatchers pushes to the broker itself (508 LOOP, nothing stored).
var ErrLoop = NewError(CodeLoop, "loop: pushed by a dispatcher of this broker, whose host points at this broker itself (the mmmq-instance-id header is this broker's own), so every message would be published again, for ever; nothing was stored: point the dispatcher at a consumer or at another broker")

// Instance is this broker process as its own pushes and publishes see it:
// a random id made when the application is built (128 bits, 32 lower-case
// hex digits, different at every start and for every broker in one
// process), sent on every push (HeaderInstanceID), and the TCP ports its
// HTTP API listens on (server.port, and the port actually bound when
// server.port is 0), from which a dispatcher host pointing at the broker
// itself is refused (modules/dispatcher). Safe for concurrent use.
type Instance struct {
	id    string
	mu    sync.Mutex
	ports []int
}

// NewInstance returns an Instance with a fresh random id and the given
// listen ports (0s are left out).
func NewInstance(ports ...int) *Instance {
	i := &Instance{id: randomID()}
	for _, p := range ports {
		i.AddPort(p)
	}
	return i
}

// ID is the instance id, 32 lower-case hex digits.
func (i *Instance) ID() string { return i.id }

// AddPort records p (1..65535) as a port this broker's HTTP API listens on.
func (i *Instance) AddPort(p int) {
	if p < 1 || p > 65535 {
		return
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if !slices.Contains(i.ports, p) {
		i.ports = append(i.ports, p)
	}
}

// Ports are the recorded listen ports (a copy).
func (i *Instance) Ports() []int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return slices.Clone(i.ports)
}
