// Package identity turns what a request says about its buyer into the id
// every later stage uses. canon.go is the canonical form shared by every
// identity source (header, cookie, query, JWT claim, session): it knows no
// HTTP and no config, so each source and each operator tool (admin API,
// CLI blocklists) can call it alike.
package identity

import (
	"bytes"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// Canon is how one source's ids are made canonical. The zero value trims
// white space and applies Unicode NFC, nothing more.
type Canon struct {
	// CaseFold applies Unicode case folding, so "Alice" and "alice" (and
	// "STRASSE" and "straße") are one user.
	CaseFold bool
	// Numeric accepts ASCII digits only and drops leading zeros, so "007"
	// and "7" are one user ("0" stays "0"). Anything else is not an id.
	Numeric bool
}

// folder is stateless and safe for concurrent use (cases.Fold's doc).
var folder = cases.Fold()

// CanonicalID returns raw's canonical form under c, and false when raw
// cannot be an id: invalid UTF-8, or a non-digit under Numeric. The result
// may be empty (raw was only white space); callers decide what an empty id
// means. Steps, in order: trim white space (ASCII and Unicode), NFC, case
// folding (NFD, fold, then NFC again: folding may leave a string that is
// not NFC), numeric.
//
// The common case costs nothing: ASCII with no surrounding space, no
// uppercase letter under CaseFold and no leading zero under Numeric is
// returned as raw itself, with no allocation. The result may alias raw.
func CanonicalID(raw []byte, c Canon) ([]byte, bool) {
	b := raw
	ascii := true
	for _, ch := range b {
		if ch >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		b = trimASCII(b)
		// ASCII is always NFC; simple and full folding of ASCII are the
		// same lowering.
		switch {
		case c.Numeric:
			return numeric(b)
		case c.CaseFold:
			return lowerASCII(b), true
		}
		return b, true
	}
	if !utf8.Valid(b) {
		return nil, false
	}
	b = bytes.TrimFunc(b, unicode.IsSpace)
	if c.CaseFold {
		b = norm.NFC.Bytes(folder.Bytes(norm.NFD.Bytes(b)))
	} else if !norm.NFC.IsNormal(b) {
		b = norm.NFC.Bytes(b)
	}
	if c.Numeric {
		// NFC keeps fullwidth and other scripts' digits as they are:
		// not ASCII digits, so not a numeric id.
		return numeric(b)
	}
	return b, true
}

// CanonicalString is CanonicalID for a string (operator input, JWT claims).
func CanonicalString(s string, c Canon) (string, bool) {
	b, ok := CanonicalID([]byte(s), c)
	if !ok {
		return "", false
	}
	return string(b), true
}

// trimASCII trims ASCII white space (the Unicode white space of ASCII:
// \t \n \v \f \r and space).
func trimASCII(b []byte) []byte {
	for len(b) > 0 && isASCIISpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isASCIISpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

func isASCIISpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// lowerASCII lowers b, copying only when a letter changes.
func lowerASCII(b []byte) []byte {
	for i, ch := range b {
		if 'A' <= ch && ch <= 'Z' {
			out := make([]byte, len(b))
			copy(out, b[:i])
			for j := i; j < len(b); j++ {
				ch := b[j]
				if 'A' <= ch && ch <= 'Z' {
					ch += 'a' - 'A'
				}
				out[j] = ch
			}
			return out
		}
	}
	return b
}

// numeric checks b is ASCII digits and drops leading zeros ("0" stays "0").
// It never copies: the result is a suffix of b.
func numeric(b []byte) ([]byte, bool) {
	if len(b) == 0 {
		return b, true // empty: the caller's "missing", not a bad digit
	}
	for _, ch := range b {
		if ch < '0' || ch > '9' {
			return nil, false
		}
	}
	i := 0
	for i < len(b)-1 && b[i] == '0' {
		i++
	}
	return b[i:], true
}
