package dispatcher

import (
	"reflect"
	"testing"
)

func TestOptionsFromConfigDefaults(t *testing.T) {
	got := OptionsFromConfig(ConfigSection.Default()).WithDefaults()
	got.resendsSet = false // marks max-resends as given (0 would mean no resend)
	if want := (Options{}).WithDefaults(); !reflect.DeepEqual(got, want) {
		t.Errorf("from ConfigSection.Default() = %+v, want the zero-value defaults %+v", got, want)
	}
}

// Every key of mmmq.broker.dispatch reaches Options: each field of
// Config is changed on its own (found by reflection, so a key
// added later is covered) and the Options must change with it; a key the
// mapping forgets leaves them equal and fails by name.
func TestOptionsFromConfigEveryKey(t *testing.T) {
	base := ConfigSection.Default()
	want := OptionsFromConfig(base)
	typ := reflect.TypeFor[Config]()
	for i := range typ.NumField() {
		d := base
		f := reflect.ValueOf(&d).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(f.String() + "/changed")
		case reflect.Int, reflect.Int64:
			f.SetInt(f.Int() + 1)
		case reflect.Bool:
			f.SetBool(!f.Bool())
		default:
			t.Fatalf("%s: kind %s: teach this test to change it", typ.Field(i).Tag.Get("koanf"), f.Kind())
		}
		if reflect.DeepEqual(OptionsFromConfig(d), want) {
			t.Errorf("mmmq.broker.dispatch.%s does not reach Options", typ.Field(i).Tag.Get("koanf"))
		}
	}
}

// max-resends: 0 means one attempt, through every WithDefaults on the way
// (NewManager applies it again).
func TestOptionsFromConfigZeroResends(t *testing.T) {
	d := ConfigSection.Default()
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
