package admin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/gorilla/mux"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
)

// maxBody caps an admin request body.
const maxBody = 1 << 20

// Route is the admin API (contract.Route):
//
//	GET    /mmmq/dispatchers                  200 {"dispatchers": [Listed...]}
//	POST   /mmmq/dispatchers                  201 Listed (body: Spec)
//	GET    /mmmq/dispatchers/{name}           200 Status
//	PUT    /mmmq/dispatchers/{name}           200 Listed (body: Spec; api dispatchers only)
//	DELETE /mmmq/dispatchers/{name}           200 {"name","deleted":true} (?delete-checkpoints=true)
//	POST   /mmmq/dispatchers/{name}/pause     200 Listed
//	POST   /mmmq/dispatchers/{name}/resume    200 Listed
//	POST   /mmmq/dispatchers/{name}/seek      200 {"name","topics":[SeekResult...]} (body: SeekRequest)
//	POST   /mmmq/dispatchers/{name}/redrive   200 dispatcher.RedriveResult (body: RedriveRequest, optional)
//
// Errors are the broker's JSON error body: 400 naming the field, 404
// NOT_FOUND, 409 READ_ONLY / NAME_TAKEN / NO_DEAD_LETTERS.
type Route struct {
	a *Admin
}

// NewRoute returns the admin API over a.
func NewRoute(a *Admin) *Route { return &Route{a: a} }

// Register adds the routes to r.
func (rt *Route) Register(r *mux.Router) {
	r.HandleFunc("/mmmq/dispatchers", admin(rt.list)).Methods(http.MethodGet)
	r.HandleFunc("/mmmq/dispatchers", admin(rt.create)).Methods(http.MethodPost)
	r.HandleFunc("/mmmq/dispatchers/{name}", admin(rt.get)).Methods(http.MethodGet)
	r.HandleFunc("/mmmq/dispatchers/{name}", admin(rt.replace)).Methods(http.MethodPut)
	r.HandleFunc("/mmmq/dispatchers/{name}", admin(rt.remove)).Methods(http.MethodDelete)
	r.HandleFunc("/mmmq/dispatchers/{name}/pause", admin(rt.pause(true))).Methods(http.MethodPost)
	r.HandleFunc("/mmmq/dispatchers/{name}/resume", admin(rt.pause(false))).Methods(http.MethodPost)
	r.HandleFunc("/mmmq/dispatchers/{name}/seek", admin(rt.seek)).Methods(http.MethodPost)
	r.HandleFunc("/mmmq/dispatchers/{name}/redrive", admin(rt.redrive)).Methods(http.MethodPost)
}

// admin wraps a handler of the admin API: the request's principal (when
// authentication is on) must have the admin action (403 FORBIDDEN
// otherwise, before the body is read). The HTTP server's audit log records
// every admin action and its outcome.
func admin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := contract.Authorize(r.Context(), contract.ActionAdmin, "", ""); err != nil {
			contract.WriteErr(w, err)
			return
		}
		h(w, r)
	}
}

func (rt *Route) list(w http.ResponseWriter, _ *http.Request) {
	ds := rt.a.List()
	if ds == nil {
		ds = []Listed{}
	}
	contract.WriteJSON(w, http.StatusOK, map[string]any{"dispatchers": ds})
}

func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return nil, contract.BadRequest("read body: %v", err)
	}
	if len(b) > maxBody {
		return nil, contract.TooLarge("body over %d bytes", maxBody)
	}
	return b, nil
}

// noBody refuses a body for a route that takes none (what), so that a
// setting sent along is not silently ignored: nothing, null and an empty
// object are taken.
func noBody(b []byte, what string) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return contract.BadRequest("%s takes no body (send none, or {}); this one is not a JSON object", what)
	}
	if len(m) > 0 {
		return contract.BadRequest("%s takes no body (send none, or {}); got the member %q", what, slices.Sorted(maps.Keys(m))[0])
	}
	return nil
}

func (rt *Route) create(w http.ResponseWriter, r *http.Request) {
	b, err := readBody(r)
	var s Spec
	if err == nil {
		s, err = decodeSpec(b)
	}
	var out Listed
	if err == nil {
		out, err = rt.a.Create(s)
	}
	if err != nil {
		contract.WriteErr(w, err)
		return
	}
	contract.WriteJSON(w, http.StatusCreated, out)
}

func (rt *Route) replace(w http.ResponseWriter, r *http.Request) {
	b, err := readBody(r)
	var s Spec
	if err == nil {
		s, err = decodeSpec(b)
	}
	var out Listed
	if err == nil {
		out, err = rt.a.Replace(mux.Vars(r)["name"], s)
	}
	if err != nil {
		contract.WriteErr(w, err)
		return
	}
	contract.WriteJSON(w, http.StatusOK, out)
}

func (rt *Route) remove(w http.ResponseWriter, r *http.Request) {
	name := mux.Vars(r)["name"]
	del := false
	if err := contract.RepeatedQuery(r.URL.Query(), "delete-checkpoints"); err != nil {
		contract.WriteErr(w, err)
		return
	}
	if v := r.URL.Query().Get("delete-checkpoints"); v != "" {
		var err error
		if del, err = strconv.ParseBool(v); err != nil {
			contract.WriteErr(w, contract.BadRequest("query parameter delete-checkpoints must be true or false; got %q", v))
			return
		}
	}
	if err := rt.a.Delete(name, del); err != nil {
		contract.WriteErr(w, err)
		return
	}
	contract.WriteJSON(w, http.StatusOK, map[string]any{"name": name, "deleted": true, "checkpointsDeleted": del})
}

func (rt *Route) pause(paused bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, err := readBody(r)
		if err == nil {
			err = noBody(b, map[bool]string{true: "pause", false: "resume"}[paused])
		}
		if err != nil {
			contract.WriteErr(w, err)
			return
		}
		out, err := rt.a.SetPaused(mux.Vars(r)["name"], paused)
		if err != nil {
			contract.WriteErr(w, err)
			return
		}
		contract.WriteJSON(w, http.StatusOK, out)
	}
}

// TopicStatus is one topic of GET /mmmq/dispatchers/{name}.
type TopicStatus struct {
	Topic                   string  `json:"topic"`
	Committed               int64   `json:"committed"`
	HighWatermark           int64   `json:"highWatermark"`
	Lag                     int64   `json:"lag"`
	OldestUnackedAgeSeconds float64 `json:"oldestUnackedAgeSeconds"`
	State                   string  `json:"state"`
	Attempt                 int     `json:"attempt"`
	Delivered               uint64  `json:"delivered"`
	// Exhausted counts messages given up on since the worker started:
	// NACKed on every attempt or past the abnormal limit.
	Exhausted uint64 `json:"exhausted"`
	// DeadLettered counts the exhausted messages appended to the
	// dead-letter topic since the worker started (the others were logged
	// and skipped: dead letters off), plus the expired ones dead-lettered
	// under expired: dead-letter.
	DeadLettered uint64 `json:"deadLettered"`
	// Expired counts messages past their expiresAt (published with a
	// ttl) finished without a push since the worker started: skipped, or
	// dead-lettered under expired: dead-letter (then in DeadLettered too).
	Expired     uint64     `json:"expired"`
	LastError   string     `json:"lastError,omitempty"`
	LastErrorAt *time.Time `json:"lastErrorAt,omitempty"`
	NextRetry   *time.Time `json:"nextRetry,omitempty"`
	// LeaseEpoch is the epoch of this node's lease on the topic (a
	// backend shared by several broker nodes); omitted when none.
	LeaseEpoch uint64 `json:"leaseEpoch,omitempty"`
	// Keys is the state of ordering "key" (nil under the other orderings).
	Keys *KeyStatus `json:"keys,omitempty"`
	// Replay is the replay rate a seek or redrive with "rate" set on this
	// topic: its pushes of offsets [from, until) go at most rate per
	// second until committed reaches until; omitted when none or reached.
	Replay *dispatcher.Replay `json:"replay,omitempty"`
	// InFlight is the topic worker's pushes outstanding now; present only
	// with adaptive-concurrency aimd (the dispatcher's concurrency.limit
	// bounds their sum over its topics).
	InFlight *int `json:"inFlight,omitempty"`
}

// KeyStatus is a topic worker's state under ordering "key": the keys with
// a push outstanding, the parked keys (a NACK or an abnormal answer made
// them wait; at most the 50 oldest listed, parkedKeys counts them all) and
// the window's fill (unacked messages past the checkpoint out of
// maxUnacked; heldBy names the key at the checkpoint once it is full).
type KeyStatus struct {
	InFlight   int         `json:"inFlight"`
	ParkedKeys int         `json:"parkedKeys"`
	Parked     []ParkedKey `json:"parked"`
	Unacked    int64       `json:"unacked"`
	MaxUnacked int64       `json:"maxUnacked"`
	HeldBy     *string     `json:"heldBy,omitempty"`
}

// ParkedKey is one parked ordering key: its message at offset, parked
// since its first NACK or abnormal answer, sent attempts times, retried at
// nextRetry. Key is "" for a message without one.
type ParkedKey struct {
	Key       string    `json:"key"`
	Offset    int64     `json:"offset"`
	Since     time.Time `json:"since"`
	Attempts  int       `json:"attempts"`
	LastError string    `json:"lastError,omitempty"`
	NextRetry time.Time `json:"nextRetry"`
}

// keyStatus renders ws's ordering-key state, nil under another ordering.
func keyStatus(ws dispatcher.WorkerStatus) *KeyStatus {
	if ws.Ordering != dispatcher.OrderKey {
		return nil
	}
	ks := &KeyStatus{InFlight: ws.KeysInFlight, ParkedKeys: ws.ParkedKeys, Parked: make([]ParkedKey, 0, len(ws.Parked)),
		Unacked: ws.Unacked, MaxUnacked: ws.MaxUnacked}
	for _, p := range ws.Parked {
		ks.Parked = append(ks.Parked, ParkedKey{Key: p.Key, Offset: p.Offset, Since: p.Since, Attempts: p.Attempts, LastError: p.LastError, NextRetry: p.NextRetry})
	}
	if ws.Unacked >= ws.MaxUnacked {
		ks.HeldBy = &ws.HeldBy
	}
	return ks
}

// Status is GET /mmmq/dispatchers/{name}: the dispatcher, its dead-letter
// topic ("" when dead letters are off), its rate limit, circuit breaker
// and adaptive concurrency when on and, per
// topic it delivers, its progress.
type Status struct {
	Listed
	DeadLetterTopic string           `json:"deadLetterTopic"`
	RateLimit       *RateLimitStatus `json:"rateLimit,omitempty"`
	Breaker         *BreakerStatus   `json:"breaker,omitempty"`
	// Concurrency is present only with adaptive-concurrency aimd.
	Concurrency *ConcurrencyStatus `json:"concurrency,omitempty"`
	// PauseReason ("admin" or "auto": its pause-after) and PausedAt are
	// present only while the dispatcher is paused.
	PauseReason dispatcher.PauseReason `json:"pauseReason,omitempty"`
	PausedAt    *time.Time             `json:"pausedAt,omitempty"`
	Topics      []TopicStatus          `json:"topics"`
}

// BreakerStatus is a dispatcher's circuit breaker on this node (present
// only with breaker-failures): state "closed", "open" or "half-open";
// failures, the consecutive abnormal answers counted while closed;
// cooloffSeconds, the cool-off of the current opening, or while closed
// of the next one (the configured first cool-off); nextProbe,
// when the probe push may go (open only); opened and probes, the openings
// and probe pushes since the broker started.
type BreakerStatus struct {
	State          dispatcher.BreakerState `json:"state"`
	Failures       int                     `json:"failures"`
	CooloffSeconds float64                 `json:"cooloffSeconds"`
	NextProbe      *time.Time              `json:"nextProbe,omitempty"`
	Opened         uint64                  `json:"opened"`
	Probes         uint64                  `json:"probes"`
}

// breakerStatus is d's circuit breaker, nil when off. A breaker no worker
// has used yet (no topic matched) is closed, with the configured first
// cool-off.
func (a *Admin) breakerStatus(d *dispatcher.Dispatcher) *BreakerStatus {
	if d.BreakerFailures() <= 0 {
		return nil
	}
	bs, on := a.m.BreakerStatus(d.Name())
	if !on {
		return &BreakerStatus{State: dispatcher.BreakerClosed}
	}
	st := &BreakerStatus{State: bs.State, Failures: bs.Failures, CooloffSeconds: bs.Cooloff.Seconds(), Opened: bs.Opened, Probes: bs.Probes}
	if !bs.NextProbe.IsZero() {
		st.NextProbe = &bs.NextProbe
	}
	return st
}

// ConcurrencyStatus is a dispatcher's adaptive concurrency on this node
// (present only with adaptive-concurrency aimd): limit, the pushes it may
// have outstanding now over all its topics (1..max); max, its
// max-in-flight; inFlight, the pushes outstanding now; decreases and
// increases, the moves of the limit since the broker started;
// rttSeconds, the long-run average round trip of normal answers (0
// before the first).
type ConcurrencyStatus struct {
	Limit      int     `json:"limit"`
	Max        int     `json:"max"`
	InFlight   int     `json:"inFlight"`
	Decreases  uint64  `json:"decreases"`
	Increases  uint64  `json:"increases"`
	RTTSeconds float64 `json:"rttSeconds"`
}

// concurrencyStatus is d's adaptive concurrency, nil when off. A limiter
// no worker has used yet (no topic matched) is at its max.
func (a *Admin) concurrencyStatus(d *dispatcher.Dispatcher) *ConcurrencyStatus {
	if d.AdaptiveConcurrency() != dispatcher.AdaptiveAIMD {
		return nil
	}
	cs, on := a.m.ConcurrencyStatus(d.Name())
	if !on {
		return &ConcurrencyStatus{Limit: d.MaxInFlight(), Max: d.MaxInFlight()}
	}
	return &ConcurrencyStatus{Limit: cs.Limit, Max: cs.Max, InFlight: cs.InFlight, Decreases: cs.Decreases,
		Increases: cs.Increases, RTTSeconds: cs.RTT.Seconds()}
}

// RateLimitStatus is a dispatcher's rate limit on this node: limit
// (messages per second) and burst (messages) in effect, and how many of
// its topic workers are waiting for tokens before their next push.
type RateLimitStatus struct {
	Limit   float64 `json:"limit"`
	Burst   int     `json:"burst"`
	Waiting int     `json:"waiting"`
}

// rateLimitStatus is d's rate limit, nil when off.
func (a *Admin) rateLimitStatus(d *dispatcher.Dispatcher) *RateLimitStatus {
	if d.RateLimit() <= 0 {
		return nil
	}
	rl := &RateLimitStatus{Limit: d.RateLimit(), Burst: d.RateBurst()}
	if rs, on := a.m.RateStatus(d.Name()); on {
		rl.Waiting = rs.Waiting
	}
	return rl
}

func (rt *Route) get(w http.ResponseWriter, r *http.Request) {
	st, err := rt.a.Status(mux.Vars(r)["name"])
	if err != nil {
		contract.WriteErr(w, err)
		return
	}
	contract.WriteJSON(w, http.StatusOK, st)
}

// Status returns the dispatcher name as GET /mmmq/dispatchers/{name}
// shows it: its spec (secrets redacted), source, dead-letter topic and,
// per open topic it matches, its progress (Topics is [] when none, sorted
// as the dispatcher manager lists the open topics). The status page
// (plugins/ui) shows the same. Error: dispatcher.ErrUnknownDispatcher
// (404) for an unknown name.
func (a *Admin) Status(name string) (Status, error) {
	d, ok := a.set.Get(name)
	if !ok {
		return Status{}, fmt.Errorf("%w: %s", dispatcher.ErrUnknownDispatcher, name)
	}
	paused := a.m.Paused(name)
	all, err := a.m.DispatcherStatus(name)
	if err != nil {
		return Status{}, err
	}
	st := Status{Listed: Listed{Spec: specOf(d, paused), Source: d.Origin()}, DeadLetterTopic: d.DeadLetter(),
		RateLimit: a.rateLimitStatus(d), Breaker: a.breakerStatus(d), Concurrency: a.concurrencyStatus(d), Topics: make([]TopicStatus, 0, len(all))}
	if info, ok := a.m.PauseInfo(name); ok {
		st.PauseReason = info.Reason
		if !info.At.IsZero() {
			st.PausedAt = &info.At
		}
	}
	now := time.Now()
	for _, ws := range all {
		ts := TopicStatus{Topic: ws.Topic, Committed: ws.Committed, HighWatermark: ws.HighWatermark, Lag: ws.Lag,
			State: ws.State, Attempt: ws.Attempt, Delivered: ws.Delivered, Exhausted: ws.Exhausted, DeadLettered: ws.DeadLettered, Expired: ws.TTLExpired,
			LastError: ws.LastError, LeaseEpoch: ws.LeaseEpoch, Keys: keyStatus(ws), Replay: ws.Replay}
		if !ws.OldestUnacked.IsZero() {
			ts.OldestUnackedAgeSeconds = max(0, now.Sub(ws.OldestUnacked).Seconds())
		}
		if !ws.LastErrorAt.IsZero() {
			ts.LastErrorAt = &ws.LastErrorAt
		}
		if !ws.NextRetry.IsZero() {
			ts.NextRetry = &ws.NextRetry
		}
		if st.Concurrency != nil {
			ts.InFlight = &ws.InFlight
		}
		st.Topics = append(st.Topics, ts)
	}
	return st, nil
}

// SeekRequest is the body of POST /mmmq/dispatchers/{name}/seek: Topic is
// a topic name or pattern (default "**": every topic the dispatcher
// delivers), To is "earliest" (the log start offset), "latest" (the high
// watermark), an offset, or {"timestamp": <unix ms>} (the first message
// stored at or after it). Rate, when present, is the replay rate in
// messages per second (> 0, at most dispatcher.MaxReplayRate; fractions
// allowed): the backlog of each moved topic, from its new position to its
// high watermark as of the seek, is pushed at most that fast, over all the
// moved topics together (dispatcher.Manager.SeekAt); absent (or null) a
// seek clears the replay rate of the topics it moves.
type SeekRequest struct {
	Topic string          `json:"topic"`
	To    json.RawMessage `json:"to"`
	Rate  *float64        `json:"rate,omitempty"`
}

func (rt *Route) seek(w http.ResponseWriter, r *http.Request) {
	name := mux.Vars(r)["name"]
	b, err := readBody(r)
	var req SeekRequest
	if err == nil {
		err = decodeSeek(b, &req)
	}
	var res []dispatcher.SeekResult
	if err == nil {
		res, err = rt.a.Seek(name, req)
	}
	if err != nil {
		contract.WriteErr(w, err)
		return
	}
	contract.WriteJSON(w, http.StatusOK, map[string]any{"name": name, "topics": res})
}

// decodeSeek reads a seek body into req: unknown fields and bad types are
// refused, naming the field, and so is a member name that differs from
// one of SeekRequest's only in case ("Topic").
func decodeSeek(b []byte, req *SeekRequest) error {
	if p, ok := contract.FindRepeatedMember(b); ok {
		return contract.BadRequest("invalid seek: field %q is given more than once", p)
	}
	if mc, ok := contract.FindMemberCase(b, reflect.TypeFor[SeekRequest]()); ok {
		return contract.BadRequest("invalid seek: unknown field %q (the member is %q)", mc.Sent, mc.Want)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(req); err != nil {
		return contract.BadRequest("invalid seek: %s", jsonProblem(err))
	}
	return nil
}

// Seek moves the dispatcher name's position on the open topics that match
// both req.Topic (a name or pattern, "" = "**") and its patterns to req.To
// (see SeekRequest), as POST /mmmq/dispatchers/{name}/seek does; it
// returns one result per topic moved (with the replay it set there when
// req.Rate is given). Errors: 400 for an invalid "to", "topic" or "rate",
// 404 for an unknown dispatcher or when no open topic matches (nothing
// moved), 410 OFFSET_EXPIRED for an offset below a topic's log start
// offset.
func (a *Admin) Seek(name string, req SeekRequest) ([]dispatcher.SeekResult, error) {
	target, err := parseTarget(req.To)
	if err != nil {
		return nil, err
	}
	rate := 0.0
	if req.Rate != nil {
		if err := dispatcher.ValidateReplayRate(*req.Rate); err != nil {
			return nil, contract.BadRequest("invalid seek: %v", err)
		}
		rate = *req.Rate
	}
	match, err := topicMatcher(req.Topic)
	if err != nil {
		return nil, err
	}
	if _, ok := a.set.Get(name); !ok {
		return nil, fmt.Errorf("%w: %s", dispatcher.ErrUnknownDispatcher, name)
	}
	res, err := a.m.SeekAt(name, match, target, rate)
	if err != nil {
		return nil, err
	}
	if len(res) == 0 {
		topic := req.Topic
		if topic == "" {
			topic = "**"
		}
		return nil, contract.NewError(contract.CodeNotFound,
			fmt.Sprintf("seek: no open topic matches both %q and dispatcher %s's patterns: nothing moved", topic, name))
	}
	return res, nil
}
