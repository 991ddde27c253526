package jsonptr

import "testing"

func TestPX12PresentHasKey(t *testing.T) {
	v, err := Decode([]byte(`{"qty":[3],"n":null,"o":{"a":[1,{"b":false}]},"S":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{"/qty": true, "/n": true, "/o/a/1/b": true, "/o/a/2": false, "/none": false,
		"/qty/0": true, "/qty/x": false, "/S/x": false, "": true} {
		if got := Present(v, Split(p)); got != want {
			t.Errorf("Present %q = %v, want %v", p, got, want)
		}
	}
	for k, want := range map[string]bool{"qty": true, "QTY": true, "s": true, "\u017f": true, "o": true, "x": false} {
		if got := HasKey(v, k); got != want {
			t.Errorf("HasKey %q = %v, want %v", k, got, want)
		}
	}
	if HasKey([]any{"qty"}, "qty") || HasKey("qty", "qty") {
		t.Error("HasKey of no object")
	}
}
