package identity

import (
	"testing"
)

func TestCanonicalID(t *testing.T) {
	fold := Canon{CaseFold: true}
	num := Canon{Numeric: true}
	tests := []struct {
		name   string
		give   string
		canon  Canon
		want   string
		wantOK bool
	}{
		{"plain", "alice", Canon{}, "alice", true},
		{"trailing space", "alice ", Canon{}, "alice", true},
		{"surrounding tabs and newlines", "\t alice\r\n", Canon{}, "alice", true},
		{"unicode spaces", "\u3000alice\u00a0\u2003", Canon{}, "alice", true},
		{"inner space kept", "al ice", Canon{}, "al ice", true},
		{"case kept without fold", "Alice", Canon{}, "Alice", true},
		{"only space", "   ", Canon{}, "", true},
		{"nfd to nfc", "e\u0301", Canon{}, "\u00e9", true},
		{"nfc kept", "\u00e9", Canon{}, "\u00e9", true},
		{"invalid utf8", "a\xffb", Canon{}, "", false},
		{"fold ascii", "ALICE", fold, "alice", true},
		{"fold mixed", " Alice ", fold, "alice", true},
		{"fold unicode", "ÉLODIE", fold, "élodie", true},
		{"fold nfd input", "E\u0301LODIE", fold, "élodie", true},
		{"fold sharp s", "STRASSE", fold, "strasse", true},
		{"fold sharp s 2", "straße", fold, "strasse", true},
		{"fold kelvin", "\u212a", fold, "k", true},
		{"fold greek sigma", "ΣΊΣΥΦΟΣ", fold, "σίσυφοσ", true},
		{"numeric", "7", num, "7", true},
		{"numeric leading zeros", "007", num, "7", true},
		{"numeric zero", "0", num, "0", true},
		{"numeric zeros", "000", num, "0", true},
		{"numeric spaced", " 0042 ", num, "42", true},
		{"numeric letter", "7a", num, "", false},
		{"numeric sign", "-7", num, "", false},
		{"numeric fullwidth", "\uff17", num, "", false},
		{"numeric unicode space", "\u00a0007", num, "7", true},
		{"numeric empty", "", num, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := CanonicalID([]byte(tt.give), tt.canon)
			if ok != tt.wantOK || (ok && string(got) != tt.want) {
				t.Fatalf("CanonicalID(%q, %+v) = %q, %v; want %q, %v", tt.give, tt.canon, got, ok, tt.want, tt.wantOK)
			}
			s, ok := CanonicalString(tt.give, tt.canon)
			if ok != tt.wantOK || (ok && s != tt.want) {
				t.Fatalf("CanonicalString(%q) = %q, %v", tt.give, s, ok)
			}
		})
	}
}

// TestCanonicalIDIdempotent: a canonical id is its own canonical form, so
// operators may paste an id the proxy logged or forwarded.
func TestCanonicalIDIdempotent(t *testing.T) {
	for _, c := range []Canon{{}, {CaseFold: true}, {Numeric: true}} {
		for _, s := range []string{"Alice ", "e\u0301", "ΣΊΣΥΦΟΣ", "straße", "0070", "\u212aelvin", "ǅ"} {
			once, ok := CanonicalString(s, c)
			if !ok {
				continue
			}
			twice, ok := CanonicalString(once, c)
			if !ok || twice != once {
				t.Errorf("%+v: %q -> %q -> %q", c, s, once, twice)
			}
		}
	}
}

// TestCanonicalIDNoAllocASCII: the common id (ASCII, no surrounding space)
// costs no allocation, with or without options when nothing changes.
func TestCanonicalIDNoAllocASCII(t *testing.T) {
	raw := []byte("user-12345")
	digits := []byte("12345")
	for _, tt := range []struct {
		c   Canon
		raw []byte
	}{{Canon{}, raw}, {Canon{CaseFold: true}, raw}, {Canon{Numeric: true}, digits}, {Canon{}, []byte(" padded ")}} {
		n := testing.AllocsPerRun(100, func() {
			if _, ok := CanonicalID(tt.raw, tt.c); !ok {
				t.Fatal("refused")
			}
		})
		if n != 0 {
			t.Errorf("%+v %q: %v allocs per call, want 0", tt.c, tt.raw, n)
		}
	}
}

func FuzzCanonicalID(f *testing.F) {
	for _, s := range []string{"alice", " Alice ", "e\u0301", "007", "\xff", "ΣΊΣΥΦΟΣ"} {
		f.Add(s, false, false)
	}
	f.Fuzz(func(t *testing.T, s string, fold, num bool) {
		c := Canon{CaseFold: fold, Numeric: num}
		once, ok := CanonicalString(s, c)
		if !ok {
			return
		}
		twice, ok := CanonicalString(once, c)
		if !ok || twice != once {
			t.Fatalf("not idempotent: %q -> %q -> %q (%v)", s, once, twice, ok)
		}
	})
}

func BenchmarkCanonicalID(b *testing.B) {
	for _, bb := range []struct {
		name string
		raw  string
		c    Canon
	}{
		{"ascii", "user-1234567", Canon{}},
		{"ascii_fold_lower", "user-1234567", Canon{CaseFold: true}},
		{"ascii_numeric", "1234567", Canon{Numeric: true}},
		{"ascii_fold_upper", "User-1234567", Canon{CaseFold: true}},
		{"unicode_nfc", "élodie-123", Canon{}},
		{"unicode_fold", "Élodie-123", Canon{CaseFold: true}},
	} {
		raw := []byte(bb.raw)
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				CanonicalID(raw, bb.c)
			}
		})
	}
}
