// Package jsonptr resolves RFC 6901 JSON pointers in decoded JSON: where
// the config says a SKU, a qty or the shop's order id is found
// (`json:/pointer`).
package jsonptr

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Split turns a pointer ("/a/b~1c") into unescaped tokens (["a", "b/c"]);
// "" and "/" mean the whole document.
func Split(p string) []string {
	if p == "" || p == "/" {
		return nil
	}
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i, s := range parts {
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
	}
	return parts
}

// Lookup resolves tokens in a value decoded with UseNumber; strings and
// numbers come back as their text, anything else (or nothing) as "", false.
func Lookup(v any, tokens []string) (string, bool) {
	for _, tok := range tokens {
		switch x := v.(type) {
		case map[string]any:
			v = x[tok]
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return "", false
			}
			v = x[i]
		default:
			return "", false
		}
	}
	switch x := v.(type) {
	case string:
		return x, true
	case json.Number:
		return x.String(), true
	}
	return "", false
}

// Present reports whether tokens resolve to a value in v, whatever it is
// (null, an object or an array included): Lookup's "", false is then a
// value a buy cannot use, not an absent one ({"qty":[3]} is 3 to
// JavaScript's Number, {"qty":true} is 1 and null 0).
func Present(v any, tokens []string) bool {
	for _, tok := range tokens {
		var ok bool
		if v, ok = step(v, tok); !ok {
			return false
		}
	}
	return true
}

// step follows one token into v: an object's key as spelled or an array's
// index; ok is false when there is none.
func step(v any, tok string) (any, bool) {
	switch x := v.(type) {
	case map[string]any:
		w, ok := x[tok]
		return w, ok
	case []any:
		i, err := strconv.Atoi(tok)
		if err != nil || i < 0 || i >= len(x) {
			return nil, false
		}
		return x[i], true
	}
	return nil, false
}

// HasKey reports whether v is an object with the key k, in any letter
// case (as foldKey folds): a body's top-level key, which Laravel's
// $request->input() and Rails' params merge with the query's fields.
func HasKey(v any, k string) bool {
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	if _, ok := m[k]; ok {
		return true
	}
	f := foldKey(k)
	for mk := range m {
		if foldKey(mk) == f {
			return true
		}
	}
	return false
}

// FoldedOnly reports whether the path, absent from v as spelled, is there
// with a key in another letter case at some step ({"QTY": 3} for /qty):
// encoding/json matches keys to fields in any case and would read it, PHP's
// json_decode would not. A buy's field spelled so is ambiguous (a red-team
// find: the proxy took qty 1, a Go shop read 3).
func FoldedOnly(v any, tokens []string) bool {
	for _, tok := range tokens {
		switch x := v.(type) {
		case map[string]any:
			if w, ok := x[tok]; ok {
				v = w
				continue
			}
			f := foldKey(tok)
			for k := range x {
				if foldKey(k) == f {
					return true
				}
			}
			return false
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return false
			}
			v = x[i]
		default:
			return false
		}
	}
	return false
}

// Decode parses one JSON document keeping numbers exact (json.Number).
func Decode(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

// foldKey is k with letter case folded as encoding/json matches keys to
// struct fields (simple Unicode folding: K, k and the Kelvin sign are one).
func foldKey(k string) string { return strings.ToLower(strings.ToUpper(k)) }

// Twice stands, in a document DecodeStrict decoded, for every copy of a
// key that an object holds more than once (letter case aside): parsers
// disagree on which copy wins (encoding/json and PHP take the last, others
// the first; encoding/json matches struct fields in any case), so none of
// them is a value to judge a buy by. Lookup finds no value there and
// Ambiguous reports the path; a twice-held key nobody reads ({"attrs":
// {"Color":"red","color":"red"}}, an app's metadata) costs nothing.
type Twice struct{}

// DecodeStrict is Decode for a document others read too (a buy's body,
// which the shop parses after the proxy judged it): anything after the
// document is an error, and every copy of a key held twice in one object,
// at any depth, is decoded as Twice.
func DecodeStrict(data []byte) (any, error) {
	if !utf8.Valid(data) {
		// encoding/json reads each invalid byte as U+FFFD; a parser
		// without the overlong check (jackson-core before 2.23) reads
		// "\xc1\xb1ty" as "qty" (red-team finding jd13). JSON is UTF-8.
		return nil, errors.New("jsonptr: not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := strictValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("jsonptr: data after the document")
	}
	return v, nil
}

// MaxDepth bounds how deep DecodeStrict follows nested objects and
// arrays: a 64 KiB body of 32,768 nested arrays grew a worker's stack to
// 8 MiB (red-team finding jd13). A buy's body needs a few levels.
const MaxDepth = 64

// strictValue decodes the next value of dec (at nesting depth),
// marking twice-held keys.
func strictValue(dec *json.Decoder, depth int) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); ok && (d == '{' || d == '[') && depth >= MaxDepth {
		return nil, fmt.Errorf("jsonptr: nested deeper than %d", MaxDepth)
	}
	switch tok {
	case json.Delim('{'):
		m := map[string]any{}
		var first map[string]string // folded key -> its first spelling
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			k, ok := kt.(string)
			if !ok {
				return nil, fmt.Errorf("jsonptr: object key %v is not a string", kt)
			}
			val, err := strictValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			f := foldKey(k)
			if k0, dup := first[f]; dup {
				m[k0], m[k] = Twice{}, Twice{}
				continue
			}
			if first == nil {
				first = map[string]string{}
			}
			first[f] = k
			m[k] = val
		}
		if _, err := dec.Token(); err != nil { // '}'
			return nil, err
		}
		return m, nil
	case json.Delim('['):
		a := []any{}
		for dec.More() {
			val, err := strictValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			a = append(a, val)
		}
		if _, err := dec.Token(); err != nil { // ']'
			return nil, err
		}
		return a, nil
	}
	return tok, nil // a string, json.Number, bool or nil
}

// Ambiguous reports whether the path meets a key held twice (Twice) in v,
// at its end or on the way.
func Ambiguous(v any, tokens []string) bool {
	for _, tok := range tokens {
		w, ok := step(v, tok)
		if !ok {
			// Another spelling held twice is read by a shop that folds
			// case: as ambiguous as the spelling itself.
			if m, isMap := v.(map[string]any); isMap {
				f := foldKey(tok)
				for k, w := range m {
					if _, twice := w.(Twice); twice && foldKey(k) == f {
						return true
					}
				}
			}
			return false
		}
		if _, twice := w.(Twice); twice {
			return true
		}
		v = w
	}
	return false
}

// Find decodes data and resolves the pointer p in it.
func Find(data []byte, p string) (string, bool) {
	v, err := Decode(data)
	if err != nil {
		return "", false
	}
	return Lookup(v, Split(p))
}

// Set stores v at pointer p inside m, creating objects on the way.
func Set(m map[string]any, p string, v any) {
	parts := Split(p)
	if len(parts) == 0 {
		return
	}
	for _, k := range parts[:len(parts)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[parts[len(parts)-1]] = v
}
