package jsonptr

import "testing"

func TestFind(t *testing.T) {
	doc := []byte(`{"order_id":123456789012345678,"a":{"b/c":["x",{"d":"y"}]},"m~n":"z","f":1.5,"o":{}}`)
	tests := []struct {
		name, ptr, want string
		ok              bool
	}{
		{"number kept exact", "/order_id", "123456789012345678", true},
		{"escaped slash and array", "/a/b~1c/1/d", "y", true},
		{"array index", "/a/b~1c/0", "x", true},
		{"escaped tilde", "/m~0n", "z", true},
		{"float", "/f", "1.5", true},
		{"object is not a value", "/o", "", false},
		{"missing", "/nope", "", false},
		{"index out of range", "/a/b~1c/5", "", false},
		{"bad index", "/a/b~1c/x", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Find(doc, tt.ptr)
			if got != tt.want || ok != tt.ok {
				t.Fatalf("Find(%q) = %q, %v; want %q, %v", tt.ptr, got, ok, tt.want, tt.ok)
			}
		})
	}
	if _, ok := Find([]byte(`{bad`), "/a"); ok {
		t.Fatal("malformed JSON found a value")
	}
}

func TestSet(t *testing.T) {
	m := map[string]any{}
	Set(m, "/a/b", "v")
	Set(m, "/c", 1)
	if m["a"].(map[string]any)["b"] != "v" || m["c"] != 1 {
		t.Fatalf("Set: %v", m)
	}
}

func TestDecodeStrict(t *testing.T) {
	for _, ok := range []string{`{"a":1,"b":{"a":2,"c":[{"a":3},{"a":4}]},"c":"a"}`, `[1,{"x":1},{"x":2}]`, `"s"`, ` {"a":{}} `, `{"a":[],"b":[[]]}`} {
		if _, err := DecodeStrict([]byte(ok)); err != nil {
			t.Errorf("DecodeStrict(%s): %v", ok, err)
		}
	}
	for _, bad := range []string{`{"qty":1} {"qty":3}`, `{"a":1}x`, `{"a":`, `{"a":1,}`, `[1,]`} {
		if _, err := DecodeStrict([]byte(bad)); err == nil {
			t.Errorf("DecodeStrict(%s): no error", bad)
		}
	}
	// A key held twice is Twice wherever a path meets it, and nowhere else.
	for _, c := range []struct {
		doc, path string
		want      bool
	}{
		{`{"qty":1,"qty":3}`, "/qty", true},
		{`{"item":{"sku":"a","sku":"b"}}`, "/item/sku", true},
		{`[{"a":1,"b":2,"a":3}]`, "/0/a", true},
		{`[{"a":1,"b":2,"a":3}]`, "/0/b", false},
		{`{"a":{"x":1},"a":2}`, "/a/x", true},
		{`{"Qty":1,"qty":3}`, "/qty", true},
		{`{"Qty":1,"QTY":3}`, "/qty", true},
		{`{"sku":"s","attrs":{"Color":"red","color":"red"}}`, "/sku", false},
		{`{"sku":"s","attrs":{"Color":"red","color":"red"}}`, "/attrs/color", true},
		{`{"sku":"s","Note":"a","note":"a"}`, "/sku", false},
	} {
		v, err := DecodeStrict([]byte(c.doc))
		if err != nil {
			t.Errorf("DecodeStrict(%s): %v", c.doc, err)
			continue
		}
		if got := Ambiguous(v, Split(c.path)); got != c.want {
			t.Errorf("Ambiguous(%s, %s) = %v, want %v", c.doc, c.path, got, c.want)
		}
		if s, ok := Lookup(v, Split(c.path)); c.want && ok {
			t.Errorf("Lookup(%s, %s) = %q: a value held twice", c.doc, c.path, s)
		}
	}
}

func TestFoldedOnly(t *testing.T) {
	v, err := DecodeStrict([]byte(`{"QTY":3,"a":{"Sku":"x"},"l":[{"Q":1}],"qty2":1}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		p    string
		want bool
	}{{"/qty", true}, {"/QTY", false}, {"/a/sku", true}, {"/a/Sku", false}, {"/l/0/q", true}, {"/nope", false}, {"/qty2", false}, {"/a/sku/x", true}} {
		if got := FoldedOnly(v, Split(c.p)); got != c.want {
			t.Errorf("%s: %v, want %v", c.p, got, c.want)
		}
	}
}
