package proxy

import (
	"unicode/utf8"
)

// Routes are matched on a canonical path, at least as loose as the shop
// frameworks behind the proxy: whatever spelling a shop would still run as
// its buy handler must be a buy here too, or it reaches the shop without an
// admission decision. The canonical form of a raw request path:
//
//   - percent-escapes of unreserved characters, sub-delims, ':' and '@' are
//     decoded (%62uy is buy, %2E%2E is ..); other escapes are kept, in
//     upper-case hex; raw bytes outside that set are escaped the same way;
//   - ';' starts path parameters, dropped to the end of the segment, as
//     Tomcat and Spring do (also an escaped %3B, for a front end that
//     decodes before the shop strips);
//   - empty segments (repeated slashes) and "." are dropped, ".." removes the
//     segment before it; a trailing slash is dropped; the root is "/";
//   - the four non-ASCII letters whose simple case mapping lands in ASCII
//     (ſ, ı, İ, K) become s, i, I, K, as Java's equalsIgnoreCase and .NET's
//     OrdinalIgnoreCase would treat them.
//
// Case and an optional ".ext" are left to the matcher (route.go): they
// depend on the route.
//
// Some paths cannot be canonicalised safely, because frameworks disagree on
// what they mean; canonPath reports them as a pathFlaw and still returns a
// loose form (unsafe separators read as '/', ".." clamped at the root), good
// only for telling whether the path falls under a buy route's prefix.

// pathFlaw says why a path cannot be canonicalised safely.
type pathFlaw uint8

const (
	pathOK pathFlaw = iota
	// flawSeparator: an encoded '/' or '\' (%2F, %5C) or a raw '\': some
	// servers split on them, some do not.
	flawSeparator
	// flawControl: NUL, another control character or white space, raw or
	// encoded: servers truncate, trim or reject them.
	flawControl
	// flawEscape: '%' not followed by two hex digits.
	flawEscape
	// flawDoubleEncoding: an encoded '%' (%25): a front end that decodes once
	// more turns %2562uy into buy.
	flawDoubleEncoding
	// flawUTF8: the decoded bytes are not UTF-8.
	flawUTF8
	// flawAboveRoot: ".." climbs above the root.
	flawAboveRoot
	// flawAmbiguous: dot segments or path parameters under a buy prefix
	// that do not make a buy here but may in a framework that resolves
	// them differently (set by the route table, not by canonPath).
	flawAmbiguous
	// flawNetworkPath: a target starting "//" whose path after the first
	// segment is under a buy prefix: URL parsers (Go's url.Parse, Python's
	// urlsplit, Node's URL) read "//host/api/…/buy" as a host and the buy
	// path (set by the server, not by canonPath).
	flawNetworkPath
)

// String names the flaw (metrics label).
func (f pathFlaw) String() string {
	switch f {
	case pathOK:
		return "ok"
	case flawSeparator:
		return "encoded_separator"
	case flawControl:
		return "control_character"
	case flawEscape:
		return "bad_escape"
	case flawDoubleEncoding:
		return "double_encoding"
	case flawUTF8:
		return "invalid_utf8"
	case flawAboveRoot:
		return "above_root"
	case flawAmbiguous:
		return "ambiguous_spelling"
	case flawNetworkPath:
		return "network_path"
	}
	return "unknown"
}

// plainChar marks the bytes a canonical segment holds unescaped: RFC 3986
// unreserved characters, sub-delims except ';', ':' and '@'.
var plainChar = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "-._~!$&'()*+,=:@" {
		t[c] = true
	}
	return t
}()

// canonizer is the state of one canonPath call; it lives on the stack.
type canonizer struct {
	out  []byte
	base int // where the path starts in out
	seg  int // index in out of the current segment's first byte
	// params is set inside ";params" of the current segment.
	params bool
	flaw   pathFlaw
	// odd is set when the path had dot segments or path parameters.
	odd bool
	// A UTF-8 sequence being read: its bytes so far and its length.
	u         [4]byte
	un, uwant int
}

// canonPath appends the canonical form of raw (a request path as sent,
// without the query) to dst. flaw is pathOK when the path is safe. odd
// reports dot segments or path parameters: spellings that only a client
// probing the shop sends, and that frameworks resolve differently (Express
// would capture "." as an {activity}, Tomcat strips ";x" first).
func canonPath(dst, raw []byte) (out []byte, flaw pathFlaw, odd bool) {
	c := canonizer{out: dst, base: len(dst)}
	c.startSegment()
	for i := 0; i < len(raw); i++ {
		b := raw[i]
		switch b {
		case '/':
			c.nextSegment()
			continue
		case '\\':
			c.setFlaw(flawSeparator)
			c.nextSegment()
			continue
		case '%':
			if i+2 >= len(raw) || !isHex(raw[i+1]) || !isHex(raw[i+2]) {
				c.setFlaw(flawEscape)
				if !c.params {
					if c.un > 0 {
						c.badUTF8()
					}
					c.out = append(c.out, '%', '2', '5')
				}
				continue
			}
			b = unhex(raw[i+1])<<4 | unhex(raw[i+2])
			i += 2
			switch b {
			case '/', '\\':
				c.setFlaw(flawSeparator)
				c.nextSegment()
				continue
			case '%':
				c.setFlaw(flawDoubleEncoding)
			}
		}
		c.byte(b)
	}
	c.endSegment()
	if len(c.out) == c.base {
		c.out = append(c.out, '/')
	}
	return c.out, c.flaw, c.odd
}

func (c *canonizer) setFlaw(f pathFlaw) {
	if c.flaw == pathOK {
		c.flaw = f
	}
}

// byte adds one decoded byte of the current segment.
func (c *canonizer) byte(b byte) {
	if b < 0x20 || b == ' ' || b == 0x7f {
		// Left out of the loose form, as a server that trims or
		// truncates would: /api%20/seckill is under /api/seckill.
		c.setFlaw(flawControl)
		return
	}
	if c.params {
		return
	}
	if b >= utf8.RuneSelf {
		c.utf8Byte(b)
		return
	}
	if c.un > 0 {
		c.badUTF8()
	}
	switch {
	case b == ';':
		c.params, c.odd = true, true
	case plainChar[b]:
		c.out = append(c.out, b)
	default:
		c.out = append(c.out, '%', upperHex[b>>4], upperHex[b&0xf])
	}
}

// utf8Byte collects a multi-byte UTF-8 sequence and writes it once whole.
func (c *canonizer) utf8Byte(b byte) {
	if c.un > 0 && b&0xc0 != 0x80 {
		c.badUTF8() // a new lead byte before the sequence ended
	}
	if c.un == 0 {
		switch {
		case b >= 0xc2 && b <= 0xdf:
			c.uwant = 2
		case b >= 0xe0 && b <= 0xef:
			c.uwant = 3
		case b >= 0xf0 && b <= 0xf4:
			c.uwant = 4
		default:
			c.setFlaw(flawUTF8)
			c.out = append(c.out, '%', upperHex[b>>4], upperHex[b&0xf])
			return
		}
	}
	c.u[c.un] = b
	c.un++
	if c.un < c.uwant {
		return
	}
	seq := c.u[:c.un]
	c.un = 0
	r, size := utf8.DecodeRune(seq)
	if r == utf8.RuneError && size <= 1 { // overlong, surrogate, above U+10FFFF
		c.setFlaw(flawUTF8)
	}
	switch r {
	case '\u017f': // ſ U+017F LATIN SMALL LETTER LONG S
		c.out = append(c.out, 's')
	case '\u0131': // ı U+0131 LATIN SMALL LETTER DOTLESS I
		c.out = append(c.out, 'i')
	case '\u0130': // İ U+0130 LATIN CAPITAL LETTER I WITH DOT ABOVE
		c.out = append(c.out, 'I')
	case '\u212a': // U+212A KELVIN SIGN
		c.out = append(c.out, 'K')
	default:
		for _, x := range seq {
			c.out = append(c.out, '%', upperHex[x>>4], upperHex[x&0xf])
		}
	}
}

// badUTF8 writes out an unfinished UTF-8 sequence, escaped, and flags it.
func (c *canonizer) badUTF8() {
	c.setFlaw(flawUTF8)
	for _, x := range c.u[:c.un] {
		c.out = append(c.out, '%', upperHex[x>>4], upperHex[x&0xf])
	}
	c.un = 0
}

func (c *canonizer) startSegment() {
	c.out = append(c.out, '/')
	c.seg = len(c.out)
	c.params = false
}

func (c *canonizer) nextSegment() {
	c.endSegment()
	c.startSegment()
}

// endSegment drops the segment just written if it is empty or "." and
// resolves "..".
func (c *canonizer) endSegment() {
	if c.un > 0 {
		c.badUTF8()
	}
	s := c.out[c.seg:]
	switch {
	case len(s) == 0:
		c.out = c.out[:c.seg-1]
	case len(s) == 1 && s[0] == '.':
		c.odd = true
		c.out = c.out[:c.seg-1]
	case len(s) == 2 && s[0] == '.' && s[1] == '.':
		c.odd = true
		c.out = c.out[:c.seg-1]
		if len(c.out) == c.base {
			c.setFlaw(flawAboveRoot)
			return
		}
		i := len(c.out) - 1
		for c.out[i] != '/' {
			i--
		}
		c.out = c.out[:i]
	}
}

const upperHex = "0123456789ABCDEF"

func isHex(b byte) bool {
	return '0' <= b && b <= '9' || 'a' <= b && b <= 'f' || 'A' <= b && b <= 'F'
}

func unhex(b byte) byte {
	switch {
	case b <= '9':
		return b - '0'
	case b <= 'F':
		return b - 'A' + 10
	}
	return b - 'a' + 10
}

// simplePath reports whether raw is already canonical but for a trailing
// slash: it starts with '/', holds only plain bytes and slashes, no empty
// segment and no segment starting with '.'. Most requests are; they skip
// the copy.
func simplePath(raw []byte) bool {
	if len(raw) == 0 || raw[0] != '/' {
		return false
	}
	for i := 1; i < len(raw); i++ {
		b := raw[i]
		if b == '/' || b == '.' {
			if raw[i-1] == '/' {
				return false
			}
			continue
		}
		if !plainChar[b] {
			return false
		}
	}
	return true
}

// trimSlash drops a trailing slash from a simple path ("/" stays).
func trimSlash(p []byte) []byte {
	if len(p) > 1 && p[len(p)-1] == '/' {
		return p[:len(p)-1]
	}
	return p
}

// asciiFoldEqual compares a with lower-case ASCII lit, ignoring a's case.
func asciiFoldEqual(a []byte, lit string) bool {
	if len(a) != len(lit) {
		return false
	}
	for i := 0; i < len(a); i++ {
		c := a[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lit[i] {
			return false
		}
	}
	return true
}
