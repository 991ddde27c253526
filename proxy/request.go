package proxy

import (
	"bytes"
	"net/netip"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/identity"
	"github.com/seckill-proxy/seckill-proxy/internal/jsonptr"
)

// maxIDLen bounds user, device and request ids: longer ones are refused,
// never truncated (two users must not collide).
const maxIDLen = 128

// maxBuyBody bounds a buy request's body; a buy needs a few fields.
const maxBuyBody = 64 << 10

// extractor reads one configured value out of a request.
type extractor struct {
	kind string // header | cookie | query | form | json | path
	name string // header/cookie/query/form name, or JSON pointer
	ptr  []string
	// id marks an identity source: its value is made canonical (trimmed,
	// NFC, and canon's options) before any stage sees it.
	id    bool
	canon identity.Canon
}

func newSourceExtractor(s config.Source) extractor {
	e := extractor{id: true, canon: identity.Canon{CaseFold: s.CaseFold, Numeric: s.Numeric}}
	switch {
	case s.Header != "":
		e.kind, e.name = "header", s.Header
	case s.Cookie != "":
		e.kind, e.name = "cookie", s.Cookie
	case s.Query != "":
		e.kind, e.name = "query", s.Query
	}
	return e
}

// newFromExtractor parses "path", "query:NAME", "form:NAME", "json:/pointer".
func newFromExtractor(from string) extractor {
	kind, name, _ := strings.Cut(from, ":")
	e := extractor{kind: kind, name: name}
	if kind == "json" {
		e.ptr = jsonptr.Split(name)
	}
	return e
}

// errBody means the body could not be parsed as the config says it is.
type errBody struct{}

func (errBody) Error() string { return "malformed body" }

// errID means an identity value has no canonical form (invalid UTF-8, or
// not digits for a numeric source).
type errID struct{}

func (errID) Error() string { return "invalid id" }

// getID is get for an identity source: the canonical id, which may be
// empty (absent, or only white space). Every identity source goes through
// it, so blocklists, limits, the script and X-Seckill-User all see one
// spelling of each id.
func (e *extractor) getID(ctx *fasthttp.RequestCtx, body *buyInput) ([]byte, error) {
	v, err := e.get(ctx, nil, body)
	if err != nil || len(v) == 0 {
		return v, err
	}
	// Normalising and folding cost grows with the input: a value far
	// beyond any id's length (white space included) is refused unread.
	if len(v) > 4*maxIDLen {
		return nil, errID{}
	}
	v, ok := identity.CanonicalID(v, e.canon)
	if !ok {
		return nil, errID{}
	}
	return v, nil
}

// get returns the value (which may alias ctx's buffers) or nil when absent.
// body is the parsed JSON body, decoded at most once per request.
func (e *extractor) get(ctx *fasthttp.RequestCtx, pathSKU []byte, body *buyInput) ([]byte, error) {
	switch e.kind {
	case "header":
		return headerOnce(&ctx.Request.Header, e.name, body.facts)
	case "cookie":
		return cookieOnce(&ctx.Request.Header, e.name)
	case "query":
		// The same name in a form body too: PHP's $_REQUEST and Go's
		// FormValue read the body's copy first, so the shop could sell
		// another SKU than the one admitted. Laravel's input() reads a
		// JSON body's key over the query's just the same.
		if rawArgHas(formBody(ctx), e.name, true) || multipartHas(ctx, e.name) {
			return nil, errTwice{}
		}
		if err := jsonBodyHas(ctx, body, e.name); err != nil {
			return nil, err
		}
		return rawArgOnce(queryString(ctx), e.name)
	case "form":
		if rawArgHas(queryString(ctx), e.name, true) || multipartHas(ctx, e.name) {
			return nil, errTwice{}
		}
		// A JSON body is no form to the proxy (no field: qty 1), but
		// Laravel and Rails read its keys as the request's input.
		if err := jsonBodyHas(ctx, body, e.name); err != nil {
			return nil, err
		}
		return rawArgOnce(formBody(ctx), e.name)
	case "path":
		if err := captureCopy(ctx, body, "sku"); err != nil {
			return nil, err
		}
		return pathSKU, nil
	case "json":
		v, err := body.get(ctx)
		if err != nil {
			return nil, err
		}
		if len(e.ptr) > 0 && (rawArgHas(queryString(ctx), e.ptr[0], true) || formTyped(ctx)) {
			// Rails' params is the JSON body merged with the query,
			// the query's field (or its "order[sku]" hash) winning. A
			// body typed as a form is read as one by the shop
			// (Laravel, Rails, Express, PHP's $_POST), whatever JSON
			// the proxy finds in its bytes (red-team finding jd13).
			return nil, errTwice{}
		}
		if s, ok := jsonptr.Lookup(v, e.ptr); ok {
			return []byte(s), nil
		}
		if len(e.ptr) >= 2 && !jsonptr.HasKey(v, e.ptr[0]) && jsonptr.HasKey(v, e.ptr[len(e.ptr)-1]) {
			// Rails' ParamsWrapper (on for JSON by default) copies a
			// body's top-level keys under the controller's key when the
			// body has none: {"qty":5} is params[:order][:qty] for
			// /order/qty (red-team finding jd13).
			return nil, errTwice{}
		}
		if jsonptr.Ambiguous(v, e.ptr) || jsonptr.FoldedOnly(v, e.ptr) {
			return nil, errTwice{} // another spelling a shop may read
		}
		if jsonptr.Present(v, e.ptr) {
			// An array, object, boolean or null: no value the proxy
			// can judge, and not absent either (a Node shop's
			// Number(body.qty) reads [3] as 3). Malformed.
			return nil, errBody{}
		}
		return nil, nil
	}
	return nil, nil
}

// captureCopy returns errTwice when the request carries, beside a path
// capture the proxy judges ({sku}, {activity}), a field of the capture's
// name in the query, a form body (urlencoded or multipart) or a JSON body's
// top level, in any spelling argCopies and jsonptr.HasKey know (a red-team
// find, rta): shops that merge route parameters with the request's input
// read that copy over the path's. A legacy PHP shop behind nginx's
// "rewrite ^/api/seckill/([^/]+)/([^/]+)/buy$ /buy.php?activity=$1&sku=$2"
// gets the client's query appended (Apache's [QSA] likewise) and reads
// $_REQUEST's last copy, a POST body's first; ASP.NET Core MVC binds form
// values before route values; Laravel's $request->sku reads the input
// before the route parameter. The name is the placeholder's: a shop whose
// own route names it otherwise is not covered (README).
func captureCopy(ctx *fasthttp.RequestCtx, body *buyInput, name string) error {
	if rawArgHas(queryString(ctx), name, true) || rawArgHas(formBody(ctx), name, true) || multipartHas(ctx, name) {
		return errTwice{}
	}
	return jsonBodyHas(ctx, body, name)
}

// errTwice means a field the proxy decides on (who buys, what, how many,
// the request id) was sent more than once: the proxy would judge one copy
// and an unmodified shop might read another (PHP and Django read the last
// query argument or cookie of a name; the proxy reads the first), so a
// buyer at the limit could order as someone else, or more units than were
// reserved. Refused (BAD_REQUEST), never guessed.
type errTwice struct{}

func (errTwice) Error() string { return "field sent more than once" }

// headerOnce returns the value of the header name, nil when absent, or
// errTwice when it has more than one line.
//
// A field spelled with '_' for '-' (X_User_Id beside, or instead of,
// X-User-Id) counts as a copy: CGI-style servers (PHP, Rack, WSGI) file
// both under HTTP_X_USER_ID, so the shop could read the one the proxy did
// not judge. facts are handle's (headerFacts): a request with no name
// holding '_' is read with PeekAll alone, cheaper than a pass over the
// names (which rebuilds the Cookie line each time).
func headerOnce(h *fasthttp.RequestHeader, name string, facts headerFacts) ([]byte, error) {
	if strings.IndexByte(name, '-') >= 0 && facts.may(factUnderscore) {
		// One pass finds both the lines of name and its '_' spellings.
		var v []byte
		n := 0
		for k, kv := range h.All() {
			if !headerNameFold(k, name) {
				continue
			}
			if n++; n > 1 || !bytes.EqualFold(k, []byte(name)) {
				return nil, errTwice{}
			}
			v = kv
		}
		return v, nil
	}
	switch v := h.PeekAll(name); len(v) {
	case 0:
		return nil, nil
	case 1:
		return v[0], nil
	}
	return nil, errTwice{}
}

// headerNameFold reports whether header names a and b are one to a
// CGI-style server: letter case ignored, '_' and '-' alike.
func headerNameFold(a []byte, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range len(a) {
		x, y := a[i], b[i]
		if x == '_' {
			x = '-'
		}
		if y == '_' {
			y = '-'
		}
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// cookieOnce returns the value of the cookie name (over every Cookie line),
// nil when absent, or errTwice when it is sent more than once, counting
// every cookie a shop could read as name (a red-team find, twelfth round):
// PHP files cookies under the names it gives query fields (phpArgName:
// "sess.id", "sess id", "sess_id[x]" are $_COOKIE['sess_id'], the FIRST
// of a name kept; before 7.4.11 it url-decoded cookie names too), and
// ASP.NET Core's cookie collection ignores letter case. A cookie without
// '=' is a name to PHP (fasthttp gives it as a value with no name). As
// with query fields, such a spelling alone, without the exact name, is
// refused too: the proxy would read no cookie where the shop reads one.
func cookieOnce(h *fasthttp.RequestHeader, name string) ([]byte, error) {
	var v []byte
	n, other := 0, 0
	var pn, pk, scratch [64]byte
	phpName := phpArgName(pn[:0], []byte(name))
	for k, val := range h.Cookies() {
		if string(k) == name {
			v = val
			n++
			if innerCookie(val, false, name, phpName, pk[:0]) {
				other++ // "sid=a, sid=b": two to Tomcat's RFC 2109 reading
			}
			continue
		}
		if len(k) == 0 {
			k = val
		}
		if argNameCopy(k, name, phpName, true, pk[:0]) {
			other++
		} else if bytes.IndexByte(k, '%') >= 0 || bytes.IndexByte(k, '+') >= 0 {
			if argNameCopy(fasthttp.AppendUnquotedArg(scratch[:0], k), name, phpName, true, pk[:0]) {
				other++
			}
		}
		if innerCookie(k, true, name, phpName, pk[:0]) || innerCookie(val, false, name, phpName, pk[:0]) {
			other++
		}
	}
	if n > 1 || other > 0 {
		return nil, errTwice{}
	}
	return v, nil
}

// innerCookie reports whether a shop's cookie parser finds a cookie of
// name inside the cookie name or value b that fasthttp (splitting on ';'
// only) read as one: Python's SimpleCookie (Bottle, CherryPy) ends a pair
// at white space, Tomcat reads a header that starts "$Version=1;" by RFC
// 2109, where ',' ends a cookie as ';' does (red team rtd: "sid=alice;
// a=b sid=bob" was alice to the proxy and bob to a Bottle shop). A token
// after white space or ',' and before '=' counts (in a name, the last
// token needs no '=': fasthttp cut it off). No cost to a value without
// white space or ','.
func innerCookie(b []byte, isName bool, name string, phpName, scratch []byte) bool {
	if bytes.IndexByte(b, ',') < 0 && bytes.IndexByte(b, ' ') < 0 && bytes.IndexByte(b, '\t') < 0 {
		return false
	}
	sep := func(c byte) bool { return c == ' ' || c == '\t' || c == ',' }
	for i := 0; i < len(b); i++ {
		if !sep(b[i]) {
			continue
		}
		j := i + 1
		for j < len(b) && sep(b[j]) {
			j++
		}
		e := j
		for e < len(b) && !sep(b[e]) && b[e] != '=' {
			e++
		}
		tok := b[j:e]
		for e < len(b) && (b[e] == ' ' || b[e] == '\t') {
			e++
		}
		if len(tok) > 0 && (e < len(b) && b[e] == '=' || isName && e == len(b)) && argNameCopy(tok, name, phpName, true, scratch) {
			return true
		}
		i = j - 1
	}
	return false
}

// jsonBodyHas returns errTwice when the request's body is declared JSON
// and has a top-level key name (in any letter case), for a query: or form:
// field: Laravel's $request->input() and Rails' params merge a JSON
// body's keys with the query's and the form's (a red-team find, twelfth
// round). A body declared JSON that is not strict JSON is errBody: which
// keys a lenient parser finds in it is anyone's guess. No cost to a buy
// without a JSON body; a body not decoded yet is first scanned
// (cannotName), and one in which no parser could find the key is not
// decoded for it.
func jsonBodyHas(ctx *fasthttp.RequestCtx, body *buyInput, name string) error {
	raw := ctx.Request.Body()
	if !jsonContentType(ctx.Request.Header.ContentType()) || len(bytes.TrimSpace(raw)) == 0 ||
		!body.done && cannotName(raw, name) {
		return nil
	}
	v, err := body.get(ctx)
	if err != nil {
		return err
	}
	if jsonptr.HasKey(v, name) {
		return errTwice{}
	}
	return nil
}

// jsonContentType reports whether a Content-Type names JSON as some shop
// framework reads it: "json" anywhere in it, any case (Laravel's isJson
// looks for "/json" or "+json"; Rails and Express know several types).
func jsonContentType(ct []byte) bool {
	for i := 0; i+4 <= len(ct); i++ {
		if ct[i]|0x20 == 'j' && ct[i+1]|0x20 == 's' && ct[i+2]|0x20 == 'o' && ct[i+3]|0x20 == 'n' {
			return true
		}
	}
	return false
}

// encodedBody reports whether a request declares its body encoded: a
// Content-Encoding other than identity. The proxy reads a buy's fields,
// and looks for their second copies, in the bytes as sent; Express'
// body-parser, ASP.NET Core's request decompression and Apache's
// mod_deflate input filter inflate gzip or deflate first, and would read
// a qty the proxy never saw (a red-team find, twelfth round). A buy so
// sent is refused (BAD_REQUEST), not decoded.
func encodedBody(h *fasthttp.RequestHeader) bool {
	for _, line := range h.PeekAll(fasthttp.HeaderContentEncoding) {
		for len(line) > 0 {
			var tok []byte
			if i := bytes.IndexByte(line, ','); i >= 0 {
				tok, line = line[:i], line[i+1:]
			} else {
				tok, line = line, nil
			}
			if tok = bytes.TrimSpace(tok); len(tok) > 0 && !bytes.EqualFold(tok, []byte("identity")) {
				return true
			}
		}
	}
	return false
}

// foreignCharset reports whether a request's Content-Type declares a
// charset (any media type, any charset parameter) in which the ASCII bytes
// the proxy reads fields from may not mean ASCII text (a red-team find,
// rta). The proxy reads the query and a form body byte by byte; shops
// decode them with the declared charset: Django decodes request.POST and
// request.GET with it (an odd-length query that is no UTF-16 falls back to
// ISO-8859-1, and its escapes then decode as UTF-16: "s%00k%00u%00" is
// sku), ASP.NET Core's form reader splits and decodes a body with it (only
// UTF-7 is refused), Tomcat decodes form field names and values with it. In
// UTF-16 a body "sku=rare&qty=3" has no field the proxy can see, and a
// form can carry one reading for the proxy and another for the shop. A
// buy so declared is refused (BAD_REQUEST), not decoded: clients send
// forms without a charset, or with UTF-8 (jQuery, fetch) or ISO-8859-1
// (Apache HttpClient), where the bytes that name fields are ASCII.
func foreignCharset(h *fasthttp.RequestHeader) bool {
	ct := h.ContentType()
	for i := 0; i+len("charset") <= len(ct); i++ {
		if i > 0 && ct[i-1] != ';' && ct[i-1] != ' ' && ct[i-1] != '\t' || !bytes.EqualFold(ct[i:i+len("charset")], []byte("charset")) {
			continue
		}
		j := i + len("charset")
		for j < len(ct) && (ct[j] == ' ' || ct[j] == '\t') {
			j++
		}
		if j == len(ct) || ct[j] != '=' {
			continue
		}
		v := bytes.TrimLeft(ct[j+1:], " \t")
		if k := bytes.IndexByte(v, ';'); k >= 0 {
			v = v[:k]
		}
		v = bytes.Trim(bytes.TrimSpace(v), `"`)
		if len(v) > 0 && !asciiCharset(v) { // an empty charset names none: ignored by shops
			return true
		}
		i = j
	}
	return false
}

// asciiCharset reports whether charset name v is one whose bytes below
// 0x80 are ASCII and whose other bytes never decode to ASCII: UTF-8,
// US-ASCII, ISO-8859-1, by their common names.
func asciiCharset(v []byte) bool {
	for _, n := range [...]string{"utf-8", "utf8", "us-ascii", "ascii", "iso-8859-1", "iso8859-1", "latin1"} {
		if bytes.EqualFold(v, []byte(n)) {
			return true
		}
	}
	return false
}

// cannotName reports whether no JSON parser, strict or lenient, can read
// a key name from raw: raw is printable ASCII (tab, CR, LF allowed) with
// no '\' (an escape could spell the key: "\u0073ku"), no '%' and
// nowhere name's letters in a row, in any ASCII case. Non-ASCII bytes
// could fold to a letter of it (encoding/json matches "ſku" to sku) or
// be another encoding (UTF-16, which Jackson detects): those bodies are
// decoded. A route's path capture judged beside a JSON body then costs a
// scan, not a decode (a buy body rarely names the SKU; decoding every
// JSON buy for it cost 2–3 µs, red team rta's check). name must be ASCII.
func cannotName(raw []byte, name string) bool {
	if len(name) == 0 {
		return false
	}
	for i := 0; i < len(name); i++ {
		if name[i] >= 0x80 {
			return false
		}
	}
	first := name[0] | 0x20
	for i, c := range raw {
		switch {
		case c >= 0x7f || c < 0x20 && c != '\t' && c != '\r' && c != '\n', c == '\\', c == '%':
			return false
		case c|0x20 == first && i+len(name) <= len(raw) && bytes.EqualFold(raw[i:i+len(name)], []byte(name)):
			// (Unicode folding, where raw is not ASCII yet unseen: only
			// more matches, each one a decode.)
			return false
		}
	}
	return true
}

// buyInput is what parse has learned of one buy so far, so no check
// reads it twice: handle's header facts, and the body decoded as JSON
// once, on first use (get).
type buyInput struct {
	facts headerFacts
	done  bool
	v     any
	err   error
}

func (b *buyInput) get(ctx *fasthttp.RequestCtx) (any, error) {
	if !b.done {
		b.done = true
		raw := ctx.Request.Body()
		if len(bytes.TrimSpace(raw)) == 0 {
			b.err = errBody{}
		} else {
			var err error
			// Strict: data after the document is refused, and a key
			// held twice is Twice (errTwice where a field is read).
			if b.v, err = jsonptr.DecodeStrict(raw); err != nil {
				b.err = errBody{}
			}
		}
	}
	return b.v, b.err
}

// validID reports whether b may be used as a user, device or request id:
// 1..maxIDLen bytes of valid UTF-8 with no control characters and no '|'
// (the separator of reservation records in Redis).
func validID(b []byte) bool {
	if len(b) == 0 || len(b) > maxIDLen || !utf8.Valid(b) {
		return false
	}
	for _, c := range b {
		if c < 0x20 || c == 0x7f || c == '|' {
			return false
		}
	}
	return true
}

// parseQty reads a positive decimal quantity; 0 means invalid.
func parseQty(b []byte) int64 {
	if len(b) == 0 || len(b) > 9 {
		return 0
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + int64(c-'0')
	}
	return n
}

// clientIP is the buyer's address: the peer, or, when the peer is a trusted
// proxy, the right-most X-Forwarded-For entry that is not itself trusted.
// Every X-Forwarded-For line counts, in order (a balancer may append its own
// line after the client's): reading only the first would let a client pick
// its own address by sending a line first.
func clientIP(ctx *fasthttp.RequestCtx, trusted []netip.Prefix) netip.Addr {
	peer, _ := netip.AddrFromSlice(ctx.RemoteIP())
	peer = peer.Unmap()
	if !isTrusted(peer, trusted) {
		return peer
	}
	lines := ctx.Request.Header.PeekAll(fasthttp.HeaderXForwardedFor)
	for i := len(lines) - 1; i >= 0; i-- {
		xff := lines[i]
		for len(xff) > 0 {
			var part []byte
			if j := bytes.LastIndexByte(xff, ','); j >= 0 {
				part, xff = xff[j+1:], xff[:j]
			} else {
				part, xff = xff, nil
			}
			part = bytes.TrimSpace(part)
			if len(part) == 0 {
				continue // "a, , b" or an empty line claims no address
			}
			a, err := netip.ParseAddr(bytesString(part))
			if err != nil {
				// Some balancers append the client's address with its
				// port ("203.0.113.7:51234", "[2001:db8::1]:443"): read
				// as the peer, every buyer would share the balancer's
				// per-IP budget.
				ap, perr := netip.ParseAddrPort(bytesString(part))
				if perr != nil {
					return peer
				}
				a = ap.Addr()
			}
			a = a.Unmap()
			if !isTrusted(a, trusted) {
				return a
			}
			peer = a
		}
	}
	return peer
}

// appendForwardedFor appends, to b, every X-Forwarded-For line of h joined
// in order with ", ", then peer: the one canonical line forwarded upstream.
func appendForwardedFor(b []byte, h *fasthttp.RequestHeader, peer netip.Addr) []byte {
	for _, line := range h.PeekAll(fasthttp.HeaderXForwardedFor) {
		if line = bytes.TrimSpace(line); len(line) > 0 {
			b = append(append(b, line...), ", "...)
		}
	}
	if peer.IsValid() {
		return peer.AppendTo(b)
	}
	return bytes.TrimSuffix(b, []byte(", "))
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// stripSeckillHeaders removes every client-sent X-Seckill-* header: only the
// proxy may speak for a reservation.
//
// The same pass removes X-Original-URL and X-Rewrite-URL: IIS URL Rewrite
// and older Symfony route a request by them, so a client could name the
// buy handler on an ordinary path and walk around admission.
//
// Names are compared with "_" taken as "-": Rack, PHP and WSGI servers
// give X_Seckill_User and X-Seckill-User the same HTTP_X_SECKILL_USER, and
// a forged copy written after the proxy's own would win there. The warm-up
// header (warm.go) goes too: it never reaches the shop.
//
// The pass also notes what else handle would look for among the names
// (headerFacts), so a request is walked once, not once per question.
func stripSeckillHeaders(h *fasthttp.RequestHeader) headerFacts {
	var names [8][]byte
	n := 0
	f := factScanned
	for k := range h.All() {
		switch {
		case len(k) >= 10 && nameFold(k[:10], "x-seckill-") || nameFold(k, "x-original-url") ||
			nameFold(k, "x-rewrite-url") || nameFold(k, "seckill-proxy-warm"):
			if n == len(names) {
				// More than fit: these go, then a pass again until
				// none is left. That pass sees every name this one
				// did not reach, and says what is there.
				for i := range names {
					h.DelBytes(names[i])
				}
				return stripSeckillHeaders(h)
			}
			names[n] = append([]byte(nil), k...)
			n++
		case hopField(k):
			f |= factHop
		case overrideHeader(k):
			f |= factOverride
		case len(k) == len(fasthttp.HeaderContentEncoding) && bytes.EqualFold(k, []byte(fasthttp.HeaderContentEncoding)):
			f |= factEncoding
		}
		if f&factUnderscore == 0 && bytes.IndexByte(k, '_') >= 0 {
			f |= factUnderscore
		}
	}
	for i := 0; i < n; i++ {
		h.DelBytes(names[i])
	}
	return f
}

// headerFacts says which kinds of field stripSeckillHeaders' pass saw,
// so later checks skip a walk over the names for what is not there.
type headerFacts uint8

const (
	// factScanned marks facts from stripSeckillHeaders' pass. Without it
	// (the zero value: facts nobody gathered) may says every kind may be
	// there, and each check runs in full.
	factScanned    headerFacts = 1 << iota
	factHop                    // a hop-by-hop field (hopField)
	factOverride               // an X-HTTP-Method-Override family name (overrideHeader)
	factEncoding               // a Content-Encoding field (encodedBody)
	factUnderscore             // a name with '_' (headerOnce's CGI spellings)
)

// may reports whether a field of kind k may be there.
func (f headerFacts) may(k headerFacts) bool { return f&factScanned == 0 || f&k != 0 }

// nameFold reports whether header name k is lower (lower case, "-"
// separators) in any letter case, with "_" for any "-".
func nameFold(k []byte, lower string) bool {
	if len(k) != len(lower) {
		return false
	}
	for i := range len(k) {
		c := k[i]
		switch {
		case c == '_':
			c = '-'
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// bytesString views b as a string without copying, for a call that only
// reads it: netip.ParseAddr keeps nothing of its argument (a zone is
// cloned into a unique handle), and this runs for every buy behind a
// trusted proxy.
func bytesString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// hasMethodOverride reports whether the request asks the shop to treat it
// as another method: the X-HTTP-Method-Override family of headers, or a
// _method query argument (Rails, Laravel, Symfony, Express' method-override).
// Header names are compared as nameFold does, '_' for '-' (a red-team
// find, rta): Rack and PHP servers file X_HTTP_Method_Override under the
// HTTP_X_HTTP_METHOD_OVERRIDE that Rack::MethodOverride and Symfony read.
// A cold path: only pass_methods requests on a buy route's path get here.
//
// headerSeen is whether a name of the family may be there (headerFacts):
// false skips the header names.
func hasMethodOverride(ctx *fasthttp.RequestCtx, headerSeen bool) bool {
	if headerSeen {
		for k, v := range ctx.Request.Header.All() {
			if len(v) > 0 && overrideHeader(k) {
				return true
			}
		}
	}
	return rawArgHas(queryString(ctx), "_method", true)
}

// overrideHeader reports whether header name k is one of the
// X-HTTP-Method-Override family, compared as nameFold does. The first test
// leaves every other name after two byte compares: every request runs
// this on each of its header names (stripSeckillHeaders).
func overrideHeader(k []byte) bool {
	return len(k) >= len("x-http-method") && k[0]|0x20 == 'x' &&
		(nameFold(k, "x-http-method-override") || nameFold(k, "x-http-method") || nameFold(k, "x-method-override"))
}

// overridesMethod reports whether a buy asks the shop to take it as a
// method other than method, the route's (a red-team find, rta): an
// override header (in any spelling hasMethodOverride knows) or a _method
// field of the query, an urlencoded or a multipart body (Rack's
// MethodOverride reads the body's, Laravel and Symfony the body's then
// the query's) naming another method. The shop would run another handler
// of the path — a product page's GET — whose 2xx confirms a reservation
// with no order placed. An override naming the route's own method changes
// nothing and is let through; a _method sent twice or in another letter
// case is another. headerSeen is whether a name of the family may be
// there (headerFacts): false skips the header names.
func overridesMethod(ctx *fasthttp.RequestCtx, method string, headerSeen bool) bool {
	if headerSeen {
		for k, v := range ctx.Request.Header.All() {
			if !overrideHeader(k) {
				continue
			}
			if v = bytes.TrimSpace(v); len(v) > 0 && !bytes.EqualFold(v, []byte(method)) {
				return true
			}
		}
	}
	for _, raw := range [...][]byte{queryString(ctx), formBody(ctx)} {
		if !rawArgHas(raw, "_method", true) {
			continue
		}
		if v, err := rawArgOnce(raw, "_method"); err != nil || len(v) > 0 && !bytes.EqualFold(v, []byte(method)) {
			return true
		}
	}
	return multipartHas(ctx, "_method")
}
