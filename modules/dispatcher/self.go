package dispatcher

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"

	"go.uber.org/fx"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
)

// Self recognises, best effort, a dispatcher host that is this broker
// itself: a consumer at one of the broker's listen ports (server.port, or
// the port bound when it is 0; TLS is served on the same port) on an
// address that reaches it. With server.host empty or unspecified (0.0.0.0,
// ::) those addresses are the loopback ones (localhost and *.localhost,
// 127.0.0.0/8, ::1, 0.0.0.0, ::), the host's own interface addresses
// (net.InterfaceAddrs) and its host name; with server.host a loopback
// address, the loopback ones; else server.host alone. Such a host would
// make the dispatcher publish every message it pushes again on the default
// path /mmmq/messages (the publish alias), for ever. What Self misses (a
// DNS name, a proxy, NAT) the broker catches on the wire: its pushes carry
// its instance id (HeaderInstanceID), and it refuses a publish with its own
// (508 LOOP).
type Self struct {
	inst     *contract.Instance
	bind     string
	names    map[string]bool // lower case, no trailing dot; IPs in net.IP.String form
	loopback bool            // the loopback addresses reach it
}

// NewSelf returns the Self of a broker listening on server.host (bind; ""
// for every address) at inst's ports.
func NewSelf(bind string, inst *contract.Instance) *Self {
	s := &Self{inst: inst, bind: bind, names: map[string]bool{}}
	ip := net.ParseIP(bind)
	switch {
	case bind == "" || ip != nil && ip.IsUnspecified():
		s.loopback = true
		if addrs, err := net.InterfaceAddrs(); err == nil {
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok {
					s.names[n.IP.String()] = true
				}
			}
		}
		if h, err := os.Hostname(); err == nil && h != "" {
			s.names[normHost(h)] = true
		}
	case isLoopback(bind):
		s.loopback = true // and nothing else: no interface address is bound
	default:
		s.names[normHost(bind)] = true
	}
	return s
}

// normHost is a host name or IP address as Self compares it.
func normHost(h string) string {
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if ip := net.ParseIP(h); ip != nil {
		return ip.String()
	}
	return h
}

// isLoopback reports whether address h always reaches this machine:
// localhost, a name under .localhost, 127.0.0.0/8, ::1, or the
// unspecified 0.0.0.0 and ::, which a connection treats as the machine
// itself.
func isLoopback(h string) bool {
	h = normHost(h)
	if ip := net.ParseIP(h); ip != nil {
		return ip.IsLoopback() || ip.IsUnspecified()
	}
	return h == "localhost" || strings.HasSuffix(h, ".localhost")
}

// Check returns an error saying why when h is this broker itself, nil
// otherwise (a nil Self checks nothing). A different port on the same
// machine is another process: allowed.
func (s *Self) Check(h Host) error {
	if s == nil || s.inst == nil || !slices.Contains(s.inst.Ports(), h.Port) {
		return nil
	}
	if !(s.loopback && isLoopback(h.Address)) && !s.names[normHost(h.Address)] {
		return nil
	}
	return fmt.Errorf("%s is this broker's own listen address (port %d, server.port): every message pushed there would be published on this broker again, for ever; point the dispatcher at a consumer (another port or host)", h, h.Port)
}

// SelfParams is what the Fx module's Self takes from the graph.
type SelfParams struct {
	fx.In

	// Server is the "server" section: server.host (config.Module).
	Server config.ServerConfig `optional:"true"`
	// Instance is this broker's instance, whose ports the HTTP API listens
	// on (config.Module); absent, Self refuses nothing.
	Instance *contract.Instance `optional:"true"`
}

func newSelfFx(p SelfParams) *Self { return NewSelf(p.Server.Host, p.Instance) }

// checkOwnHosts refuses, at startup, a dispatcher from the configuration
// file or Go code whose host is this broker (Self.Check); the error names
// its key, "mmmq.broker.dispatchers[0].host", or the dispatcher and its Go
// provider. Dispatchers of dispatchers.json are the admin API's (modules/admin).
func checkOwnHosts(set *Set, self *Self) error {
	var errs []error
	for _, d := range set.All() {
		err := self.Check(d.Host())
		if err == nil {
			continue
		}
		if key, ok := strings.CutPrefix(d.Source(), "config "); ok {
			errs = append(errs, fmt.Errorf("config: %w", config.InvalidValue(key+".host", "%v", err)))
			continue
		}
		errs = append(errs, fmt.Errorf("dispatcher %q (%s): host: %w", d.Name(), d.Source(), err))
	}
	return errors.Join(errs...)
}
