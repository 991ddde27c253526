package proxy

import (
	"bytes"
	"strings"

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

// nextArg splits the first field off an urlencoded raw, fields separated
// by any byte of seps ("&" as fasthttp's Args splits them): its raw key
// and value (the first '=' ends the key) and the rest. A loop, not an
// iterator: the iterator's closure cost an allocation per scan.
func nextArg(raw []byte, seps string) (k, v, rest []byte) {
	var kv []byte
	if i := bytes.IndexAny(raw, seps); i >= 0 {
		kv, rest = raw[:i], raw[i+1:]
	} else {
		kv = raw
	}
	k, v, _ = bytes.Cut(kv, []byte("="))
	return k, v, rest
}

// rawArgOnce returns name's decoded value in the urlencoded raw, nil when
// absent (or present without a value), or errTwice when a shop could read
// another copy (argCopies), in any letter case: ASP.NET binds "QTY" or
// "Qty" to qty, the first of any case winning, so "?sku=a&QTY=3" is 3
// units there and "?SKU=b&sku=a" SKU b (a red-team find, twelfth round).
// A name only in another case ("?QTY=3" for qty) is refused too, as
// jsonptr.FoldedOnly refuses {"QTY":3}: the proxy would take qty 1.
//
// The value aliases raw when it has nothing to decode, else it is a copy.
func rawArgOnce(raw []byte, name string) ([]byte, error) {
	var val []byte
	n := 0
	var scratch [64]byte
	for rest := raw; len(rest) > 0; {
		var k, v []byte
		k, v, rest = nextArg(rest, "&")
		if argKeyIs(k, name, false, scratch[:0]) {
			n++
			val = v
		}
	}
	if n > 1 || argCopies(raw, name, true) > n {
		return nil, errTwice{}
	}
	if bytes.IndexByte(val, '%') >= 0 || bytes.IndexByte(val, '+') >= 0 {
		val = fasthttp.AppendUnquotedArg(nil, val)
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
// sku_id, sku and sku to $_GET, and PHP ends a name at its first NUL:
// "sku%00x" is sku). With fold, names are compared in any letter case as
// well (Unicode simple folding, a superset of ASP.NET's OrdinalIgnoreCase:
// "ſku" is SKU there).
func argCopies(raw []byte, name string, fold bool) int {
	var scratch, pk, pn [64]byte
	var phpName []byte // name's PHP name, made at the first key that needs it
	n := 0
	for rest := raw; len(rest) > 0; {
		var k []byte
		k, _, rest = nextArg(rest, "&;")
		if len(k) == 0 {
			continue
		}
		if argKeyIs(k, name, false, scratch[:0]) {
			n++
			continue
		}
		if phpName == nil {
			phpName = phpArgName(pn[:0], []byte(name))
		}
		if argNameCopy(fasthttp.AppendUnquotedArg(scratch[:0], k), name, phpName, fold, pk[:0]) {
			n++
		}
	}
	return n
}

// argNameCopy reports whether some shop reads the decoded field (or
// cookie) name d as name, whose PHP name is phpName: as PHP names it, or,
// with fold, in another letter case. scratch is for d's PHP name.
func argNameCopy(d []byte, name string, phpName []byte, fold bool, scratch []byte) bool {
	if string(d) == name {
		return true
	}
	p := phpArgName(scratch, d)
	if string(p) == string(phpName) {
		return true
	}
	return fold && (strings.EqualFold(bytesString(d), name) || bytes.EqualFold(p, phpName))
}

// phpArgName appends to dst the name PHP gives the decoded field name k
// (main/php_variables.c): the name ends at its first NUL (a C string:
// php_register_variable_ex takes strlen), leading spaces dropped, '.' and
// ' ' become '_', the name ends at a '[' that a ']' closes later (an
// array), and an unclosed '[' becomes '_'.
func phpArgName(dst, k []byte) []byte {
	if i := bytes.IndexByte(k, 0); i >= 0 {
		k = k[:i]
	}
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

// formTyped reports whether the request's body is declared a form
// (urlencoded or multipart), which shops read as one.
func formTyped(ctx *fasthttp.RequestCtx) bool {
	ct := ctx.Request.Header.ContentType()
	return len(ct) >= len(formContentType) && bytes.EqualFold(ct[:len(formContentType)], formContentType) ||
		len(ct) >= len(multipartForm) && bytes.EqualFold(ct[:len(multipartForm)], multipartForm)
}

// multipartForm is the Content-Type of a multipart form body.
var multipartForm = []byte("multipart/form-data")

// multipartHas reports whether the request's body is a multipart form with
// a part a shop could read as name (exactly, as PHP names it, or in
// another letter case). The proxy does not read multipart forms: a buy
// deciding on name must not carry one (PHP's $_REQUEST, Rails and Laravel
// read the body's copy before the query's: a red-team find).
//
// Each name parameter is read as the shops' header parsers read it (a
// red-team find, rta), white space around its '=' allowed (Django, ASP.NET
// Core, Go's mime). A name no scan can judge counts as a copy of any:
// RFC 2231's name*=UTF-8'en'… (Django and Go decode it) and an RFC 2047
// word "=?utf-8?B?…?=" (ASP.NET Core's ContentDispositionHeaderValue.Name
// decodes it).
func multipartHas(ctx *fasthttp.RequestCtx, name string) bool {
	ct := ctx.Request.Header.ContentType()
	if len(ct) < len(multipartForm) || !bytes.EqualFold(ct[:len(multipartForm)], multipartForm) {
		return false
	}
	body := ctx.Request.Body()
	var pk, pn [64]byte
	phpName := phpArgName(pn[:0], []byte(name))
	for i := 0; i+4 <= len(body); i++ {
		// A Content-Disposition parameter "name" (not filename).
		if !bytes.EqualFold(body[i:i+4], []byte("name")) || i > 0 && body[i-1] != ';' && body[i-1] != ' ' && body[i-1] != '\t' {
			continue
		}
		j := i + 4
		ext := j < len(body) && body[j] == '*'
		if ext {
			j++
		}
		for j < len(body) && (body[j] == ' ' || body[j] == '\t') {
			j++
		}
		if j == len(body) || body[j] != '=' {
			continue
		}
		if ext {
			return true
		}
		v := bytes.TrimLeft(body[j+1:], " \t")
		if len(v) > 0 && v[0] == '"' {
			v = v[1:]
			if k := bytes.IndexAny(v, "\"\r\n"); k >= 0 {
				v = v[:k]
			}
		} else if k := bytes.IndexAny(v, "; \t\r\n"); k >= 0 {
			v = v[:k]
		}
		if bytes.Contains(v, []byte("=?")) || argNameCopy(v, name, phpName, true, pk[:0]) {
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
