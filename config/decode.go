package config

import (
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	yaml "go.yaml.in/yaml/v3"
)

// maxMergeDepth and nodeBudget bound the work done on hostile input: YAML
// anchors can make a merge refer to itself or fan out exponentially, and a
// `validate` run must neither hang nor run out of memory on such a file.
const (
	maxMergeDepth = 16
	nodeBudget    = 200_000
)

var (
	// envRef is a shell or Compose variable reference: ${NAME}, ${NAME:-x}
	// anywhere, or a value that is just $NAME.
	envRef = regexp.MustCompile(`\$\{[A-Za-z_][A-Za-z0-9_]*(?:[:?+-][^}]*)?\}|^\$[A-Za-z_][A-Za-z0-9_]*$`)

	durationType = reflect.TypeFor[time.Duration]()
	timeType     = reflect.TypeFor[time.Time]()
)

// mapEntry names one key of a decoded map, whose values are not addressable
// and so cannot be keys of meta.lines themselves.
type mapEntry struct {
	m   *map[string]string
	key string
}

// meta is what the YAML said beyond the values: where each field was set and
// whether it was set at all. Defaults need presence (an absent
// `client_cache` means true, an explicit false means false), and validation
// needs lines. It is keyed by typed pointers into the decoded Config, so
// lookups stay type-checked instead of going through path strings.
type meta struct {
	lines map[any]int
	// bad marks fields whose value did not decode; validation skips them so
	// one typo does not also produce "is required" or range errors.
	bad map[any]bool
	// root is the line used when nothing closer is known.
	root int
}

func newMeta() *meta {
	return &meta{lines: make(map[any]int), bad: make(map[any]bool), root: 1}
}

// has reports whether the file set the field pointed to by p.
func (m *meta) has(p any) bool {
	_, ok := m.lines[p]
	return ok
}

// failed reports whether the field pointed to by p was set to a value that
// could not be decoded.
func (m *meta) failed(p any) bool { return m.bad[p] }

// line returns the line of the first of ps that the file set, so a missing
// field can be reported at its closest present parent.
func (m *meta) line(ps ...any) int {
	for _, p := range ps {
		if l, ok := m.lines[p]; ok {
			return l
		}
	}
	return m.root
}

// decoder walks a yaml.Node tree into a Config by reflection over the yaml
// struct tags of types.go, collecting every problem instead of stopping at the
// first, which is what yaml.v3's own Decode would do.
type decoder struct {
	m      *meta
	errs   []Error
	budget int
	// seen holds the errors reported so far: a node reached again through
	// an alias would report its problems again, once per alias, and a few
	// kilobytes of aliases would make millions of identical lines (and
	// gigabytes of them). One FILE:LINE: message says it all.
	seen map[Error]bool
	// hints memoizes suggest by type and key, for the same reason.
	hints map[hintKey]string
}

// maxHints bounds the unknown keys given a "did you mean" suggestion.
const maxHints = 1000

type hintKey struct {
	t   reflect.Type
	key string
}

func (d *decoder) errorf(line int, format string, args ...any) {
	e := Error{Line: line, Msg: fmt.Sprintf(format, args...)}
	if d.seen == nil {
		d.seen = make(map[Error]bool)
	}
	if d.seen[e] {
		return
	}
	d.seen[e] = true
	d.errs = append(d.errs, e)
}

// exhausted reports whether the node budget is spent: decoding has
// stopped, and what was decoded is incomplete.
func (d *decoder) exhausted() bool { return d.budget <= 0 }

// resolve follows an alias to the node it names. Anchors cannot be put on
// aliases, so one step is enough.
func resolve(n *yaml.Node) *yaml.Node {
	if n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		return n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	default:
		return "nothing"
	}
}

// spend charges one node against the budget; false means stop decoding.
func (d *decoder) spend(n *yaml.Node) bool {
	return d.spendN(n, 1)
}

// spendN charges k nodes at once (a list's elements, before its slice is
// allocated).
func (d *decoder) spendN(n *yaml.Node, k int) bool {
	if d.budget <= 0 {
		return false
	}
	d.budget -= k
	if d.budget <= 0 {
		d.errorf(n.Line, "document is too large or uses too many aliases (more than %d values)", nodeBudget)
		return false
	}
	return true
}

// value decodes n into v, which must be addressable. path names the value in
// messages ("activity.route.path").
func (d *decoder) value(n *yaml.Node, v reflect.Value, path string, depth int) {
	n = resolve(n)
	if n == nil || !d.spend(n) {
		return
	}
	ptr := v.Addr().Interface()
	var ok bool
	switch {
	case v.Type() == durationType:
		ok = d.duration(n, v, path)
	case v.Type() == timeType:
		ok = d.time(n, v, path)
	case v.Kind() == reflect.Struct:
		ok = d.mapping(n, v, path, depth)
	case v.Kind() == reflect.Slice:
		ok = d.sequence(n, v, path, depth)
	case v.Kind() == reflect.Map:
		ok = d.stringMap(n, v, path)
	default:
		ok = d.scalar(n, v, path)
	}
	if !ok {
		d.m.bad[ptr] = true
	}
}

// mapping, sequence and stringMap return false only when n has the wrong
// shape; problems inside are reported on the inner fields.
func (d *decoder) mapping(n *yaml.Node, v reflect.Value, path string, depth int) bool {
	if n.Kind != yaml.MappingNode {
		d.errorf(n.Line, "%s: want a mapping, got %s", describe(path), kindName(n))
		return false
	}
	fields := fieldIndex(v.Type())
	// Merge keys go first, so keys written out in this mapping override what
	// they bring in, as YAML's merge rules say.
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; k.Kind == yaml.ScalarNode && k.Value == "<<" && k.ShortTag() == "!!merge" {
			d.merge(n.Content[i+1], v, path, depth)
		}
	}
	seen := make(map[string]int)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := resolve(n.Content[i]), n.Content[i+1]
		// Keys are charged too: unknown ones are never decoded, but each
		// costs a message and a suggestion.
		if !d.spend(k) {
			return true
		}
		if k.Kind != yaml.ScalarNode {
			d.errorf(k.Line, "%s: keys must be plain strings", describe(path))
			continue
		}
		if k.Value == "<<" && k.ShortTag() == "!!merge" {
			continue
		}
		idx, known := fields[k.Value]
		if !known {
			d.errorf(k.Line, "unknown key %q %s%s", k.Value, where(path), d.suggest(k.Value, v.Type()))
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.errorf(k.Line, "key %q is already set at line %d", k.Value, first)
			continue
		}
		seen[k.Value] = k.Line
		if rv := resolve(val); rv == nil || isNull(rv) {
			// An empty value reads as "not set", so the default applies.
			continue
		}
		f := v.Field(idx)
		d.m.lines[f.Addr().Interface()] = k.Line
		d.value(val, f, join(path, k.Value), depth)
	}
	return true
}

// merge applies a `<<:` value: one mapping or a list of them, where earlier
// mappings win over later ones.
func (d *decoder) merge(n *yaml.Node, v reflect.Value, path string, depth int) {
	n = resolve(n)
	if depth >= maxMergeDepth {
		d.errorf(n.Line, "%s: merge keys (<<) nested too deeply", describe(path))
		return
	}
	switch n.Kind {
	case yaml.MappingNode:
		d.value(n, v, path, depth+1)
	case yaml.SequenceNode:
		for i := len(n.Content) - 1; i >= 0; i-- {
			m := resolve(n.Content[i])
			if m.Kind != yaml.MappingNode {
				d.errorf(m.Line, "%s: << wants mappings, got %s", describe(path), kindName(m))
				continue
			}
			d.value(m, v, path, depth+1)
		}
	default:
		d.errorf(n.Line, "%s: << wants a mapping or a list of mappings, got %s", describe(path), kindName(n))
	}
}

func (d *decoder) sequence(n *yaml.Node, v reflect.Value, path string, depth int) bool {
	if n.Kind != yaml.SequenceNode {
		d.errorf(n.Line, "%s: want a list, got %s", describe(path), kindName(n))
		return false
	}
	// The elements are charged before their slice is made: a list of a
	// million entries must not allocate a million activities first.
	if len(n.Content) > d.budget {
		d.spendN(n, len(n.Content))
		return false
	}
	// The slice gets its final length up front: meta keys are pointers into
	// its backing array, which must not move after they are recorded.
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	v.Set(s)
	for i, e := range n.Content {
		if d.exhausted() {
			break
		}
		ev := s.Index(i)
		re := resolve(e)
		if re == nil {
			continue
		}
		// An alias's own line: where the list repeats the entry (a
		// duplicate is reported there, not at the anchor's text).
		d.m.lines[ev.Addr().Interface()] = e.Line
		d.value(e, ev, elemPath(path, ev.Type(), i), depth)
	}
	return true
}

func (d *decoder) stringMap(n *yaml.Node, v reflect.Value, path string) bool {
	if n.Kind != yaml.MappingNode {
		d.errorf(n.Line, "%s: want a mapping, got %s", describe(path), kindName(n))
		return false
	}
	m := make(map[string]string, len(n.Content)/2)
	v.Set(reflect.ValueOf(m))
	mp := v.Addr().Interface().(*map[string]string)
	d.stringEntries(n, m, mp, path, 0)
	return true
}

// stringEntries adds mapping n's entries to m: its own keys first, then
// those its merge keys (<<) bring that it does not set itself (the first
// merged mapping wins), as mapping does for structs. A merge key was
// read as a key named "<<" ("messages.<<: want a string, got a mapping").
func (d *decoder) stringEntries(n *yaml.Node, m map[string]string, mp *map[string]string, path string, depth int) {
	own := make(map[string]bool)
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := resolve(n.Content[i]), resolve(n.Content[i+1])
		if !d.spend(k) {
			return
		}
		if k.Kind != yaml.ScalarNode {
			d.errorf(k.Line, "%s: keys must be plain strings", describe(path))
			continue
		}
		if k.Value == "<<" && k.ShortTag() == "!!merge" {
			merges = append(merges, val)
			continue
		}
		if _, dup := d.m.lines[mapEntry{mp, k.Value}]; dup {
			if own[k.Value] || depth == 0 {
				d.errorf(k.Line, "key %q is already set at line %d", k.Value, d.m.lines[mapEntry{mp, k.Value}])
			}
			continue // set by the mapping that merges this one, or earlier
		}
		own[k.Value] = true
		if val.Kind != yaml.ScalarNode {
			d.errorf(val.Line, "%s: want a string, got %s", describe(join(path, k.Value)), kindName(val))
			continue
		}
		d.m.lines[mapEntry{mp, k.Value}] = k.Line
		if !isNull(val) {
			m[k.Value] = val.Value
		}
	}
	for _, mv := range merges {
		if depth >= maxMergeDepth {
			d.errorf(mv.Line, "%s: merge keys (<<) nested too deeply", describe(path))
			return
		}
		list := []*yaml.Node{mv}
		if mv.Kind == yaml.SequenceNode {
			list = mv.Content
		}
		for _, e := range list {
			e = resolve(e)
			if e.Kind != yaml.MappingNode {
				d.errorf(e.Line, "%s: << wants a mapping or a list of mappings, got %s", describe(path), kindName(e))
				continue
			}
			d.stringEntries(e, m, mp, path, depth+1)
		}
	}
}

func (d *decoder) scalar(n *yaml.Node, v reflect.Value, path string) bool {
	if n.Kind != yaml.ScalarNode {
		d.errorf(n.Line, "%s: want a single value, got %s", describe(path), kindName(n))
		return false
	}
	tag := n.ShortTag()
	switch v.Kind() {
	case reflect.String:
		// Any scalar is text: `id: 30021` means the SKU "30021", not a number.
		if envRef.MatchString(n.Value) {
			// Compose files and shells expand these; this file is read
			// as written, and "${JWT_ISSUER}" as an issuer validated and
			// then refused every buyer's token.
			d.errorf(n.Line, "%s: %q reads like an environment variable, but the config is not expanded; write the value itself (secrets go in the *_env fields, which name the variable)", describe(path), n.Value)
			return false
		}
		if tag != "!!null" {
			v.SetString(n.Value)
		}
		return true
	case reflect.Bool:
		var b bool
		if tag != "!!bool" || n.Decode(&b) != nil {
			d.errorf(n.Line, "%s: want true or false, got %s", describe(path), gotScalar(n, "!!bool"))
			return false
		}
		v.SetBool(b)
		return true
	case reflect.Int, reflect.Int64:
		i, ok := integer(n, tag)
		if !ok || v.OverflowInt(i) {
			d.errorf(n.Line, "%s: want a whole number, got %s", describe(path), gotScalar(n, "!!int"))
			return false
		}
		v.SetInt(i)
		return true
	case reflect.Float64:
		var f float64
		err := n.Decode(&f)
		if i, ok, padded := zeroPadded(n.Value); tag == "!!int" && padded {
			f, err = float64(i), nil
			if !ok {
				err = strconv.ErrRange
			}
		}
		if (tag != "!!int" && tag != "!!float") || err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			d.errorf(n.Line, "%s: want a number, got %s", describe(path), gotScalar(n, "!!int", "!!float"))
			return false
		}
		v.SetFloat(f)
		return true
	default:
		// Only reachable if types.go gains a field kind this decoder does not
		// know; saying so beats silently ignoring the value.
		d.errorf(n.Line, "%s: unsupported field type %s", describe(path), v.Type())
		return false
	}
}

// gotScalar shows a scalar that is not the number or boolean wanted, and
// why when it would be one without its quotes or tag: `stock: "5"` said
// `got "5"`, which reads as no error at all. wants are the YAML tags that
// would do.
func gotScalar(n *yaml.Node, wants ...string) string {
	plain := (&yaml.Node{Kind: yaml.ScalarNode, Value: n.Value}).ShortTag()
	if !slices.Contains(wants, plain) {
		return fmt.Sprintf("%q", n.Value)
	}
	switch {
	case n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0:
		return fmt.Sprintf("%q in quotes, which make it a string; write it without them", n.Value)
	case n.Style&yaml.TaggedStyle != 0:
		return fmt.Sprintf("%q tagged %s; drop the tag", n.Value, n.Tag)
	}
	return fmt.Sprintf("%q", n.Value)
}

// integer accepts YAML ints and floats with no fraction, so `stock: 1e6`
// works as an operator would expect.
func integer(n *yaml.Node, tag string) (int64, bool) {
	switch tag {
	case "!!int":
		if i, ok, padded := zeroPadded(n.Value); padded {
			return i, ok
		}
		var i int64
		return i, n.Decode(&i) == nil
	case "!!float":
		var f float64
		if n.Decode(&f) != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return 0, false
		}
		return int64(f), true
	default:
		return 0, false
	}
}

// zeroPadded reads a zero-padded decimal like 010 or -007 (with YAML's
// "_" digit separators) as the decimal number it shows: yaml.v3 takes it for
// YAML 1.1 octal (010 is 8, while 08 and 09 are 8 and 9), so a column of
// padded numbers pasted from a spreadsheet would load some right and some
// wrong. Explicit forms (0o10, 0x10, 0b10) are left to yaml.v3. padded says
// s is such a number; ok that it fits an int64.
func zeroPadded(s string) (i int64, ok, padded bool) {
	digits := strings.ReplaceAll(s, "_", "")
	if digits != "" && (digits[0] == '-' || digits[0] == '+') {
		digits = digits[1:]
	}
	if len(digits) < 2 || digits[0] != '0' || strings.Trim(digits, "0123456789") != "" {
		return 0, false, false
	}
	i, err := strconv.ParseInt(strings.TrimPrefix(strings.ReplaceAll(s, "_", ""), "+"), 10, 64)
	return i, err == nil, true
}

func (d *decoder) duration(n *yaml.Node, v reflect.Value, path string) bool {
	if n.Kind == yaml.ScalarNode {
		if dur, err := time.ParseDuration(n.Value); err == nil {
			v.SetInt(int64(dur))
			return true
		}
	}
	d.errorf(n.Line, "%s: want a Go duration like 200ms or 10m, got %s", describe(path), kindName(n))
	return false
}

func (d *decoder) time(n *yaml.Node, v reflect.Value, path string) bool {
	if n.Kind == yaml.ScalarNode {
		// RFC 3339 demands a zone: a sale starting at "10:00" in the wrong
		// zone is hours off, so a zone-less time is refused, not guessed.
		if t, err := time.Parse(time.RFC3339, n.Value); err == nil {
			v.Set(reflect.ValueOf(t))
			return true
		}
	}
	d.errorf(n.Line, "%s: want an RFC 3339 time with a zone like 2026-12-01T10:00:00+08:00, got %s", describe(path), kindName(n))
	return false
}

// fieldIndex maps yaml key names to field indexes of struct type t.
func fieldIndex(t reflect.Type) map[string]int {
	idx := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		idx[name] = i
	}
	return idx
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// elemPath names list elements by what they are ("activity", "sku") rather
// than by index, matching how operators talk about them; scalars keep the
// index so the message says which entry is wrong.
func elemPath(path string, t reflect.Type, i int) string {
	switch t {
	case reflect.TypeFor[Activity]():
		return "activity"
	case reflect.TypeFor[SKU]():
		return "sku"
	}
	return fmt.Sprintf("%s[%d]", path, i)
}

func describe(path string) string {
	if path == "" {
		return "config"
	}
	return path
}

func where(path string) string {
	if path == "" {
		return "at top level"
	}
	return "in " + path
}

// suggest is the package's suggest, memoized: aliases may bring the same
// unknown key up many times.
func (d *decoder) suggest(key string, t reflect.Type) string {
	if d.hints == nil {
		d.hints = make(map[hintKey]string)
	}
	hk := hintKey{t, key}
	if h, ok := d.hints[hk]; ok {
		return h
	}
	if len(d.hints) >= maxHints {
		// Thousands of unknown keys are not typos (a wrong file, or a
		// mapping pasted at the wrong level): the lines say enough, and
		// each suggestion costs an edit distance to every known key.
		return ""
	}
	h := suggest(key, t)
	d.hints[hk] = h
	return h
}

// suggest offers the closest known key for a typo, so "stok" points at
// "stock" instead of leaving the operator to read the docs. Keys one level
// down are offered too, because a key at the wrong indentation (stock
// directly under an activity instead of under skus) is as common as a typo.
func suggest(key string, t reflect.Type) string {
	if best := closest(key, t); best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	bestParent, best, bestDist := "", "", maxSuggestDist+1
	for parent, i := range fieldIndex(t) {
		ft := t.Field(i).Type
		if ft.Kind() == reflect.Slice {
			ft = ft.Elem()
		}
		if ft.Kind() != reflect.Struct || ft == timeType {
			continue
		}
		for name := range fieldIndex(ft) {
			dist := editDistance(key, name)
			if dist < bestDist || (dist == bestDist && parent+name < bestParent+best) {
				bestParent, best, bestDist = parent, name, dist
			}
		}
	}
	if best == "" || bestDist >= len(key) {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q under %s?)", best, bestParent)
}

const maxSuggestDist = 2

// closest returns the key of struct type t nearest to key, or "" when none is
// near enough to be a plausible typo.
func closest(key string, t reflect.Type) string {
	best, bestDist := "", maxSuggestDist+1
	for name := range fieldIndex(t) {
		dist := editDistance(key, name)
		if dist < bestDist || (dist == bestDist && name < best) {
			best, bestDist = name, dist
		}
	}
	if bestDist >= len(key) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		// Long keys are not typos of ours; skip the quadratic work.
		return math.MaxInt
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
