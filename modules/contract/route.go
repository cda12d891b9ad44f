package contract

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/gorilla/mux"
	"go.uber.org/fx"
)

// Route is a module's or plugin's contribution to the HTTP API: Register
// adds its handlers to the broker's router, a gorilla/mux router
// (github.com/gorilla/mux). Contribute one with [ProvideRoute]; the HTTP
// server (modules/httpapi) registers every member of the value group. Routes
// must not overlap: a path and method registered twice (by two routes, or
// by a route and the server's own) makes the server fail to build, naming
// them.
type Route interface {
	Register(r *mux.Router)
}

// Drainer is implemented by a Route whose requests may wait (long polls):
// the HTTP server calls Drain when it starts its graceful shutdown, right
// after it stops accepting connections, so that waiting requests answer at
// once instead of holding the shutdown for up to their wait.
type Drainer interface {
	Drain(ctx context.Context) error
}

// AuthExempt is implemented by a Route that authenticates some of its
// paths itself (a browser page with a login form and a session cookie,
// which a bearer-token check would refuse before it could redirect to its
// login). AuthExempt returns path prefixes, each starting and ending with
// "/" (e.g. "/ui/"): while authentication is on, the HTTP server lets a
// request whose canonical path starts with one of them (or is one of them
// without the final "/") through without
// credentials and without a principal, and the route must authenticate
// it (contract.Authenticator) and put the principal into the request's
// context (WithPrincipal) before it serves anything that is not public.
// A prefix that does not start and end with "/" is ignored.
type AuthExempt interface {
	AuthExempt() []string
}

// RouteTag is the value group of Routes.
const RouteTag = `group:"routes"`

// ProvideRoute registers ctor, a constructor whose result implements Route
// (optionally with an error, and with any Fx-supplied parameters), as a
// member of the routes value group:
//
//	contract.ProvideRoute(groups.NewRouteFromConfig)
//
// A constructor may return a nil Route to contribute nothing.
func ProvideRoute(ctor any) fx.Option {
	return fx.Provide(fx.Annotate(ctor, fx.As(new(Route)), fx.ResultTags(RouteTag)))
}

// ErrorBody is the JSON body of every HTTP error answer: a NACK with a
// human-readable error and a stable machine-readable code:
//
//	{"acknowledgement":"NACK","error":"topic name is empty","code":"BAD_REQUEST"}
type ErrorBody struct {
	Acknowledgement string `json:"acknowledgement"` // always "NACK"
	Error           string `json:"error"`
	Code            string `json:"code"`
	// StartOffset is set on 410 OFFSET_EXPIRED only: the topic's log
	// start offset, where a reader can continue.
	StartOffset *int64 `json:"startOffset,omitempty"`
}

// WriteJSON writes v as JSON with status and Content-Type
// application/json (no HTML escaping: error texts keep their '<', '>' and
// '&').
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// RetryAfterSeconds is d in whole seconds for a Retry-After header:
// rounded up, at least 1.
func RetryAfterSeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	return max(s, 1)
}

// WriteError writes an ErrorBody with status, code and msg. An OVERLOADED
// answer also gets "Retry-After: 1" (seconds): the budget frees up as the
// replies in flight are written, so a short wait is the remedy. A NO_SPACE
// answer gets "Retry-After: 5" (NoSpaceRetryAfter): nothing was stored,
// and the publish is accepted again once space is freed. A TOPIC_BUSY
// answer gets "Retry-After: 1" (TopicBusyRetryAfter). An UNAUTHORIZED
// answer gets "WWW-Authenticate: Bearer" (RFC 6750 §3); a RATE_LIMITED one
// "Retry-After: 1" unless the caller set it (WriteErr sets the error's).
func WriteError(w http.ResponseWriter, status int, code, msg string) {
	switch code {
	case CodeUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="mmmq"`)
	case CodeRateLimited:
		if w.Header().Get("Retry-After") == "" {
			w.Header().Set("Retry-After", "1")
		}
	case CodeOverloaded:
		w.Header().Set("Retry-After", OverloadedRetryAfter)
	case CodeNoSpace:
		w.Header().Set("Retry-After", NoSpaceRetryAfter)
	case CodeTopicBusy:
		w.Header().Set("Retry-After", TopicBusyRetryAfter)
	}
	WriteJSON(w, status, ErrorBody{Acknowledgement: "NACK", Error: msg, Code: code})
}

// WriteErr writes err as an ErrorBody, its status and code from [Classify]
// and its text as the message; a *RateLimitedError's RetryAfter becomes
// the Retry-After header (whole seconds, rounded up, at least 1).
func WriteErr(w http.ResponseWriter, err error) {
	c := Classify(err)
	var rl *RateLimitedError
	if errors.As(err, &rl) {
		w.Header().Set("Retry-After", strconv.FormatInt(RetryAfterSeconds(rl.RetryAfter), 10))
	}
	var oe *OffsetExpiredError
	if c.Code == CodeOffsetExpired && errors.As(err, &oe) {
		start := oe.StartOffset
		WriteJSON(w, c.Status, ErrorBody{Acknowledgement: "NACK", Error: err.Error(), Code: c.Code, StartOffset: &start})
		return
	}
	WriteError(w, c.Status, c.Code, err.Error())
}
