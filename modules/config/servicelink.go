package config

import (
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
)

// Kubernetes service links. Unless a pod spec says enableServiceLinks:
// false, the kubelet sets in every container, for each Service of the
// namespace, with NAME the Service name upper-cased and "-" as "_":
//
//	NAME_SERVICE_HOST=<cluster IP>
//	NAME_SERVICE_PORT=<port>                   first port
//	NAME_SERVICE_PORT_<PORT NAME>=<port>       each named port
//	NAME_PORT=<proto>://<IP>:<port>            first port
//	NAME_PORT_<port>_<PROTO>=<proto>://<IP>:<port>
//	NAME_PORT_<port>_<PROTO>_PROTO=<proto>
//	NAME_PORT_<port>_<PROTO>_PORT=<port>
//	NAME_PORT_<port>_<PROTO>_ADDR=<IP>
//
// with proto tcp, udp or sctp. A Service named "mmmq" or "mmmq-<x>" thus
// sets MMMQ_ variables. One that names no key, and whose value is what
// Kubernetes sets, is skipped (Config.IgnoredVars); one that names a key
// and holds a <proto>://<IP>:<port> value is refused naming the Service.

// linkShape is one service-link variable form: a name pattern (its first
// group is the Service name after "MMMQ_", possibly empty) and the check of
// the value Kubernetes sets for it.
type linkShape struct {
	re    *regexp.Regexp
	value func(string) bool
	url   bool // the value is <proto>://<IP>:<port>
}

// linkShapes are the service-link forms under the MMMQ_ prefix.
var linkShapes = func() []linkShape {
	const svc = `^MMMQ_(?:([A-Z0-9_]+)_)?`
	const port = `PORT_[0-9]+_(?:TCP|UDP|SCTP)`
	shape := func(suffix string, value func(string) bool, url bool) linkShape {
		return linkShape{re: regexp.MustCompile(svc + suffix + `$`), value: value, url: url}
	}
	return []linkShape{
		shape(`SERVICE_HOST`, isLinkIP, false),
		shape(`SERVICE_PORT(?:_[A-Z0-9_]+)?`, isLinkPort, false),
		shape(`PORT`, isLinkURL, true),
		shape(port, isLinkURL, true),
		shape(port+`_PROTO`, isLinkProto, false),
		shape(port+`_PORT`, isLinkPort, false),
		shape(port+`_ADDR`, isLinkIP, false),
	}
}()

// serviceLinkNamed reports whether name has the form of a service-link
// variable, whatever its value.
func serviceLinkNamed(name string) bool {
	for _, s := range linkShapes {
		if s.re.MatchString(name) {
			return true
		}
	}
	return false
}

// isServiceLink reports whether name=value is a service-link variable as
// Kubernetes sets it: its name has one of the forms and its value is of
// that form's kind (an IP address, a port number, tcp/udp/sctp, or
// <proto>://<IP>:<port>).
func isServiceLink(name, value string) bool {
	for _, s := range linkShapes {
		if s.re.MatchString(name) && s.value(value) {
			return true
		}
	}
	return false
}

// linkService returns the Service whose link could have set name=value, a
// variable naming a real key: a name ending like NAME_PORT or
// NAME_PORT_<port>_<PROTO> with a <proto>://<IP>:<port> value. The result
// is the Service name in Kubernetes spelling ("mmmq-server" for
// MMMQ_SERVER_PORT); ok is false for any other variable.
func linkService(name, value string) (service string, ok bool) {
	for _, s := range linkShapes {
		if !s.url {
			continue
		}
		if m := s.re.FindStringSubmatch(name); m != nil && s.value(value) {
			if m[1] == "" {
				return "mmmq", true
			}
			return "mmmq-" + strings.ReplaceAll(strings.ToLower(m[1]), "_", "-"), true
		}
	}
	return "", false
}

func isLinkIP(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

func isLinkPort(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 1 && n <= 65535 && strconv.Itoa(n) == s
}

func isLinkProto(s string) bool {
	return s == "tcp" || s == "udp" || s == "sctp"
}

// isLinkURL accepts <proto>://<IP>:<port>, an IPv6 address in brackets.
func isLinkURL(s string) bool {
	proto, addr, ok := strings.Cut(s, "://")
	if !ok || !isLinkProto(proto) {
		return false
	}
	host, port, err := net.SplitHostPort(addr)
	return err == nil && isLinkIP(host) && isLinkPort(port)
}
