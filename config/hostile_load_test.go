package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// allocated runs f and returns the bytes it allocated.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func loadErrors(t *testing.T, err error) []Error {
	t.Helper()
	var es *Errors
	if !errors.As(err, &es) {
		t.Fatalf("error is %T, not *Errors: %v", err, err)
	}
	return es.List
}

// A 17 KB file whose aliases reach one mapping of 1000 unknown keys a
// million times: each visit reported every key again, with an edit-distance
// suggestion each. `validate` ran 31 s and died out of memory (2 GB in use)
// before; the problems are 1000 distinct lines.
func TestLoadAliasErrorBomb(t *testing.T) {
	var keys, skus, acts []string
	for i := range 1000 {
		keys = append(keys, fmt.Sprintf("k%d: 1", i))
		skus = append(skus, "*a")
		acts = append(acts, "*c")
	}
	src := "upstream: {url: http://127.0.0.1:8081}\n" +
		"x: &a {" + strings.Join(keys, ", ") + "}\n" +
		"y: &b [" + strings.Join(skus, ", ") + "]\n" +
		"z: &c {id: a1, skus: *b}\n" +
		"activities: [" + strings.Join(acts, ", ") + "]\n"
	var err error
	mem := allocated(func() { _, err = Parse("bomb.yaml", []byte(src)) })
	errs := loadErrors(t, err)
	if len(errs) > 1100 {
		t.Errorf("%d errors for 1000 unknown keys", len(errs))
	}
	if mem > 200<<20 {
		t.Errorf("parsing a %d-byte file allocated %d MiB", len(src), mem>>20)
	}
	var tooLarge bool
	for _, e := range errs {
		tooLarge = tooLarge || strings.Contains(e.Msg, "too many aliases")
	}
	if !tooLarge {
		t.Errorf("no \"too many aliases\" error in %d errors", len(errs))
	}
}

// A list longer than the node budget was allocated whole before its
// elements were charged: `activities: [1,1,...]` of 1 MB made half a
// million Activity structs (930 MB, 5 s) and reported each as "want a
// mapping" — 1.5 million lines. Now: one error, and no slice.
func TestLoadLongList(t *testing.T) {
	src := "activities: [" + strings.Repeat("1,", 300_000) + "1]\n"
	var err error
	mem := allocated(func() { _, err = Parse("long.yaml", []byte(src)) })
	errs := loadErrors(t, err)
	if len(errs) != 1 || errs[0].Line != 1 || !strings.Contains(errs[0].Msg, "document is too large") {
		t.Errorf("errors = %v", errs[:min(len(errs), 3)])
	}
	// yaml.v3's own node tree is most of it (~100 bytes a node).
	if mem > 150<<20 {
		t.Errorf("parsing a %d-byte list allocated %d MiB", len(src), mem>>20)
	}
}

// Every unknown key is reported; only the first maxHints get a "did you
// mean" (each costs an edit distance to every known key: 100,000 keys took
// 5 s).
func TestLoadManyUnknownKeys(t *testing.T) {
	var b strings.Builder
	b.WriteString("upstream: {url: http://127.0.0.1:8081}\n")
	n := maxHints + 500
	for i := range n {
		fmt.Fprintf(&b, "listen%d: x\n", i)
	}
	_, err := Parse("keys.yaml", []byte(b.String()))
	errs := loadErrors(t, err)
	if len(errs) != n {
		t.Fatalf("%d errors for %d unknown keys", len(errs), n)
	}
	if e := errs[0]; e.Line != 2 || !strings.Contains(e.Msg, `did you mean "listen"`) {
		t.Errorf("first error %+v lacks its suggestion", e)
	}
	if e := errs[n-1]; e.Line != n+1 || strings.Contains(e.Msg, "did you mean") || !strings.Contains(e.Msg, `unknown key "listen`) {
		t.Errorf("last error %+v", e)
	}
}

// Load names the file in every problem with reading it, and never reads
// more than MaxConfigBytes (a wrong -c, /dev/zero, a huge log).
func TestLoadFileProblems(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte("# "+strings.Repeat("x", MaxConfigBytes)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ path, want string }{
		{dir, "is a directory"},
		{filepath.Join(dir, "missing.yaml"), "no such file"},
		{big, "is larger than 2 MiB"},
	}
	if _, err := os.Stat("/dev/zero"); err == nil {
		cases = append(cases, struct{ path, want string }{"/dev/zero", "is larger than"})
	}
	for _, c := range cases {
		_, err := Load(c.path)
		if err == nil || !strings.HasPrefix(err.Error(), c.path+": ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Load(%s) = %v, want %q naming the file", c.path, err, c.want)
		}
	}
}

// Values whose derived durations left int64 loaded, and misbehaved at
// serve time. Each is now a FILE:LINE error.
func TestLoadOverflowingValues(t *testing.T) {
	tests := []struct {
		name, give string
		line       int
		want       string
	}{
		// pending_timeout + 5m wrapped negative: key_ttl_after_end 1h
		// passed, the keys would expire long before the reservations.
		{"pending_timeout near the max", "    pending_timeout: 2562047h45m\n    key_ttl_after_end: 1h\n", 8,
			"pending_timeout (2562047h45m0s) is longer than any key_ttl_after_end can be"},
		// (max_backlog + shards - 1) wrapped in the reserve script's
		// per-shard bound: every queued buyer answered BUSY.
		{"max_backlog near the max", "    mode: queue\n    queue: {max_backlog: 9223372036854775807}\n", 9,
			"queue.max_backlog must be at most 1000000000"},
		{"backlog drains in centuries", "    mode: queue\n    queue: {rate: 0.001, max_backlog: 1000000000}\n", 9,
			"max_backlog / queue.rate is longer than any key_ttl_after_end can be"},
		// workers/rate s and max_backlog/rate s: claim idle and key TTL
		// wrapped; 1e-300 passed as positive.
		{"queue rate tiny", "    mode: queue\n    queue: {rate: 1e-300}\n", 9, "queue.rate must be between 0.001 and 1e+09"},
		{"queue rate huge", "    queue: {rate: 1e300}\n", 8, "queue.rate must be between 0.001 and 1e+09"},
		// 1e-12 per second became one token per nanosecond in the
		// limiter: no limit at all.
		{"limit rate tiny", "limits: {per_ip: {rate: 1e-12}}\n", 8, "limits.per_ip.rate must be between 0.001 and 1e+09"},
		{"admission burst huge", "    admission_rate: {burst: 9223372036854775807}\n", 8, "admission_rate.burst must be at most 1000000000"},
		{"rate 1e400", "limits: {per_user: {rate: 1e400}}\n", 8, `limits.per_user.rate: want a number, got "1e400"`},
		{"stock above 2^53", "    skus: [{id: s2, stock: 9007199254740993}]\n", 7, "stock must be between 0 and 1000000000"},
	}
	const head = "upstream:\n  url: http://127.0.0.1:8081\nactivities:\n  - id: a1\n    start: 2026-12-01T10:00:00+08:00\n    end: 2026-12-01T10:30:00+08:00\n    skus: [{id: s1, stock: 5}]\n"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			give := head + tt.give
			if strings.HasPrefix(tt.give, "    skus:") {
				give = strings.Replace(head, "    skus: [{id: s1, stock: 5}]\n", tt.give, 1)
			}
			_, err := Parse("t.yaml", []byte(give))
			want := fmt.Sprintf("t.yaml:%d: ", tt.line)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %s...%s", err, want, tt.want)
			}
			for _, l := range strings.Split(err.Error(), "\n") {
				if strings.Contains(l, tt.want) && !strings.HasPrefix(l, want) {
					t.Errorf("%q is not at line %d", l, tt.line)
				}
			}
		})
	}
}

// An activity listed twice (a copy-paste, or the same anchor twice) is
// one error at the second entry. It also came out as the activity's route
// overlapping its own route, and, through an alias, at the anchor's line:
// "t.yaml:4: id is already used at line 4".
func TestLoadDuplicateActivityOneError(t *testing.T) {
	const head = "upstream: {url: http://127.0.0.1:8081}\nactivities:\n"
	act := "  - id: a1\n    start: 2026-12-01T10:00:00+08:00\n    end: 2026-12-01T10:30:00+08:00\n    skus: [{id: s1, stock: 5}]\n"
	anchored := "  - &a\n    id: a1\n    start: 2026-12-01T10:00:00+08:00\n    end: 2026-12-01T10:30:00+08:00\n    skus: [{id: s1, stock: 5}]\n"
	for _, tt := range []struct {
		give string
		line int
		want string
	}{
		{head + act + act, 7, `activity "a1": id is already used at line 3`},
		{head + anchored + "  - *a\n", 8, `activity "a1": id is already used at line 4`},
		{head + "  - id: a1\n    start: 2026-12-01T10:00:00+08:00\n    end: 2026-12-01T10:30:00+08:00\n    skus:\n      - &s {id: s1, stock: 5}\n      - *s\n", 8,
			`activity "a1": sku "s1" is already listed at line 7`},
	} {
		_, err := Parse("t.yaml", []byte(tt.give))
		errs := loadErrors(t, err)
		if len(errs) != 1 || errs[0].Line != tt.line || !strings.Contains(errs[0].Msg, tt.want) {
			t.Errorf("errors = %v, want one at line %d: %s", errs, tt.line, tt.want)
		}
	}
}

// upstream.url is a base the request path is appended to. A query,
// fragment or user info loaded and was dropped in sync mode while queue
// mode appended to the text as written: "http://shop/base?x=1" sent queued
// buys to /base with their path in the query, "#" cut their path off.
func TestLoadUpstreamBaseURL(t *testing.T) {
	for _, tt := range []struct{ url, want string }{
		{"http://127.0.0.1:8081/base?x=1", "without a query or fragment"},
		{"http://127.0.0.1:8081/base?", "without a query or fragment"},
		{"http://127.0.0.1:8081/#top", "without a query or fragment"},
		{"http://user:pw@127.0.0.1:8081", "must not hold user info (user:password@): sync mode dropped it and queue mode sent it as Basic auth; got \"http://user:xxxxx@127.0.0.1:8081\""},
		{"http://127.0.0.1:8081/a b", "must be written as sent"},
		{"http://127.0.0.1:8081/base/", ""},
		{"https://shop.example", ""},
	} {
		src := "upstream:\n  url: \"" + tt.url + "\"\n"
		_, err := Parse("t.yaml", []byte(src))
		var got string
		for _, e := range loadErrorsOrNil(t, err) {
			if strings.HasPrefix(e.Msg, "upstream.url") {
				got = e.Error()
			}
		}
		switch {
		case tt.want == "" && got != "":
			t.Errorf("%s: %s", tt.url, got)
		case tt.want != "" && (!strings.HasPrefix(got, "t.yaml:2: ") || !strings.Contains(got, tt.want)):
			t.Errorf("%s: got %q, want t.yaml:2: ...%s", tt.url, got, tt.want)
		}
	}
}

func loadErrorsOrNil(t *testing.T, err error) []Error {
	if err == nil {
		return nil
	}
	return loadErrors(t, err)
}

// Where the bytes are wrong, the error says so at their line: yaml.v3's
// reader errors carry no line ("yaml: invalid leading UTF-8 octet") and
// came out at line 1; a NEL, U+2028 or U+2029 (a paste from a web page)
// is a line break to yaml.v3 only, and moved every line after it.
func TestLoadEncodingLines(t *testing.T) {
	const head = "upstream:\n  url: http://127.0.0.1:8081\n# a comment\n"
	for _, tt := range []struct {
		name, give string
		line       int
		want       string
	}{
		{"invalid UTF-8", head + "messages:\n  SOLD_OUT: \"x\xffy\"\n", 5, "byte 0xFF is not UTF-8"},
		{"Latin-1 file", head + "messages:\n  SOLD_OUT: \"caf\xe9\"\n", 5, "byte 0xE9 is not UTF-8"},
		{"NUL", head + "listen: \":80\x0080\"\n", 4, "control character U+0000 is not allowed"},
		{"C1 control", head + "listen: \"\u0090\"\n", 4, "control character U+0090 is not allowed"},
		{"LS in a comment", "# note\u2028\nupstream:\n  url: http://127.0.0.1:8081\nlisten: bad\n", 4, `listen: want host:port, got "bad"`},
		{"NEL in a value", "upstream:\n  url: http://127.0.0.1:8081\nmessages:\n  SOLD_OUT: \"a\u0085b\"\nlisten: bad\n", 5, `listen: want host:port, got "bad"`},
		{"LS breaking the syntax", "# note\u2028 more\nupstream:\n  url: http://127.0.0.1:8081\n", 2, "line 1 holds a NEL, U+2028 or U+2029"},
		{"CR-only file", "upstream:\r  url: http://127.0.0.1:8081\rlisten: bad\r", 3, `listen: want host:port, got "bad"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(tt.give))
			errs := loadErrorsOrNil(t, err)
			if len(errs) != 1 || errs[0].Line != tt.line || !strings.Contains(errs[0].Msg, tt.want) {
				t.Errorf("errors = %v, want t.yaml:%d: ...%s", errs, tt.line, tt.want)
			}
		})
	}
}

// Every pair of buy routes was compared: 14,000 activities on the default
// route (a 1.3 MB file) took 14 s to validate, and as long on every
// reload. Routes of one {activity} pattern are no longer compared with
// each other (they never overlap); the errors are unchanged
// (TestRedTeamOps2OverlappingRoutes and others).
func TestLoadManyActivitiesQuickly(t *testing.T) {
	var b strings.Builder
	b.WriteString("upstream: {url: \"http://127.0.0.1:8081\"}\nactivities:\n")
	for i := range 12_000 {
		fmt.Fprintf(&b, "  - {id: a%d, start: 2026-12-01T10:00:00Z, end: 2026-12-02T10:00:00Z, skus: [{id: s, stock: 1}]}\n", i)
	}
	b.WriteString("  - {id: late, route: {path: \"/api/seckill/a7/{sku}/buy\"}, start: 2026-12-01T10:00:00Z, end: 2026-12-02T10:00:00Z, skus: [{id: s, stock: 1}]}\n")
	start := time.Now()
	_, err := Parse("many.yaml", []byte(b.String()))
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("validating 12,000 activities took %s", d)
	}
	// The one real overlap is still found, against the activity it hits.
	errs := loadErrorsOrNil(t, err)
	if len(errs) != 1 || errs[0].Line != 12_003 || !strings.Contains(errs[0].Msg, `activity "late": route POST /api/seckill/a7/{sku}/buy overlaps activity "a7"'s route`) {
		t.Errorf("errors = %v", errs)
	}
}

// The config is not expanded: an operator used to Compose files who wrote
// ${JWT_ISSUER} got a config that validated and refused every token at
// serve time (likewise a Redis username, a Sentinel master set). Such a
// value is an error at its line; *_env fields name variables instead.
func TestLoadEnvReferences(t *testing.T) {
	const head = "upstream:\n  url: http://127.0.0.1:8081\n"
	for _, tt := range []struct {
		give string
		line int
	}{
		{head + "redis:\n  username: ${REDIS_USER}\n", 4},
		{head + "redis:\n  sentinel: {master_set: \"${MASTER:-mymaster}\", addrs: [\"127.0.0.1:26379\"]}\n", 4},
		{head + "identity:\n  user:\n    jwt: {hmac_secret_env: K, issuer: $JWT_ISSUER, audience: shop}\n", 5},
		{head + "trusted_proxies: [\"${LB_CIDR}\"]\n", 3},
	} {
		_, err := Parse("t.yaml", []byte(tt.give))
		errs := loadErrorsOrNil(t, err)
		if len(errs) != 1 || errs[0].Line != tt.line || !strings.Contains(errs[0].Msg, "reads like an environment variable, but the config is not expanded") {
			t.Errorf("%q: errors = %v, want one at line %d", tt.give, errs, tt.line)
		}
	}
	// Text that merely holds a $ is text.
	if _, err := Parse("t.yaml", []byte(head+"messages: {SOLD_OUT: \"${PRICE} is gone\"}\nredis: {key_prefix: \"sk$1\"}\n")); err != nil {
		t.Errorf("messages and other $ text: %v", err)
	}
}

// A list element of the wrong type is one error: the list checks after
// decoding also read it, as "", and said so again ('trusted_proxies: ""
// is neither a CIDR nor an IP address').
func TestLoadBadListElementOnce(t *testing.T) {
	for _, give := range []string{
		"trusted_proxies: [[1]]\n",
		"upstream: {release_statuses: [{a: 1}]}\n",
		"identity: {user: {jwt: {hmac_secret_env: K, issuer: i, audience: a, algorithms: [[HS256]]}}}\n",
		"activities: [{id: a1, start: 2026-12-01T10:00:00Z, end: 2026-12-02T10:00:00Z, skus: [{id: s, stock: 1}], route: {pass_methods: [[GET]]}}]\n",
	} {
		if !strings.HasPrefix(give, "upstream:") {
			give = "upstream: {url: \"http://127.0.0.1:8081\"}\n" + give
		} else {
			give = strings.Replace(give, "upstream: {", "upstream: {url: \"http://127.0.0.1:8081\", ", 1)
		}
		_, err := Parse("t.yaml", []byte(give))
		errs := loadErrorsOrNil(t, err)
		if len(errs) != 1 || !strings.Contains(errs[0].Msg, "want a single value") {
			t.Errorf("%q: errors = %v", give, errs)
		}
	}
}

// A number or boolean in quotes (or tagged !!str) is a string: the error
// said `want a whole number, got "5"`, which reads as no error at all. It
// now says why.
func TestLoadQuotedScalars(t *testing.T) {
	const head = "upstream: {url: \"http://127.0.0.1:8081\"}\n"
	for _, tt := range []struct{ give, want string }{
		{"watch: \"true\"\n", `t.yaml:2: watch: want true or false, got "true" in quotes, which make it a string; write it without them`},
		{"limits: {per_ip: {rate: '5'}}\n", `t.yaml:2: limits.per_ip.rate: want a number, got "5" in quotes`},
		{"reconcile: {exceptions_max: !!str 500}\n", `t.yaml:2: reconcile.exceptions_max: want a whole number, got "500" tagged !!str; drop the tag`},
		{"reconcile: {exceptions_max: \"many\"}\n", `t.yaml:2: reconcile.exceptions_max: want a whole number, got "many"`},
	} {
		_, err := Parse("t.yaml", []byte(head+tt.give))
		if err == nil || err.Error() != tt.want && !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%q: err = %v, want %s", tt.give, err, tt.want)
		}
		if strings.HasSuffix(tt.want, `"many"`) && err != nil && err.Error() != tt.want {
			t.Errorf("%q: err = %v, want exactly %s", tt.give, err, tt.want)
		}
	}
	for _, give := range []string{"", "# just a comment\n"} {
		_, err := Parse("t.yaml", []byte(give))
		if err == nil || err.Error() != "t.yaml:1: upstream.url is required" {
			t.Errorf("%q: err = %v, want only t.yaml:1: upstream.url is required", give, err)
		}
	}
}

// One activity listed 10,000 times through an alias on one line: each
// copy's problems were reported again, 20,000 lines for two problems.
func TestLoadAliasedActivitiesOnce(t *testing.T) {
	src := "upstream: {url: \"http://127.0.0.1:8081\"}\nx: &a {id: a1, start: 2026-12-01T10:00:00Z, end: 2026-12-02T10:00:00Z, skus: [{id: s, stock: 1}], shards: 0}\nactivities: [" +
		strings.Repeat("*a, ", 9999) + "*a]\n"
	_, err := Parse("t.yaml", []byte(src))
	if errs := loadErrors(t, err); len(errs) != 3 {
		t.Errorf("all aliases on one line: %d errors, want 3 (x, shards, the repeated id): %v", len(errs), errs[:min(len(errs), 5)])
	}
}

// Found by FuzzLoad (testdata/fuzz/FuzzLoad/a9e88922f87ae8de): a file
// that does not end in a newline had what ends the input placed on the
// line after its last ("---" alone: "FILE:2: config: want a mapping, got
// nothing" in a one-line file).
func TestLoadLastLineWithoutNewline(t *testing.T) {
	for _, give := range []string{"---", "upstream: {url: \"http://127.0.0.1:8081\"}\nlisten: [", "upstream:\n  url: \"http://127.0.0.1:8081\"\nactivities: {"} {
		_, err := Parse("t.yaml", []byte(give))
		last := strings.Count(give, "\n") + 1
		for _, e := range loadErrors(t, err) {
			if e.Line < 1 || e.Line > last {
				t.Errorf("%q (%d lines): %v", give, last, e)
			}
		}
	}
}

// Files the config names are read bounded too: jwks_file: /dev/zero (or a
// log by mistake) made validate read until memory ran out; so did
// redis.tls files. A directory is said to be one.
func TestLoadNamedFilesBounded(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero")
	}
	dir := t.TempDir()
	for _, tt := range []struct{ give, want string }{
		{"identity: {user: {jwt: {jwks_file: /dev/zero, issuer: i, audience: a}}}\n", "t.yaml:3: identity.user.jwt.jwks_file: /dev/zero is larger than 1048576 bytes"},
		{"redis: {tls: {ca_file: /dev/zero}}\n", "t.yaml:3: redis.tls.ca_file: /dev/zero is larger than 16777216 bytes"},
		{"redis: {tls: {ca_file: " + dir + "}}\n", "t.yaml:3: redis.tls.ca_file: " + dir + " is a directory, not a file"},
	} {
		_, err := Parse("t.yaml", []byte("upstream: {url: \"http://127.0.0.1:8081\"}\n\n"+tt.give))
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%q: err = %v, want %s", tt.give, err, tt.want)
		}
	}
}

// Any syntax error was blamed on the file's first line with a tab in its
// leading white space, even a tab that is content (in a block or quoted
// scalar): an unclosed "[" on line 8 came out as "FILE:6: a tab in the
// indentation". A real tab indentation is still named at its line.
func TestLoadTabNotBlamedWrongly(t *testing.T) {
	for _, tt := range []struct {
		give string
		want string
	}{
		{"upstream:\n  url: \"http://127.0.0.1:8081\"\nmessages:\n  SOLD_OUT: |\n    a\n    \tb\nlisten: \":8080\"\nx: [\n", "t.yaml:8: YAML syntax: did not find expected node content"},
		{"upstream:\n  url: \"http://127.0.0.1:8081\"\nmessages:\n  SOLD_OUT: \"a\n\tb\"\nlisten: \":8080\"\nx: [\n", "t.yaml:7: YAML syntax: did not find expected node content"},
		{"upstream:\n  url: x\n\tlisten: y\n", "t.yaml:3: YAML syntax: a tab in the indentation"},
		{"upstream:\n\turl: x\n", "t.yaml:2: YAML syntax: a tab in the indentation"},
	} {
		_, err := Parse("t.yaml", []byte(tt.give))
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%q: err = %v, want %s", tt.give, err, tt.want)
		}
	}
}

// yaml.v3 names the start of the construct it was parsing, not the line
// that broke it: a key one space short on line 126, inside the activities
// list, came out as "FILE:3: did not find expected '-' indicator" (line 3
// being "activities:"). Now the line of the problem.
func TestLoadSyntaxErrorAtItsLine(t *testing.T) {
	var far strings.Builder
	far.WriteString("upstream:\n  url: \"http://127.0.0.1:8081\"\nactivities:\n")
	for i := range 30 {
		fmt.Fprintf(&far, "  - id: a%d\n    start: 2026-12-01T10:00:00Z\n    end: 2026-12-02T10:00:00Z\n    skus: [{id: s, stock: 1}]\n", i)
	}
	far.WriteString("  - id: bad\n    start: 2026-12-01T10:00:00Z\n   end: 2026-12-02T10:00:00Z\n    skus: [{id: s, stock: 1}]\n")
	for _, tt := range []struct{ give, want string }{
		{far.String(), "t.yaml:126: YAML syntax: did not find expected '-' indicator"},
		{"upstream:\n  url: \"http://127.0.0.1:8081\"\n  timeout: 3s\n max_conns: 5\nlisten: \":1\"\n", "t.yaml:4: YAML syntax: did not find expected key"},
		{"upstream:\n  url: \"http://127.0.0.1:8081\"\nlimits:\n  per_ip: {rate: 1, burst: 2}\n  per_user:\n    rate: 1\n   burst: 2\n", "t.yaml:7: YAML syntax: did not find expected key"},
		{"activities:\n  - id: a\n    skus:\n      - id: s\n      stock: 1\n    - id: b\n", "t.yaml:5: YAML syntax: did not find expected '-' indicator"},
		// Already right: kept.
		{"upstream: {url: \"http://127.0.0.1:8081\"\nlisten: \":1\"\n", "t.yaml:1: YAML syntax: did not find expected ',' or '}'"},
		{"upstream:\n  url: http://127.0.0.1:8081\nmessages:\n  SOLD_OUT: sold: out\n", "t.yaml:4: YAML syntax: mapping values are not allowed in this context"},
	} {
		_, err := Parse("t.yaml", []byte(tt.give))
		if err == nil || err.Error() != tt.want {
			t.Errorf("err = %v, want %s", err, tt.want)
		}
	}
}

// server.write_timeout: 1ns validated and the proxy answered nothing (each
// answer timed out unwritten; tried with serve). Network timeouts are at
// least 1ms now.
func TestLoadNetTimeoutsAtLeastAMillisecond(t *testing.T) {
	for _, give := range []string{
		"server: {write_timeout: 1ns}\n", "server: {read_timeout: 999us}\n", "server: {idle_timeout: 1ns}\n",
		"upstream: {timeout: 1us}\n", "upstream: {pass_timeout: 1ns}\n", "upstream: {idle_timeout: 1ns}\n",
		"redis: {timeout: 10us}\n",
	} {
		src := "upstream: {url: \"http://127.0.0.1:8081\"}\n" + give
		if strings.HasPrefix(give, "upstream:") {
			src = strings.Replace(give, "upstream: {", "upstream: {url: \"http://127.0.0.1:8081\", ", 1)
		}
		_, err := Parse("t.yaml", []byte(src))
		line := strings.Count(src, "\n")
		if err == nil || !strings.HasPrefix(err.Error(), fmt.Sprintf("t.yaml:%d: ", line)) || !strings.Contains(err.Error(), "must be at least 1ms") {
			t.Errorf("%q: err = %v", give, err)
		}
	}
	if _, err := Parse("t.yaml", []byte("upstream: {url: \"http://127.0.0.1:8081\", timeout: 1ms}\nserver: {write_timeout: 1ms}\nredis: {timeout: 1ms}\n")); err != nil {
		t.Errorf("1ms: %v", err)
	}
}

// listen and admin.listen naming one port as "localhost" and "127.0.0.1"
// validated; serve then failed to bind the second, with no line.
func TestLoadListenLocalhostSamePort(t *testing.T) {
	_, err := Parse("t.yaml", []byte("upstream: {url: \"http://127.0.0.1:8081\"}\nlisten: \"127.0.0.1:9090\"\nadmin: {listen: \"localhost:9090\"}\n"))
	if err == nil || !strings.HasPrefix(err.Error(), "t.yaml:3: admin.listen \"localhost:9090\" is the same address as listen") {
		t.Errorf("err = %v", err)
	}
}

// A merge key in messages (or signature.keys) was read as a key named
// "<<": 'messages.<<: want a string, got a mapping'. It merges, as in
// every other mapping; keys written out win, and the first merged wins.
func TestLoadMergeIntoStringMap(t *testing.T) {
	src := "upstream: {url: \"http://127.0.0.1:8081\"}\n" +
		"messages:\n  <<: [&t {SOLD_OUT: \"售罄\", PAUSED: \"暂停\"}, &m {BUSY: busy, PAUSED: other}]\n  SOLD_OUT: gone\n"
	cfg, err := Parse("t.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"SOLD_OUT": "gone", "PAUSED": "暂停", "BUSY": "busy"}
	if fmt.Sprint(cfg.Messages) != fmt.Sprint(want) {
		t.Errorf("messages = %v, want %v", cfg.Messages, want)
	}
	for _, tt := range []struct{ give, want string }{
		{"messages:\n  <<: 5\n", "t.yaml:3: messages: << wants a mapping or a list of mappings, got \"5\""},
		{"messages:\n  SOLD_OUT: a\n  SOLD_OUT: b\n", "t.yaml:4: key \"SOLD_OUT\" is already set at line 3"},
		{"messages:\n  SOLD_OUT:\n  SOLD_OUT: b\n", "t.yaml:4: key \"SOLD_OUT\" is already set at line 3"},
	} {
		_, err := Parse("t.yaml", []byte("upstream: {url: \"http://127.0.0.1:8081\"}\n"+tt.give))
		if err == nil || err.Error() != tt.want {
			t.Errorf("%q: err = %v, want %s", tt.give, err, tt.want)
		}
	}
}

// yaml.v3 reads UTF-16 files (with a BOM); the search for a syntax
// error's line cut them mid-character and named a later line (5). It cuts
// them at their own line breaks, both byte orders.
func TestLoadUTF16SyntaxLine(t *testing.T) {
	src := "upstream:\n  url: \"http://127.0.0.1:8081\"\n  timeout: 3s\n max_conns: 5\nlisten: \":1\"\nwatch: false\n"
	u16 := []byte{0xFF, 0xFE}
	for _, r := range src {
		u16 = append(u16, byte(r), 0)
	}
	u16be := []byte{0xFE, 0xFF}
	for _, r := range src {
		u16be = append(u16be, 0, byte(r))
	}
	for _, data := range [][]byte{u16, u16be} {
		_, err := Parse("t.yaml", data)
		if err == nil || !strings.HasPrefix(err.Error(), "t.yaml:4: YAML syntax: did not find expected key") {
			t.Errorf("% x...: err = %v, want line 4", data[:4], err)
		}
	}
}

// A value pasted by mistake (a megabyte on one line) was quoted whole in
// its error: one line of a megabyte.
func TestLoadLongValueMessageShort(t *testing.T) {
	long := strings.Repeat("界", 300_000)
	_, err := Parse("t.yaml", []byte("upstream: {url: \"http://127.0.0.1:8081\"}\nlisten: \""+long+"\"\n"))
	if err == nil || !strings.HasPrefix(err.Error(), "t.yaml:2: listen: want host:port, got \"界") || len(err.Error()) > 1000 || !utf8.ValidString(err.Error()) {
		t.Errorf("err (%d bytes) = %.200s...", len(fmt.Sprint(err)), err)
	}
}

// Files with lone CRs (old Mac line ends, or one pasted in): lines are
// counted as yaml.v3 and editors count them, also by the syntax error
// line search.
func TestLoadLoneCRLines(t *testing.T) {
	for _, tt := range []struct{ give, want string }{
		{"upstream:\r  url: \"http://127.0.0.1:8081\"\r  timeout: 3s\r max_conns: 5\rlisten: \":1\"\r", "t.yaml:4: YAML syntax: did not find expected key"},
		{"# a\rupstream:\n  url: \"http://127.0.0.1:8081\"\r\n  timeout: 3s\r max_conns: 5\nlisten: \":1\"\n", "t.yaml:5: YAML syntax: did not find expected key"},
	} {
		_, err := Parse("t.yaml", []byte(tt.give))
		if err == nil || err.Error() != tt.want {
			t.Errorf("%q: err = %v, want %s", tt.give, err, tt.want)
		}
	}
}
