package admin

import (
	"reflect"
	"sort"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/dispatcher"
)

// apply makes this node's api dispatchers what another node stored in a
// store shared by several broker nodes (SpecWatcher): new ones start from
// the checkpoints the creating node wrote, changed ones are replaced
// (checkpoints kept) and paused or resumed, and those no longer stored stop
// (their checkpoints stay, as after a delete without deleteCheckpoints).
// Dispatchers declared in Go code or the configuration are never touched: a
// stored one with such a name is logged and skipped, as is one that does
// not build here.
func (a *Admin) apply(specs []Spec) {
	a.mu.Lock()
	defer a.mu.Unlock()
	want := make(map[string]bool, len(specs))
	for _, s := range specs {
		want[s.Name] = true
	}
	for _, d := range a.set.All() {
		if d.Origin() != dispatcher.OriginAPI || want[d.Name()] {
			continue
		}
		if _, err := a.m.Remove(d.Name()); err != nil {
			a.log.Error("could not stop a dispatcher deleted through another node", zap.String("dispatcher", d.Name()), zap.Error(err))
			continue
		}
		delete(a.secrets, d.Name())
		a.log.Info("dispatcher deleted through another node", zap.String("dispatcher", d.Name()))
	}
	sorted := append([]Spec(nil), specs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for _, s := range sorted {
		a.applyOne(s)
	}
}

// applyOne starts or updates the api dispatcher s (apply).
func (a *Admin) applyOne(s Spec) {
	log := a.log.With(zap.String("dispatcher", s.Name))
	d, err := s.build(a.opts.Defaults)
	if err != nil {
		log.Error("a dispatcher stored through another node does not build here; skipped", zap.Error(err))
		return
	}
	cur, exists := a.set.Get(s.Name)
	if exists && cur.Origin() != dispatcher.OriginAPI {
		log.Warn("a dispatcher stored through another node has the name of one declared here in "+cur.Origin()+"; this node keeps its own",
			zap.String("source", cur.Source()))
		return
	}
	if exists && reflect.DeepEqual(storedSpecOf(cur, a.m.Paused(s.Name), a.secrets[s.Name]), storedSpecOf(d, s.Paused, serializedOf(s))) {
		return // unchanged (this node's own save, seen again)
	}
	if !exists {
		err = a.m.Restore(d, s.Paused)
	} else {
		if s.Paused {
			_ = a.m.Pause(s.Name) // before the new settings run
		}
		err = a.m.Replace(d)
		a.setPaused(s.Name, s.Paused)
	}
	if err != nil {
		log.Error("could not apply a dispatcher changed through another node", zap.Error(err))
		return
	}
	a.secrets[s.Name] = serializedOf(s)
	log.Info("dispatcher changed through another node applied", zap.Bool("created", !exists), zap.Bool("paused", s.Paused))
}
