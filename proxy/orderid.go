package proxy

import (
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/seckill-proxy/seckill-proxy/internal/jsonptr"
)

// findOrderID resolves the pointer p ("/name") in a shop's JSON answer.
// The common case, one top-level key of a flat answer, is read by a scan
// of the validated body, without decoding it into maps (that decode was
// 6% of the winner path's CPU, issue 10); anything else (a deeper
// pointer, escapes in the key or the value) goes to jsonptr.Find. It
// answers what jsonptr.Find answers: a string's or a number's text, the
// last of duplicate keys, "" for anything else.
func findOrderID(body []byte, p string) string {
	name, ok := strings.CutPrefix(p, "/")
	if !ok || name == "" || strings.ContainsAny(name, "/~\\\"") || !json.Valid(body) {
		return slowOrderID(body, p)
	}
	i := skipWS(body, 0)
	if i >= len(body) || body[i] != '{' {
		return slowOrderID(body, p)
	}
	i++
	found, id := false, ""
	for {
		i = skipWS(body, i)
		if body[i] == '}' {
			break
		}
		// A key: json.Valid vouched for the shape.
		end, esc := scanString(body, i)
		key := body[i+1 : end-1]
		if esc || !utf8.Valid(key) {
			return slowOrderID(body, p) // the decoder rewrites escapes and invalid UTF-8
		}
		i = skipWS(body, end)
		i = skipWS(body, i+1) // ':'
		if string(key) == name {
			found = true
			switch c := body[i]; {
			case c == '"':
				e, esc := scanString(body, i)
				if esc || !utf8.Valid(body[i+1:e-1]) {
					return slowOrderID(body, p)
				}
				id = string(body[i+1 : e-1])
			case c == '-' || (c >= '0' && c <= '9'):
				e := skipValue(body, i)
				id = string(body[i:e])
			default:
				id = ""
			}
		}
		i = skipWS(body, skipValue(body, i))
		if body[i] == ',' {
			i++
		}
	}
	if !found {
		return ""
	}
	return id
}

func slowOrderID(body []byte, p string) string {
	id, _ := jsonptr.Find(body, p)
	return id
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString returns the index after the string starting at b[i] == '"'
// and whether it holds an escape.
func scanString(b []byte, i int) (int, bool) {
	esc := false
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			esc = true
			j++
		case '"':
			return j + 1, esc
		}
	}
	return len(b), esc
}

// skipValue returns the index after the (valid) JSON value at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		e, _ := scanString(b, i)
		return e
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				e, _ := scanString(b, j)
				j = e - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(b)
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
		j++
	}
	return j
}
