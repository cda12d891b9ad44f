package httpapi

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/gorilla/mux"

	"github.com/mmmq/mmmq/modules/contract"
)

// This file holds what the server does for every route, its own and the
// ones modules and plugins register through contract.Route, after they are
// all registered: HEAD wherever GET is allowed, an Allow header on every
// 405, and no redirects for non-canonical paths.

// allowHeadWhereGet makes every route of r that allows GET (and not HEAD)
// answer HEAD too, as RFC 9110 §9.3.2 asks: for each such route it adds a
// route matching a HEAD request exactly when the GET route matches the same
// request as GET. The GET route's handler then serves the HEAD request (it
// sees the method HEAD, the GET route's path variables and route), with the
// same status and headers; net/http sends no body for a HEAD request.
// Routes registered later are not covered; call it after every route.
func allowHeadWhereGet(r *mux.Router) {
	var gets []*mux.Route
	_ = r.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		methods, err := route.GetMethods()
		if err == nil && slices.Contains(methods, http.MethodGet) && !slices.Contains(methods, http.MethodHead) {
			gets = append(gets, route)
		}
		return nil
	})
	for _, get := range gets {
		r.MatcherFunc(func(req *http.Request, m *mux.RouteMatch) bool {
			if req.Method != http.MethodHead {
				return false
			}
			asGet := *req
			asGet.Method = http.MethodGet
			return get.Match(&asGet, m)
		})
	}
}

// methodOrder is the order of the methods in an Allow header; methods not
// in it follow in the order routes registered them.
var methodOrder = []string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
	http.MethodPatch, http.MethodDelete, http.MethodOptions,
}

// routeMethods lists the methods r's routes name, in methodOrder, with HEAD
// after GET (see allowHeadWhereGet): the candidates of an Allow header.
func routeMethods(r *mux.Router) []string {
	seen := map[string]bool{}
	var extra []string
	_ = r.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		methods, _ := route.GetMethods()
		for _, m := range methods {
			if !seen[m] && !slices.Contains(methodOrder, m) {
				extra = append(extra, m)
			}
			seen[m] = true
		}
		return nil
	})
	if seen[http.MethodGet] {
		seen[http.MethodHead] = true
	}
	var out []string
	for _, m := range methodOrder {
		if seen[m] {
			out = append(out, m)
		}
	}
	return append(out, extra...)
}

// allowed is the value of the Allow header for req's path: the candidate
// methods with which some route of r matches req (RFC 9110 §10.2.1).
func allowed(r *mux.Router, candidates []string, req *http.Request) string {
	var out []string
	for _, m := range candidates {
		try := *req
		try.Method = m
		var match mux.RouteMatch
		// With NotFoundHandler and MethodNotAllowedHandler set, Match also
		// reports those as matches; MatchErr tells them apart.
		if r.Match(&try, &match) && match.MatchErr == nil {
			out = append(out, m)
		}
	}
	return strings.Join(out, ", ")
}

// methodNotAllowed answers 405 METHOD_NOT_ALLOWED with the Allow header
// (RFC 9110 §15.5.6) and the broker's JSON error body.
func (s *Server) methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	allow := allowed(s.router, s.methods, r)
	w.Header().Set("Allow", allow)
	contract.WriteError(w, http.StatusMethodNotAllowed, contract.CodeMethod,
		fmt.Sprintf("method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, allow))
}

// canonicalPath reports whether p has no empty, "." or ".." segment: the
// router's path cleaning would leave it as it is (a trailing "/" is kept).
// A path not starting with "/" (OPTIONS *, an absolute-form request
// without a path) counts as canonical: no route matches it (404).
func canonicalPath(p string) bool {
	if p == "" || p[0] != '/' {
		return true
	}
	rest := p[1:]
	for {
		seg, after, more := strings.Cut(rest, "/")
		if (seg == "" && more) || seg == "." || seg == ".." {
			return false
		}
		if !more {
			return true
		}
		rest = after
	}
}

// notCanonical answers 400 BAD_REQUEST for a path that is not canonical,
// instead of the router's redirect to the cleaned path: a client that
// sends /topics/../x/messages, or a topic or group named "." or "..", gets
// an error it can see, not a silent move to another resource.
func notCanonical(w http.ResponseWriter, r *http.Request) {
	contract.WriteError(w, http.StatusBadRequest, contract.CodeBadRequest,
		fmt.Sprintf(`path %q is not canonical: it has an empty, "." or ".." segment`, r.URL.Path))
}
