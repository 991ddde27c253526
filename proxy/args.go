package proxy

import (
	"bytes"
	"iter"

	"github.com/valyala/fasthttp"
)

// The query: and form: extractors read one name from the query string or
// an urlencoded body. fasthttp's ctx.QueryArgs and ctx.PostArgs parse every
// field into the request's Args, whose tables a connection keeps for its
// whole life: one 64 KiB body of "a&a&…" left 2 MiB on an idle connection
// (red-team finding, docs/decisions.md §34). These scan the raw bytes for
// the one name instead, reading them as fasthttp's Args does ('&'
// separates, the first '=' ends the key, '%XX' and '+' decoded in keys and
// values), and keep nothing.

// formContentType is the Content-Type whose body fasthttp's PostArgs reads.
var formContentType = []byte("application/x-www-form-urlencoded")

// queryString is the request's raw query string.
func queryString(ctx *fasthttp.RequestCtx) []byte { return ctx.URI().QueryString() }

// formBody is the request's body when it is an urlencoded form (read by
// then: buy bodies are buffered before any extractor), else nil.
func formBody(ctx *fasthttp.RequestCtx) []byte {
	ct := ctx.Request.Header.ContentType()
	if len(ct) < len(formContentType) || !bytes.EqualFold(ct[:len(formContentType)], formContentType) {
		return nil
	}
	return ctx.Request.Body()
}

// rawArgs yields the raw key and value of each '&'-separated field of an
// urlencoded string, as fasthttp's Args splits them (the first '=' ends
// the key).
func rawArgs(raw []byte) iter.Seq2[[]byte, []byte] {
	return func(yield func(k, v []byte) bool) {
		for len(raw) > 0 {
			var kv []byte
			if i := bytes.IndexByte(raw, '&'); i >= 0 {
				kv, raw = raw[:i], raw[i+1:]
			} else {
				kv, raw = raw, nil
			}
			k, v, _ := bytes.Cut(kv, []byte("="))
			if !yield(k, v) {
				return
			}
		}
	}
}

// rawArgOnce returns name's decoded value in the urlencoded raw, nil when
// absent (or present without a value), or errTwice when it is there more
// than once.
func rawArgOnce(raw []byte, name string) ([]byte, error) {
	var val []byte
	n := 0
	var scratch [64]byte
	for k, v := range rawArgs(raw) {
		if argKeyIs(k, name, false, scratch[:0]) {
			n++
			val = fasthttp.AppendUnquotedArg(val[:0], v)
		}
	}
	if n > 1 {
		return nil, errTwice{}
	}
	if len(val) == 0 {
		return nil, nil
	}
	return val, nil
}

// rawArgHas reports whether name (in any letter case with fold) is a key
// of the urlencoded raw.
func rawArgHas(raw []byte, name string, fold bool) bool {
	var scratch [64]byte
	for k := range rawArgs(raw) {
		if argKeyIs(k, name, fold, scratch[:0]) {
			return true
		}
	}
	return false
}

// argKeyIs reports whether the raw key k decodes to name. A key with no
// escape is compared as it is; one with escapes is decoded into scratch
// only when it could be long enough.
func argKeyIs(k []byte, name string, fold bool, scratch []byte) bool {
	if bytes.IndexByte(k, '%') >= 0 || bytes.IndexByte(k, '+') >= 0 {
		if len(k) < len(name) {
			return false
		}
		k = fasthttp.AppendUnquotedArg(scratch, k)
	}
	if len(k) != len(name) {
		return false
	}
	if fold {
		return bytes.EqualFold(k, []byte(name))
	}
	return string(k) == name
}
