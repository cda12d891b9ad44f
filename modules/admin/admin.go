// Package admin is the live administration of dispatchers: the REST API at
// /mmmq/dispatchers (the newest Java mmmq's shape, extended) that lists,
// creates, replaces, deletes, pauses, resumes and seeks dispatchers and
// redrives their dead letters while the broker runs, and dispatchers.json,
// where the dispatchers created through it are kept across restarts (with
// their signing secrets and keys and push header values, which the API never shows:
// see Spec).
//
// Dispatchers declared in Go code ("go") or in the configuration file
// ("config") are listed and may be paused, resumed, sought and redriven,
// but not replaced or deleted (409 READ_ONLY); only "api" dispatchers are.
// Every pause (through the API, the CLI, the status page, or a
// dispatcher's own pause-after) is recorded in paused.json in the data
// root (pauses.go), so that it survives a restart whatever declared the
// dispatcher; an api dispatcher's pause is stored with it in
// dispatchers.json too. A resume removes the record.
package admin

import (
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
)

// ErrReadOnly: a change of a dispatcher declared in Go code or in the
// configuration file (409 READ_ONLY).
var ErrReadOnly = contract.NewError(contract.CodeReadOnly, "admin: dispatcher is read-only")

// Options configures an Admin.
type Options struct {
	// Defaults are mmmq.broker.dispatch, the per-dispatcher defaults.
	Defaults dispatcher.Config
	// AllowedHosts are mmmq.admin.allowed-hosts (empty: any host).
	AllowedHosts []string
	// Self refuses a host that is this broker itself (400 naming host);
	// nil: not checked.
	Self *dispatcher.Self
	// GroupTaken reports whether a consumer group uses name (a dispatcher
	// may not take a group's name); nil: none does.
	GroupTaken func(name string) bool
	Logger     *zap.Logger
	// Pauses keeps every paused dispatcher (paused.json, pauses.go), so
	// that the pause of a dispatcher declared in the configuration or in
	// Go survives a restart too; nil: only api dispatchers' pauses are
	// kept (in the SpecStore).
	Pauses *PauseFile
}

// Admin applies the admin API's changes to the running dispatchers and
// keeps the api ones in dispatchers.json. Changes are serialised; each is
// stored before it is applied, so a crash never loses an acknowledged
// change (an api change answered 2xx is in the file).
type Admin struct {
	m     *dispatcher.Manager
	set   *dispatcher.Set
	store SpecStore
	opts  Options
	// stopWatch ends the watch of a store shared by several nodes
	// (SpecWatcher); nil when there is none.
	stopWatch func()
	log       *zap.Logger

	mu sync.Mutex
	// secrets are the serialized signing secrets and keys of each api
	// dispatcher, as it was created or replaced: a Dispatcher holds parsed
	// ones, which never give their key back, and dispatchers.json must
	// keep them.
	secrets map[string]serialized
	// pauseRecs is what paused.json holds (nil until RestorePauses).
	pauseRecs map[string]PauseRecord
}

// New returns an Admin over the dispatchers of m (whose set is set),
// keeping api dispatchers in store.
func New(m *dispatcher.Manager, set *dispatcher.Set, store SpecStore, opts Options) *Admin {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	a := &Admin{m: m, set: set, store: store, opts: opts, log: opts.Logger, secrets: map[string]serialized{}}
	if opts.Pauses != nil {
		m.SetPauseHook(a.autoPaused)
	}
	return a
}

// RestorePauses reads paused.json and pauses every dispatcher of the set
// it names with its recorded reason and time; the api dispatchers it
// names are paused by Start as they are loaded. Call it before the
// dispatcher manager starts (Module does, when the graph is built), so
// that a paused dispatcher never delivers before its pause applies. An
// unreadable file is an error. Without Options.Pauses it does nothing.
func (a *Admin) RestorePauses() error {
	if a.opts.Pauses == nil {
		return nil
	}
	recs, err := a.opts.Pauses.Load()
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pauseRecs = recs
	for name, r := range recs {
		if _, ok := a.set.Get(name); !ok {
			continue // an api dispatcher (Start), or one no longer declared
		}
		if err := a.m.PauseAs(name, r.Reason, r.At); err != nil {
			return err
		}
	}
	if len(recs) > 0 {
		a.log.Info("paused dispatchers restored", zap.String("file", a.opts.Pauses.Path()), zap.Int("dispatchers", len(recs)))
	}
	return nil
}

// recordPause stores in paused.json that name is paused (rec non-nil) or
// not (a.mu held). Without Options.Pauses it does nothing.
func (a *Admin) recordPause(name string, rec *PauseRecord) error {
	if a.opts.Pauses == nil {
		return nil
	}
	if a.pauseRecs == nil {
		a.pauseRecs = map[string]PauseRecord{}
	}
	old, had := a.pauseRecs[name]
	if rec == nil && !had {
		return nil
	}
	if rec != nil {
		a.pauseRecs[name] = *rec
	} else {
		delete(a.pauseRecs, name)
	}
	if err := a.opts.Pauses.Save(a.pauseRecs); err != nil {
		if had {
			a.pauseRecs[name] = old
		} else {
			delete(a.pauseRecs, name)
		}
		return err
	}
	return nil
}

// autoPaused is the dispatcher manager's pause hook: a dispatcher pauses
// itself (pause-after); the pause is stored and audited before it
// applies. One cancelled meanwhile (a pause, resume or delete, which
// store their own record under a.mu) is not stored.
func (a *Admin) autoPaused(name string, info dispatcher.PauseInfo) {
	a.mu.Lock()
	if cur, ok := a.m.PausePending(name); !ok || cur != info {
		a.mu.Unlock()
		return
	}
	err := a.recordPause(name, &PauseRecord{Name: name, Reason: info.Reason, At: info.At})
	a.mu.Unlock()
	audit := contract.AuditLogger(a.log)
	if err != nil {
		audit.Error("dispatcher paused automatically; the pause is not stored and ends at a restart", zap.String("dispatcher", name), zap.Error(err))
		return
	}
	audit.Info("dispatcher paused automatically", zap.String("dispatcher", name), zap.String("reason", string(info.Reason)), zap.Time("at", info.At))
}

// Start loads dispatchers.json and starts its dispatchers (paused ones
// stay paused). A file that cannot be read or holds an invalid dispatcher,
// or a name already declared in Go or the configuration, is an error
// naming the file: the broker refuses to start rather than drop them.
func (a *Admin) Start() error {
	a.mu.Lock()
	restored := a.pauseRecs != nil
	a.mu.Unlock()
	if !restored {
		if err := a.RestorePauses(); err != nil {
			return err
		}
	}
	specs, err := a.store.Load()
	if err != nil {
		return err
	}
	for i, s := range specs {
		d, err := s.build(a.opts.Defaults)
		if err != nil {
			return fmt.Errorf("%s: dispatchers[%d]: %w", a.store.Path(), i, err)
		}
		if !a.hostAllowed(d.Host()) {
			// Stored before the allowed hosts were narrowed: kept (it is the
			// operator's), and said loudly.
			a.log.Warn("a stored dispatcher pushes to a host mmmq.admin.allowed-hosts does not allow; change or delete it",
				zap.String("dispatcher", d.Name()), zap.String("host", d.Host().String()), zap.Strings("allowed-hosts", a.opts.AllowedHosts))
		}
		if err := a.opts.Self.Check(d.Host()); err != nil {
			// Stored before the rule, or under another server.port: kept
			// (its pushes are refused with 508 LOOP, so it backs off).
			a.log.Warn("a stored dispatcher pushes to this broker itself; change or delete it",
				zap.String("dispatcher", d.Name()), zap.Error(err))
		}
		// Restored, not created: its start was decided when it was
		// created; a paused one never delivers before the pause applies.
		a.mu.Lock()
		rec, recorded := a.pauseRecs[d.Name()]
		a.mu.Unlock()
		if err := a.m.Restore(d, s.Paused || recorded); err != nil {
			return fmt.Errorf("%s: dispatchers[%d]: %w", a.store.Path(), i, err)
		}
		if recorded {
			if err := a.m.PauseAs(d.Name(), rec.Reason, rec.At); err != nil {
				return err
			}
		}
		a.secrets[d.Name()] = serializedOf(s)
	}
	if len(specs) > 0 {
		a.log.Info("dispatchers loaded", zap.String("file", a.store.Path()), zap.Int("dispatchers", len(specs)))
	}
	if w, ok := a.store.(SpecWatcher); ok {
		stop, err := w.Watch(a.apply)
		if err != nil {
			return fmt.Errorf("admin: watch %s: %w", a.store.Path(), err)
		}
		a.mu.Lock()
		a.stopWatch = stop
		a.mu.Unlock()
	}
	return nil
}

// Stop ends the watch of a store shared by several nodes, if any.
func (a *Admin) Stop() error {
	a.mu.Lock()
	stop := a.stopWatch
	a.stopWatch = nil
	a.mu.Unlock()
	if stop != nil {
		stop()
	}
	return nil
}

// Listed is one dispatcher as GET /mmmq/dispatchers shows it.
type Listed struct {
	Spec
	Source string `json:"source"` // "go", "config" or "api"
}

// List returns every dispatcher, sorted by name.
func (a *Admin) List() []Listed {
	var out []Listed
	for _, d := range a.set.All() {
		out = append(out, Listed{Spec: specOf(d, a.m.Paused(d.Name())), Source: d.Origin()})
	}
	return out
}

// Create adds an api dispatcher: stored, then started. Errors: 400 for an
// invalid spec or a host outside mmmq.admin.allowed-hosts, 409 NAME_TAKEN
// when a dispatcher or consumer group has the name.
func (a *Admin) Create(s Spec) (Listed, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := resolveRedacted(&s, nil, serialized{}); err != nil {
		return Listed{}, err
	}
	d, err := a.check(s)
	if err != nil {
		return Listed{}, err
	}
	if _, ok := a.set.Get(d.Name()); ok {
		return Listed{}, fmt.Errorf("%w: %s", dispatcher.ErrDispatcherExists, d.Name())
	}
	if a.opts.GroupTaken != nil && a.opts.GroupTaken(d.Name()) {
		return Listed{}, contract.NewError(contract.CodeNameTaken, fmt.Sprintf("admin: %q is the name of a consumer group (they share checkpoint files)", d.Name()))
	}
	stored := storedSpecOf(d, s.Paused, serializedOf(s))
	if err := a.save(d.Name(), &stored); err != nil {
		return Listed{}, err
	}
	add := a.m.Add
	if s.Paused {
		add = a.m.AddPaused // never delivers before the pause applies
	}
	if err := add(d); err != nil {
		a.undo(d.Name(), nil) // the file must not keep what was refused
		return Listed{}, err
	}
	a.secrets[d.Name()] = serializedOf(stored)
	a.syncPauseRecord(d.Name(), s.Paused) // a record left by an earlier dispatcher of this name must not pause it
	return Listed{Spec: specOf(d, s.Paused), Source: dispatcher.OriginAPI}, nil
}

// Replace replaces the api dispatcher of s's name (its checkpoints are
// kept). Redacted secrets and header values in s keep the current ones
// (see Spec). Errors as Create, 404 for an unknown name, 409 READ_ONLY.
func (a *Admin) Replace(name string, s Spec) (Listed, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s.Name == "" {
		s.Name = name
	}
	if s.Name != name {
		return Listed{}, contract.BadRequest("field \"name\" is %q but the path names %q: a dispatcher cannot be renamed", s.Name, name)
	}
	if err := a.writable(name); err != nil {
		return Listed{}, err
	}
	prev, _ := a.set.Get(name)
	if err := resolveRedacted(&s, prev, a.secrets[name]); err != nil {
		return Listed{}, err
	}
	d, err := a.check(s)
	if err != nil {
		return Listed{}, err
	}
	before := storedSpecOf(prev, a.m.Paused(name), a.secrets[name])
	stored := storedSpecOf(d, s.Paused, serializedOf(s))
	if err := a.save(name, &stored); err != nil {
		return Listed{}, err
	}
	if s.Paused {
		_ = a.m.Pause(name) // before the new settings run: nothing is sent with them
	}
	if err := a.m.Replace(d); err != nil {
		a.undo(name, &before) // the file must not keep what was refused
		a.setPaused(name, before.Paused)
		return Listed{}, err
	}
	a.secrets[name] = serializedOf(stored)
	a.setPaused(name, s.Paused)
	a.syncPauseRecord(name, s.Paused)
	return Listed{Spec: specOf(d, s.Paused), Source: dispatcher.OriginAPI}, nil
}

// syncPauseRecord makes paused.json agree with an api dispatcher just
// created or replaced (a.mu held): paused as the manager has it, else no
// record. dispatchers.json already holds the pause; a failure is logged.
func (a *Admin) syncPauseRecord(name string, paused bool) {
	var rec *PauseRecord
	if info, ok := a.m.PauseInfo(name); ok && paused {
		rec = &PauseRecord{Name: name, Reason: info.Reason, At: info.At}
	}
	if err := a.recordPause(name, rec); err != nil {
		a.log.Warn("the pause record does not follow an api dispatcher's change (dispatchers.json does)", zap.String("dispatcher", name), zap.Error(err))
	}
}

// Delete removes the api dispatcher name: stored, then stopped. Its
// checkpoints stay unless deleteCheckpoints. Errors: 404, 409 READ_ONLY.
func (a *Admin) Delete(name string, deleteCheckpoints bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.writable(name); err != nil {
		return err
	}
	if err := a.save(name, nil); err != nil {
		return err
	}
	if _, err := a.m.Remove(name); err != nil {
		return err
	}
	delete(a.secrets, name)
	if err := a.recordPause(name, nil); err != nil {
		a.log.Warn("a deleted dispatcher's pause stays recorded", zap.String("dispatcher", name), zap.Error(err))
	}
	if deleteCheckpoints {
		return a.m.DeleteCheckpoints(name)
	}
	return nil
}

// SetPaused pauses or resumes the dispatcher name; an api dispatcher's
// state is stored. Error: 404.
func (a *Admin) SetPaused(name string, paused bool) (Listed, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	d, ok := a.set.Get(name)
	if !ok {
		return Listed{}, fmt.Errorf("%w: %s", dispatcher.ErrUnknownDispatcher, name)
	}
	if d.Origin() == dispatcher.OriginAPI {
		s := storedSpecOf(d, paused, a.secrets[name])
		if err := a.save(name, &s); err != nil {
			return Listed{}, err
		}
	}
	var rec *PauseRecord
	if paused {
		rec = &PauseRecord{Name: name, Reason: dispatcher.PauseAdmin, At: time.Now()}
		if info, already := a.m.PauseInfo(name); already {
			rec.Reason, rec.At = info.Reason, info.At // paused before: kept as it was
		}
	}
	if err := a.recordPause(name, rec); err != nil {
		return Listed{}, err
	}
	if rec != nil {
		_ = a.m.PauseAs(name, rec.Reason, rec.At) // the time the record holds
	} else {
		a.setPaused(name, false)
	}
	return Listed{Spec: specOf(d, paused), Source: d.Origin()}, nil
}

func (a *Admin) setPaused(name string, paused bool) {
	if paused {
		_ = a.m.Pause(name)
	} else {
		_ = a.m.Resume(name)
	}
}

// writable fails unless name is an api dispatcher.
func (a *Admin) writable(name string) error {
	d, ok := a.set.Get(name)
	switch {
	case !ok:
		return fmt.Errorf("%w: %s", dispatcher.ErrUnknownDispatcher, name)
	case d.Origin() != dispatcher.OriginAPI:
		return fmt.Errorf("%w: %s is declared in %s (%s); change it there", ErrReadOnly, name, d.Origin(), d.Source())
	}
	return nil
}

// check validates s, and its host against mmmq.admin.allowed-hosts and
// the broker's own addresses.
func (a *Admin) check(s Spec) (*dispatcher.Dispatcher, error) {
	d, err := s.build(a.opts.Defaults)
	if err != nil {
		return nil, err
	}
	if err := a.opts.Self.Check(d.Host()); err != nil {
		return nil, contract.BadRequest("invalid dispatcher: host: %v", err)
	}
	if !a.hostAllowed(d.Host()) {
		return nil, contract.BadRequest("invalid dispatcher: host %s is not allowed by mmmq.admin.allowed-hosts %v", d.Host(), a.opts.AllowedHosts)
	}
	return d, nil
}

// hostAllowed reports whether h matches one of the allowed host patterns
// (hostMatches); no pattern: any host.
func (a *Admin) hostAllowed(h dispatcher.Host) bool {
	if len(a.opts.AllowedHosts) == 0 {
		return true
	}
	for _, p := range a.opts.AllowedHosts {
		if hostMatches(p, h) {
			return true
		}
	}
	return false
}

// hostMatches matches h against one allowed-hosts pattern, "host" or
// "host:port": the host is compared label by label (the parts between
// dots), each pattern label a glob where "*" matches any run of
// characters within that label, so "10.0.0.*" matches 10.0.0.7 but not
// 10.0.0.1.attacker.example and "*.svc.cluster.local" matches exactly one
// label before ".svc.cluster.local" (as a TLS wildcard does). A port,
// when given, must be equal ("*" for any). An IPv6 address matches only
// a pattern equal to it (without brackets, or "[addr]:port").
func hostMatches(pattern string, h dispatcher.Host) bool {
	port := strconv.Itoa(h.Port)
	if strings.Contains(h.Address, ":") { // IPv6
		return pattern == h.Address || pattern == "["+h.Address+"]:"+port || pattern == "["+h.Address+"]:*"
	}
	host, pport, withPort := strings.Cut(pattern, ":")
	if withPort && pport != "*" && pport != port {
		return false
	}
	pl, hl := strings.Split(host, "."), strings.Split(h.Address, ".")
	if len(pl) != len(hl) {
		return false
	}
	for i := range pl {
		if ok, err := path.Match(pl[i], hl[i]); err != nil || !ok {
			return false
		}
	}
	return true
}

// undo stores again what was there before a change the manager refused
// (logged when even that fails: the file then holds the refused change).
func (a *Admin) undo(name string, s *Spec) {
	if err := a.save(name, s); err != nil {
		a.log.Error("admin: could not take a refused change back out of the file", zap.String("dispatcher", name), zap.Error(err))
	}
}

// save writes the api dispatchers with name set to s (nil: removed), with
// their real secrets and header values (storedSpecOf).
func (a *Admin) save(name string, s *Spec) error {
	var specs []Spec
	for _, d := range a.set.All() {
		if d.Origin() != dispatcher.OriginAPI || d.Name() == name {
			continue
		}
		specs = append(specs, storedSpecOf(d, a.m.Paused(d.Name()), a.secrets[d.Name()]))
	}
	if s != nil {
		specs = append(specs, *s)
	}
	sort.Slice(specs, func(i, j int) bool { return specs[i].Name < specs[j].Name })
	if err := a.store.Save(specs); err != nil {
		return fmt.Errorf("admin: store %s: %w", a.store.Path(), err)
	}
	return nil
}
