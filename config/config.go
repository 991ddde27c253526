package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	yaml "go.yaml.in/yaml/v3"
)

// Load reads, decodes, defaults and validates the config file at path. Any
// problem, including an unreadable file, comes back as an *Errors listing
// every problem found, each as FILE:LINE with FILE being path as given.
func Load(path string) (*Config, error) {
	data, err := readConfig(path)
	if err != nil {
		return nil, &Errors{List: []Error{{File: path, Msg: err.Error()}}}
	}
	return Parse(path, data)
}

// MaxConfigBytes bounds the config file Load reads. A real config is a few
// kilobytes; one near the decoder's 200,000-value budget (some 40,000
// SKUs) is under 2 MiB. A path given by mistake (a log, a disk image,
// /dev/zero) must not be read whole, and yaml.v3's node tree of a file is
// about 100 times its size (a 4 MiB list of "1," took 420 MB).
const MaxConfigBytes = 2 << 20

func readConfig(path string) ([]byte, error) {
	data, err := ReadFileAtMost(path, MaxConfigBytes)
	if errors.Is(err, errTooLarge) {
		return nil, fmt.Errorf("is larger than %d MiB: not a config file?", MaxConfigBytes>>20)
	}
	return data, err
}

var errTooLarge = errors.New("file too large")

// withPath names path in err unless err already does (os errors do).
func withPath(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return err
	}
	return fmt.Errorf("%s %w", path, err)
}

// ReadFileAtMost reads a file a config names (the config itself, a JWKS,
// a TLS certificate) but never more than limit bytes of it: a wrong path
// to a huge file, /dev/zero or /dev/urandom must not be read whole. A
// directory is said to be one.
func ReadFileAtMost(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		return nil, errors.New("is a directory, not a file")
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("is larger than %d bytes (%w)", limit, errTooLarge)
	}
	return data, nil
}

// Parse is Load without the file system: path is used only in messages and
// as Config.Path. Tests and reload-from-memory use it.
func Parse(path string, data []byte) (*Config, error) {
	c := &Config{Path: path}
	m := newMeta()
	d := &decoder{m: m, budget: nodeBudget}

	root, err := parseYAML(data)
	if err != nil {
		return nil, fileErrors(path, clampLines(data, []Error{*err}))
	}
	lines := yamlLines(data)
	if root != nil {
		m.root = max(root.Line, 1)
		d.value(root, reflect.ValueOf(c).Elem(), "", 0)
	}
	if d.exhausted() {
		// What was decoded is cut short: validating it would add errors
		// about what the file does say, further on.
		return nil, fileErrors(path, clampLines(data, lines.fix(d.errs)))
	}

	c.setDefaults(m)
	v := &validator{m: m}
	v.config(c)

	if errs := append(d.errs, v.errs...); len(errs) > 0 {
		return nil, fileErrors(path, clampLines(data, lines.fix(errs)))
	}
	c.PrepareShadows()
	return c, nil
}

// yamlLine pulls the line out of yaml.v3 syntax errors ("yaml: line 3: ...").
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parseYAML returns the content of the single document in data, or nil when
// data holds no document at all.
func parseYAML(data []byte) (*yaml.Node, *Error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		if line, what := encodingProblem(data); line > 0 {
			// yaml.v3's reader says what but not where ("yaml: invalid
			// leading UTF-8 octet"): it came out at line 1.
			return nil, &Error{Line: line, Msg: "YAML syntax: " + what}
		}
		se := yamlLines(data).fix1(syntaxError(err))
		if line := tabIndent(data, se); line > 0 {
			// yaml.v3 names a tab in the indentation vaguely ("found
			// character that cannot start any token") or a line early.
			return nil, &Error{Line: line, Msg: "YAML syntax: a tab in the indentation; YAML indents with spaces only"}
		}
		return nil, oddBreakNote(data, problemLine(data, se))
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, oddBreakNote(data, problemLine(data, yamlLines(data).fix1(syntaxError(err))))
	default:
		// A second document would be silently ignored by a plain Unmarshal;
		// an operator who wrote one meant something by it.
		return nil, yamlLines(data).fix1(&Error{Line: max(extra.Line, 1), Msg: "only one YAML document is allowed"})
	}
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return nil, nil
		}
		return doc.Content[0], nil
	}
	return &doc, nil
}

// problemLine moves syntax error se from the line yaml.v3 names to the
// line the problem is on. yaml.v3 names the start of the construct it was
// parsing when it has one: a key indented one space short on line 126,
// inside the activities list, came out as "FILE:3: did not find expected
// '-' indicator" (line 3 being "activities:"). The problem is on the first
// line whose prefix of the file fails with the same message; prefixes are
// tried by bisection, from se's line to the end (a few parses). Files with
// line breaks only YAML sees (lineMap) keep yaml.v3's line.
func problemLine(data []byte, se *Error) *Error {
	if oddBreak(data) > 0 || se.Line < 1 || len(data) > maxBisectBytes {
		return se
	}
	var ends []int // ends[k-1]: offset just past line k
	switch {
	case bytes.HasPrefix(data, []byte{0xFF, 0xFE}): // UTF-16LE: "\n" is 0A 00
		for i := 0; i+1 < len(data); i += 2 {
			if data[i] == '\n' && data[i+1] == 0 {
				ends = append(ends, i+2)
			}
		}
	case bytes.HasPrefix(data, []byte{0xFE, 0xFF}): // UTF-16BE: 00 0A
		for i := 0; i+1 < len(data); i += 2 {
			if data[i] == 0 && data[i+1] == '\n' {
				ends = append(ends, i+2)
			}
		}
	default: // LF, CRLF or a lone CR, as yaml.v3 and editors count lines
		for i, c := range data {
			if c == '\n' || c == '\r' && (i+1 == len(data) || data[i+1] != '\n') {
				ends = append(ends, i+1)
			}
		}
	}
	if len(ends) == 0 || ends[len(ends)-1] != len(data) {
		ends = append(ends, len(data))
	}
	lo, hi := se.Line, len(ends)
	if lo >= hi {
		return se
	}
	for lo < hi {
		mid := (lo + hi) / 2
		if failsAs(data[:ends[mid-1]], se.Msg) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return &Error{Line: lo, Msg: se.Msg}
}

// maxBisectBytes bounds the files problemLine searches: each step parses
// a prefix again.
const maxBisectBytes = 1 << 20

// failsAs reports whether data fails to parse with syntax message msg.
func failsAs(data []byte, msg string) bool {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return false
		}
		if err != nil {
			return syntaxError(err).Msg == msg
		}
	}
}

// tabIndent returns the line (1-based) of the tab in the indentation
// that syntax error se is about, or 0. Only errors yaml.v3 gives for such
// a tab count, at its line or the next (it names some a line early): a
// tab inside a quoted or block scalar is content, and blaming the first
// tab-indented line of the file for any error sent the operator to a
// line that was fine (a block scalar's "\tb" for an unclosed "[" lines
// further down).
func tabIndent(data []byte, se *Error) int {
	if !strings.Contains(se.Msg, "tab character") && !strings.Contains(se.Msg, "cannot start any token") {
		return 0
	}
	for i, line := range bytes.Split(data, []byte("\n")) {
		if i+1 < se.Line || i+1 > se.Line+1 {
			continue
		}
		for _, c := range line {
			if c == '\t' {
				return i + 1
			}
			if c != ' ' {
				break
			}
		}
	}
	return 0
}

func syntaxError(err error) *Error {
	msg := err.Error()
	if sm := yamlLine.FindStringSubmatch(msg); sm != nil {
		if line, convErr := strconv.Atoi(sm[1]); convErr == nil {
			return &Error{Line: line, Msg: "YAML syntax: " + sm[2]}
		}
	}
	return &Error{Line: 1, Msg: "YAML syntax: " + strings.TrimPrefix(msg, "yaml: ")}
}

// encodingProblem finds what yaml.v3's reader refuses, which its errors
// do not place: the first byte that is not UTF-8, or the first character
// YAML does not allow (C0 controls but tab, LF and CR; DEL; C1 controls
// but NEL; U+FFFE, U+FFFF). It returns the file's line of it and what it
// is, or 0. UTF-16 files (with a BOM) are left to yaml.v3.
func encodingProblem(data []byte) (int, string) {
	if utf16BOM(data) {
		return 0, ""
	}
	line := 1
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			return line, fmt.Sprintf("byte 0x%02X is not UTF-8 (the file must be UTF-8 text)", data[i])
		case r == '\t' || r == '\n' || r == '\r' || r == 0x85:
		case r < 0x20 || r == 0x7F || r >= 0x80 && r < 0xA0 || r == 0xFFFE || r == 0xFFFF:
			return line, fmt.Sprintf("control character %U is not allowed in YAML", r)
		}
		if r == '\n' || r == '\r' && (i+1 == len(data) || data[i+1] != '\n') {
			line++
		}
		i += size
	}
	return 0, ""
}

// utf16BOM reports a UTF-16 file (with a BOM), which yaml.v3 reads too.
func utf16BOM(data []byte) bool {
	return bytes.HasPrefix(data, []byte{0xFE, 0xFF}) || bytes.HasPrefix(data, []byte{0xFF, 0xFE})
}

// lineMap maps yaml.v3's line numbers to the file's: yaml.v3 also breaks
// lines at NEL (U+0085), LS (U+2028) and PS (U+2029), which editors, grep
// and the operator's eyes do not, so one of them in a comment (pasted from
// a web page) moved every line reported after it. (A lone CR breaks lines
// for both; it counts as one.) lineMap[yamlLine] is the
// file's line; nil when the two agree.
type lineMap []int

func yamlLines(data []byte) lineMap {
	if oddBreak(data) == 0 {
		return nil
	}
	m := lineMap{0, 1}
	line := 1
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case c == '\n':
			line++
			m = append(m, line)
		case c == '\r' && (i+1 == len(data) || data[i+1] != '\n'):
			line++ // a lone CR breaks lines in editors too
			m = append(m, line)
		case c == 0xC2 && i+1 < len(data) && data[i+1] == 0x85:
			m = append(m, line)
			i++
		case c == 0xE2 && i+2 < len(data) && data[i+1] == 0x80 && (data[i+2] == 0xA8 || data[i+2] == 0xA9):
			m = append(m, line)
			i += 2
		}
	}
	return m
}

func (m lineMap) line(l int) int {
	if m == nil || l < 1 {
		return l
	}
	if l >= len(m) {
		return m[len(m)-1]
	}
	return m[l]
}

func (m lineMap) fix(list []Error) []Error {
	for i := range list {
		list[i].Line = m.line(list[i].Line)
	}
	return list
}

func (m lineMap) fix1(e *Error) *Error {
	e.Line = m.line(e.Line)
	return e
}

// oddBreak returns the file's line of its first line break that only YAML
// sees (lineMap), or 0.
func oddBreak(data []byte) int {
	line := 1
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case c == '\n', c == '\r' && (i+1 == len(data) || data[i+1] != '\n'):
			line++
		case c == 0xC2 && i+1 < len(data) && data[i+1] == 0x85,
			c == 0xE2 && i+2 < len(data) && data[i+1] == 0x80 && (data[i+2] == 0xA8 || data[i+2] == 0xA9):
			return line
		}
	}
	return 0
}

// oddBreakNote adds to a syntax error that the file holds such a break:
// the error itself is likely its doing (a comment's tail read as YAML).
func oddBreakNote(data []byte, e *Error) *Error {
	if l := oddBreak(data); l > 0 {
		e.Msg += fmt.Sprintf(" (line %d holds a NEL, U+2028 or U+2029 character, which YAML reads as a line break)", l)
	}
	return e
}

// maxMsgBytes bounds one message: most quote the value they refuse, and
// a value can be a megabyte pasted by mistake.
const maxMsgBytes = 600

// shorten cuts the middle out of a message longer than maxMsgBytes, on
// rune boundaries.
func shorten(msg string) string {
	if len(msg) <= maxMsgBytes {
		return msg
	}
	head, tail := maxMsgBytes/2, maxMsgBytes/4
	for head > 0 && !utf8.RuneStart(msg[head]) {
		head--
	}
	cut := len(msg) - tail
	for cut < len(msg) && !utf8.RuneStart(msg[cut]) {
		cut++
	}
	return fmt.Sprintf("%s … (%d bytes) … %s", msg[:head], cut-head, msg[cut:])
}

// clampLines keeps every error's line inside the file: yaml.v3 places
// what ends the input on the line after the last one when the file does
// not end in a newline ("---" alone: "FILE:2: config: want a mapping").
func clampLines(data []byte, list []Error) []Error {
	last := 1
	for i, c := range data {
		if c == '\n' || c == '\r' && (i+1 == len(data) || data[i+1] != '\n') {
			if i+1 < len(data) {
				last++
			}
		}
	}
	for i := range list {
		list[i].Line = min(max(list[i].Line, 1), last)
	}
	return list
}

func fileErrors(path string, list []Error) *Errors {
	// The same problem at the same line is said once: aliases bring one
	// node up many times (activities: [*a, *a, ...] made 10,000 identical
	// "shards must be between 1 and 1024" lines).
	seen := make(map[Error]bool, len(list))
	out := list[:0]
	for _, e := range list {
		e.File = path
		e.Msg = shorten(e.Msg)
		if !seen[e] {
			seen[e] = true
			out = append(out, e)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Line < out[j].Line })
	return &Errors{List: out}
}

// Activity returns the activity with the given id, or nil: an id in a URL or
// an admin call is user input and may name nothing.
func (c *Config) Activity(id string) *Activity {
	for i := range c.Activities {
		if c.Activities[i].ID == id {
			return &c.Activities[i]
		}
	}
	return nil
}

// SKU returns the activity's SKU with the given id, or nil when the SKU is not
// on sale in this activity (the UNKNOWN_ITEM case).
func (a *Activity) SKU(id string) *SKU {
	for i := range a.SKUs {
		if a.SKUs[i].ID == id {
			return &a.SKUs[i]
		}
	}
	return nil
}

// TrustedPrefixes returns trusted_proxies parsed, a bare address becoming a
// single-host prefix. It parses on each call so a Config built by hand (in
// tests) works too; callers on the hot path should keep the result.
func (c *Config) TrustedPrefixes() []netip.Prefix {
	out := make([]netip.Prefix, 0, len(c.TrustedProxies))
	for _, s := range c.TrustedProxies {
		if p, ok := parsePrefix(s); ok {
			out = append(out, p)
		}
	}
	return out
}

// parsePrefix accepts a CIDR or a bare IP, since operators often list a
// single load balancer without a /32.
func parsePrefix(s string) (netip.Prefix, bool) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), true
	}
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), true
	}
	return netip.Prefix{}, false
}

// Message returns the operator's text for a SPEC code, or def when the config
// does not override it, so shoppers can be addressed in their own language.
func (c *Config) Message(code string, def string) string {
	if msg, ok := c.Messages[code]; ok {
		return msg
	}
	return def
}

// AdminToken returns the bearer token for mutating admin calls. Secrets live
// in the environment, never in the file, so configs can be committed; an
// empty result means the variable is unset.
func (c *Config) AdminToken() string { return getenv(c.Admin.TokenEnv) }

// SigningSecret returns the HMAC secret of the signing key in use (the
// first of SigningKeys), read from the environment for the same reason as
// AdminToken.
func (c *Config) SigningSecret() string {
	if ks := c.SigningKeys(); len(ks) > 0 {
		return ks[0].Secret()
	}
	return ""
}

// SigningKeys returns the keys of X-Seckill-Signature, current first:
// upstream.signing_keys, or else the one key DefaultSigningKeyID whose
// secret signing_secret_env names.
func (c *Config) SigningKeys() []SigningKey {
	if len(c.Upstream.SigningKeys) > 0 {
		return c.Upstream.SigningKeys
	}
	return []SigningKey{{ID: DefaultSigningKeyID, SecretEnv: c.Upstream.SigningSecretEnv}}
}

// RedisPassword returns the Redis password, or "" when password_env is not
// configured or the variable is unset.
func (c *Config) RedisPassword() string { return getenv(c.Redis.PasswordEnv) }

func getenv(name string) string {
	if name == "" {
		return ""
	}
	return os.Getenv(name)
}

// StartMs is the start of the sale in Unix milliseconds, the unit of the
// shopper-facing start_ms field and of the Redis scripts.
func (a *Activity) StartMs() int64 { return a.Start.UnixMilli() }

// EndMs is the end of the sale in Unix milliseconds.
func (a *Activity) EndMs() int64 { return a.End.UnixMilli() }

// FairStartEnd is when the activity's fair_start window closes (Start when
// it has none).
func (a *Activity) FairStartEnd() time.Time { return a.Start.Add(a.FairStart) }

// PreheatMoment is when `serve` preheats the activity (start + preheat_at),
// and false when preheat_at is not set.
func (a *Activity) PreheatMoment() (time.Time, bool) {
	if a.PreheatAt >= 0 {
		return time.Time{}, false
	}
	return a.Start.Add(a.PreheatAt), true
}
