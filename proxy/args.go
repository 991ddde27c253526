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
func rawArgs(raw []byte) iter.Seq2[[]byte, []byte] { return splitArgs(raw, "&") }

// splitArgs is rawArgs with the field separators seps.
func splitArgs(raw []byte, seps string) iter.Seq2[[]byte, []byte] {
	return func(yield func(k, v []byte) bool) {
		for len(raw) > 0 {
			var kv []byte
			if i := bytes.IndexAny(raw, seps); i >= 0 {
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
// absent (or present without a value), or errTwice when a shop could read
// another copy (argCopies).
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
	if n > 1 || argCopies(raw, name, false) > n {
		return nil, errTwice{}
	}
	if len(val) == 0 {
		return nil, nil
	}
	return val, nil
}

// rawArgHas reports whether a shop could read name (in any letter case
// with fold) from the urlencoded raw (argCopies).
func rawArgHas(raw []byte, name string, fold bool) bool {
	return argCopies(raw, name, fold) > 0
}

// argCopies counts the fields of the urlencoded raw that some shop reads as
// name, which the proxy reads as fasthttp does (red-team finds, tenth
// round): fields split on ';' as well as '&' (Rack 2, Python before 3.9.2
// and Django before 3.2 split on both and read the last copy, so
// "sku=a&x=1;sku=b" is sku b there), and names compared as PHP reads them
// too (leading spaces dropped, '.' and ' ' and an unclosed '[' read as
// '_', "name[…]" an array named name: "sku.id", "+sku" or "sku[]" are
// sku_id, sku and sku to $_GET).
func argCopies(raw []byte, name string, fold bool) int {
	var scratch, pk, pn [64]byte
	phpName := phpArgName(pn[:0], []byte(name))
	n := 0
	for k := range splitArgs(raw, "&;") {
		if len(k) == 0 {
			continue
		}
		if argKeyIs(k, name, fold, scratch[:0]) {
			n++
			continue
		}
		d := fasthttp.AppendUnquotedArg(scratch[:0], k)
		p := phpArgName(pk[:0], d)
		if len(p) == len(phpName) && (string(p) == string(phpName) || fold && bytes.EqualFold(p, phpName)) {
			n++
		}
	}
	return n
}

// phpArgName appends to dst the name PHP gives the decoded field name k
// (main/php_variables.c): leading spaces dropped, '.' and ' ' become '_',
// the name ends at a '[' that a ']' closes later (an array), and an
// unclosed '[' becomes '_'.
func phpArgName(dst, k []byte) []byte {
	k = bytes.TrimLeft(k, " ")
	for i := 0; i < len(k); i++ {
		switch c := k[i]; c {
		case '.', ' ':
			dst = append(dst, '_')
		case '[':
			if bytes.IndexByte(k[i+1:], ']') >= 0 {
				return dst
			}
			dst = append(dst, '_')
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

// multipartForm is the Content-Type of a multipart form body.
var multipartForm = []byte("multipart/form-data")

// multipartHas reports whether the request's body is a multipart form with
// a part a shop could read as name (exactly, or as PHP names it). The
// proxy does not read multipart forms: a buy deciding on name must not
// carry one (PHP's $_REQUEST, Rails and Laravel read the body's copy
// before the query's: a red-team find).
func multipartHas(ctx *fasthttp.RequestCtx, name string) bool {
	ct := ctx.Request.Header.ContentType()
	if len(ct) < len(multipartForm) || !bytes.EqualFold(ct[:len(multipartForm)], multipartForm) {
		return false
	}
	body := ctx.Request.Body()
	var pk, pn [64]byte
	phpName := phpArgName(pn[:0], []byte(name))
	for i := 0; i+5 <= len(body); i++ {
		// name= as a Content-Disposition parameter (not filename=).
		if !bytes.EqualFold(body[i:i+5], []byte("name=")) || i > 0 && body[i-1] != ';' && body[i-1] != ' ' && body[i-1] != '\t' {
			continue
		}
		v := body[i+5:]
		if len(v) > 0 && v[0] == '"' {
			v = v[1:]
			if j := bytes.IndexByte(v, '"'); j >= 0 {
				v = v[:j]
			}
		} else if j := bytes.IndexAny(v, ";\r\n"); j >= 0 {
			v = v[:j]
		}
		if string(v) == name || string(phpArgName(pk[:0], v)) == string(phpName) {
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
