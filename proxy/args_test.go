package proxy

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// rawArgsAgree checks the raw scanners against fasthttp's Args, which
// they replace: the same value or errTwice, the same presence.
func rawArgsAgree(t *testing.T, raw, name string) {
	t.Helper()
	var a fasthttp.Args
	a.Parse(raw)
	var want []byte
	n := 0
	for k, v := range a.All() {
		if string(k) == name {
			want = v
			n++
		}
	}
	got, err := rawArgOnce([]byte(raw), name)
	extra := argCopies([]byte(raw), name, true) > n // copies other shops read (';', PHP names, any case)
	switch {
	case n > 1 || extra:
		if err == nil {
			t.Fatalf("%q %q: %q, want errTwice (Args has it %d times, other readings more)", raw, name, got, n)
		}
	case err != nil:
		t.Fatalf("%q %q: %v, want %q", raw, name, err, want)
	case !bytes.Equal(got, want):
		t.Fatalf("%q %q: %q, want %q", raw, name, got, want)
	}
	if has := rawArgHas([]byte(raw), name, true); has != (a.Has(name) || extra) {
		t.Fatalf("%q %q: has %v, Args.Has %v", raw, name, has, a.Has(name))
	}
}

// TestRawArgsOtherShopsReadings: copies fasthttp does not see but a shop
// reads (Rack 2's ';', PHP's renamed names) make the field ambiguous.
func TestRawArgsOtherShopsReadings(t *testing.T) {
	for _, c := range []struct{ raw, name string }{
		{"sku=cheap&x=1;sku=rare", "sku"}, {"sku=cheap&x;sku=rare", "sku"}, {"sku_id=a&sku.id=b", "sku_id"},
		{"sku_id=a&sku+id=b", "sku_id"}, {"sku_id=a&sku%20id=b", "sku_id"}, {"sku_id=a&sku[id=b", "sku_id"},
		{"sku=a&+sku=b", "sku"}, {"sku=a&%20sku=b", "sku"}, {"sku=a&sku[]=b", "sku"}, {"qty[x]=3", "qty"},
	} {
		if v, err := rawArgOnce([]byte(c.raw), c.name); err == nil {
			t.Errorf("%q: %s = %q, want errTwice", c.raw, c.name, v)
		}
	}
	for _, c := range []struct{ raw, name, want string }{
		{"sku=a&skus=b", "sku", "a"}, {"sku=a&sku_x=b", "sku", "a"}, {"sku=a;b", "sku", "a;b"},
	} {
		if v, err := rawArgOnce([]byte(c.raw), c.name); err != nil || string(v) != c.want {
			t.Errorf("%q: %s = %q %v, want %q", c.raw, c.name, v, err, c.want)
		}
	}
}

var rawArgCases = []struct{ raw, name string }{
	{"sku=a", "sku"}, {"sku=a&sku=b", "sku"}, {"s%6Bu=x", "sku"}, {"sk+u=x", "sk u"},
	{"sku", "sku"}, {"sku=", "sku"}, {"&&sku=a&&", "sku"}, {"sku=a%2", "sku"}, {"sku=%zz+b", "sku"},
	{"a=1&b=2", "sku"}, {"=x&sku==y", "sku"}, {"sku=a=b", "sku"}, {"%73ku=1&sku=2", "sku"},
	{"", "sku"}, {"SKU=1", "sku"}, {"sku%3D1=2", "sku=1"},
}

func TestRawArgsAsFasthttpArgs(t *testing.T) {
	for _, c := range rawArgCases {
		rawArgsAgree(t, c.raw, c.name)
	}
	if !rawArgHas([]byte("a=1&_METHOD=put"), "_method", true) || rawArgHas([]byte("a=1&_METHOD=put"), "_method", false) {
		t.Fatal("fold")
	}
}

func FuzzRawArgs(f *testing.F) {
	for _, c := range rawArgCases {
		f.Add(c.raw, c.name)
	}
	f.Fuzz(func(t *testing.T, raw, name string) {
		if name == "" || strings.ContainsAny(name, "&;=") {
			return // not a name a config can give (validation: a token)
		}
		rawArgsAgree(t, raw, name)
	})
}

func TestLateToSend(t *testing.T) {
	stamp := time.Unix(1000, 0)
	pending, up := 3*time.Second, 500*time.Millisecond // the least allowed: 2×0.5 s + 2 s
	for _, c := range []struct {
		age  time.Duration
		late bool
	}{{0, false}, {500 * time.Millisecond, false}, {time.Second, false}, {1001 * time.Millisecond, true}, {4 * time.Second, true}} {
		if got := lateToSend(stamp, stamp.Add(c.age), pending, up); got != c.late {
			t.Errorf("age %v: late %v, want %v", c.age, got, c.late)
		}
	}
	if lateToSend(time.Time{}, stamp, pending, up) {
		t.Error("a decision without a stamp is never late")
	}
}
