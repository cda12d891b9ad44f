package dispatcher

import (
	"testing"

	"github.com/mmmq/mmmq/modules/config"
)

func TestOptionsFromConfigDefaults(t *testing.T) {
	got := OptionsFromConfig(config.Default().MMMQ.Broker.Dispatch).WithDefaults()
	want := Options{}.WithDefaults()
	if got.MaxResends != want.MaxResends || got.BackoffInitial != want.BackoffInitial ||
		got.BackoffMax != want.BackoffMax || got.DefaultTimeout != want.DefaultTimeout ||
		got.MaxResponseBytes != want.MaxResponseBytes || got.DefaultPath != want.DefaultPath ||
		got.BatchSize != want.BatchSize {
		t.Errorf("from config.Default() = %+v, want the zero-value defaults %+v", got, want)
	}
}

// max-resends: 0 means one attempt, through every WithDefaults on the way
// (NewManager applies it again).
func TestOptionsFromConfigZeroResends(t *testing.T) {
	d := config.Default().MMMQ.Broker.Dispatch
	d.MaxResends = 0
	o := OptionsFromConfig(d)
	if o.MaxResends != 0 || o.WithDefaults().MaxResends != 0 || o.WithDefaults().WithDefaults().MaxResends != 0 {
		t.Errorf("max-resends 0 → %d", o.WithDefaults().MaxResends)
	}
	if m := NewManager(nil, nil, nil, o.WithDefaults(), nil); m.opts.MaxResends != 0 {
		t.Errorf("manager MaxResends = %d, want 0", m.opts.MaxResends)
	}
	if o := (Options{}).WithMaxResends(0).WithDefaults(); o.MaxResends != 0 {
		t.Errorf("WithMaxResends(0) → %d", o.MaxResends)
	}
	if o := (Options{MaxResends: -1}).WithDefaults().WithDefaults(); o.MaxResends != 0 {
		t.Errorf("-1 twice defaulted → %d, want 0", o.MaxResends)
	}
	d.MaxResends = 5
	if o := OptionsFromConfig(d).WithDefaults(); o.MaxResends != 5 {
		t.Errorf("max-resends 5 → %d", o.MaxResends)
	}
}
