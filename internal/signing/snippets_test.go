package signing_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/signing"
)

// The Go snippet of docs/verify-signature.md, compiled here; the test below
// checks the document holds it verbatim.
// BEGIN snippet
// VerifySeckill reports whether header (X-Seckill-Signature) signs these
// X-Seckill-* values with secret and is at most maxAge away from now.
func VerifySeckill(secret []byte, header, token, activity, sku, qty, user string, now time.Time, maxAge time.Duration) bool {
	var ts, sig string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = strings.ToLower(v)
		}
	}
	ms, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sig == "" {
		return false
	}
	if d := now.Sub(time.UnixMilli(ms)); d > maxAge || d < -maxAge {
		return false
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(ts + "." + token + "." + activity + "." + sku + "." + qty + "." + user))
	want := hex.EncodeToString(mac.Sum(nil))
	return hmac.Equal([]byte(want), []byte(sig))
}

// END snippet

// BEGIN snippet v2
// VerifySeckillV2 reports whether header (X-Seckill-Signature) carries a v2
// made with the key its k names among keys (id -> secret), over this method,
// request-target and these X-Seckill-* values, at most maxAge away from now.
func VerifySeckillV2(keys map[string][]byte, header, method, target, token, activity, sku, qty, user string, now time.Time, maxAge time.Duration) bool {
	var ts, kid, sig string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "k":
			kid = v
		case "v2":
			sig = strings.ToLower(v)
		}
	}
	secret, known := keys[kid]
	ms, err := strconv.ParseInt(ts, 10, 64)
	if !known || err != nil || sig == "" {
		return false
	}
	if d := now.Sub(time.UnixMilli(ms)); d > maxAge || d < -maxAge {
		return false
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(strings.Join([]string{"v2", ts, kid, method, target, token, activity, sku, qty, user}, "\n")))
	want := hex.EncodeToString(mac.Sum(nil))
	return hmac.Equal([]byte(want), []byte(sig))
}

// END snippet v2

// vector is one v1 signature check: the fields in snippet order and the
// verdict every v1 snippet must reach.
type vector struct {
	name                                            string
	secret, header, token, activity, sku, qty, user string
	want                                            bool
}

func vectors() []vector {
	const secret = "s3cret-key"
	now := time.Now().UnixMilli()
	tok, act, sku, qty, user := "act_1001.30021.3.AbC-x_9", "act_1001", "30021", "1", "u-42"
	good := signing.Sign([]byte(secret), now, tok, act, sku, qty, user)
	unicode := signing.Sign([]byte(secret), now, tok, act, sku, qty, "用户-7")
	stale := signing.Sign([]byte(secret), now-10*60*1000, tok, act, sku, qty, user)
	future := signing.Sign([]byte(secret), now+10*60*1000, tok, act, sku, qty, user)
	upper := good[:strings.Index(good, "v1=")+3] + strings.ToUpper(good[strings.Index(good, "v1=")+3:])
	// Today's header: k and v2 are fields the v1 snippets ignore.
	keyed := signing.Keyring{{ID: "2026-12", Secret: []byte(secret)}}.Sign(now, signing.Request{Token: tok, Activity: act, SKU: sku,
		Qty: qty, User: user, Method: "POST", Target: "/api/seckill/act_1001/30021/buy"})
	return []vector{
		{"valid", secret, good, tok, act, sku, qty, user, true},
		{"valid unicode user", secret, unicode, tok, act, sku, qty, "用户-7", true},
		{"upper-case hex", secret, upper, tok, act, sku, qty, user, true},
		{"spaces after comma", secret, strings.Replace(good, ",", ", ", 1), tok, act, sku, qty, user, true},
		{"header with k and v2", secret, keyed, tok, act, sku, qty, user, true},
		{"header with k and v2, reordered", secret, reorderFields(keyed), tok, act, sku, qty, user, true},
		{"other sku", secret, good, tok, act, "30022", qty, user, false},
		{"other qty", secret, good, tok, act, sku, "2", user, false},
		{"other user", secret, good, tok, act, sku, qty, "u-43", false},
		{"other token", secret, good, tok + "x", act, sku, qty, user, false},
		{"wrong secret", "other", good, tok, act, sku, qty, user, false},
		{"stale", secret, stale, tok, act, sku, qty, user, false},
		{"from the future", secret, future, tok, act, sku, qty, user, false},
		{"no v1", secret, "t=" + strconv.FormatInt(now, 10), tok, act, sku, qty, user, false},
		{"garbage", secret, "garbage", tok, act, sku, qty, user, false},
		{"empty", secret, "", tok, act, sku, qty, user, false},
	}
}

// vectorV2 is one v2 check: the shop's keys ("id=secret,id=secret"), the
// fields in snippet order and the verdict every v2 snippet must reach.
type vectorV2 struct {
	name                                                          string
	keys, header, method, target, token, activity, sku, qty, user string
	want                                                          bool
}

func vectorsV2() []vectorV2 {
	oldK, newK := signing.Key{ID: "2026-11", Secret: []byte("old-secret")}, signing.Key{ID: "2026-12", Secret: []byte("new-secret")}
	const both, oldOnly = "2026-11=old-secret,2026-12=new-secret", "2026-11=old-secret"
	now := time.Now().UnixMilli()
	tok, act, sku, qty, user := "act_1001.30021.3.AbC-x_9", "act_1001", "30021", "1", "u-42"
	const method, target = "POST", "/api/seckill/act_1001/30021/buy?ref=a%20b&x=1"
	req := signing.Request{Token: tok, Activity: act, SKU: sku, Qty: qty, User: user, Method: method, Target: target}
	sign := func(kr signing.Keyring, at int64, r signing.Request) string { return kr.Sign(at, r) }
	good := sign(signing.Keyring{newK, oldK}, now, req)
	uni := req
	uni.User = "用户-7"
	v2 := strings.Index(good, "v2=") + 3
	noK := strings.Replace(good, ",k=2026-12", "", 1)
	return []vectorV2{
		{"valid", both, good, method, target, tok, act, sku, qty, user, true},
		{"old key first, new listed second", oldOnly, sign(signing.Keyring{oldK, newK}, now, req), method, target, tok, act, sku, qty, user, true},
		{"valid unicode user", both, sign(signing.Keyring{newK}, now, uni), method, target, tok, act, sku, qty, "用户-7", true},
		{"upper-case hex", both, good[:v2] + strings.ToUpper(good[v2:]), method, target, tok, act, sku, qty, user, true},
		{"reordered with spaces", both, reorderFields(good), method, target, tok, act, sku, qty, user, true},
		{"other method", both, good, "PUT", target, tok, act, sku, qty, user, false},
		{"other path", both, good, method, "/api/refund?ref=a%20b&x=1", tok, act, sku, qty, user, false},
		{"path decoded", both, good, method, "/api/seckill/act_1001/30021/buy?ref=a b&x=1", tok, act, sku, qty, user, false},
		{"query dropped", both, good, method, "/api/seckill/act_1001/30021/buy", tok, act, sku, qty, user, false},
		{"other sku", both, good, method, target, tok, act, "30022", qty, user, false},
		{"other qty", both, good, method, target, tok, act, sku, "2", user, false},
		{"other user", both, good, method, target, tok, act, sku, qty, "u-43", false},
		{"other token", both, good, method, target, tok + "x", act, sku, qty, user, false},
		{"shop does not know the key", oldOnly, good, method, target, tok, act, sku, qty, user, false},
		{"k changed to another known key", both, strings.Replace(good, "k=2026-12", "k=2026-11", 1), method, target, tok, act, sku, qty, user, false},
		{"wrong secret for the id", "2026-12=other", good, method, target, tok, act, sku, qty, user, false},
		{"no k", both, noK, method, target, tok, act, sku, qty, user, false},
		{"stale", both, sign(signing.Keyring{newK}, now-10*60*1000, req), method, target, tok, act, sku, qty, user, false},
		{"from the future", both, sign(signing.Keyring{newK}, now+10*60*1000, req), method, target, tok, act, sku, qty, user, false},
		{"v1 only", both, signing.Sign(newK.Secret, now, tok, act, sku, qty, user), method, target, tok, act, sku, qty, user, false},
		{"garbage", both, "garbage", method, target, tok, act, sku, qty, user, false},
		{"empty", both, "", method, target, tok, act, sku, qty, user, false},
	}
}

// parseKeys reads a vector's "id=secret,id=secret".
func parseKeys(s string) map[string][]byte {
	m := map[string][]byte{}
	for kv := range strings.SplitSeq(s, ",") {
		id, sec, _ := strings.Cut(kv, "=")
		m[id] = []byte(sec)
	}
	return m
}

// reorderFields reverses a header's fields and puts a space after each comma.
func reorderFields(h string) string {
	f := strings.Split(h, ",")
	slices.Reverse(f)
	return strings.Join(f, ", ")
}

// docBlocks returns the fenced code blocks of docs/verify-signature.md by
// info string ("go" for the v2 snippet, "go v1" for the v1 one).
func docBlocks(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "verify-signature.md"))
	if err != nil {
		t.Fatalf("read doc: %v", err)
	}
	out := map[string]string{}
	lines := strings.Split(string(b), "\n")
	for i := 0; i < len(lines); i++ {
		lang, ok := strings.CutPrefix(lines[i], "```")
		if !ok || lang == "" {
			continue
		}
		var body []string
		for i++; i < len(lines) && lines[i] != "```"; i++ {
			body = append(body, lines[i])
		}
		out[lang] = strings.Join(body, "\n") + "\n"
	}
	return out
}

// TestGoSnippetIsTheDocs: the document's Go blocks are the functions of
// this file, and they reach every vector's verdict (v2 also agrees with the
// package's Keyring.Verify).
func TestGoSnippetIsTheDocs(t *testing.T) {
	src, err := os.ReadFile("snippets_test.go")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	for tag, marker := range map[string]string{"go v1": "snippet", "go": "snippet v2"} {
		begin, end := strings.Index(s, "// BEGIN "+marker+"\n"), strings.Index(s, "\n// END "+marker+"\n")
		code := strings.TrimSpace(s[begin+len("// BEGIN "+marker+"\n"):end]) + "\n"
		if got := docBlocks(t)[tag]; got != code {
			t.Errorf("docs/verify-signature.md %q block differs from the tested function:\n%s\nwant:\n%s", tag, got, code)
		}
	}
	for _, v := range vectors() {
		if got := VerifySeckill([]byte(v.secret), v.header, v.token, v.activity, v.sku, v.qty, v.user, time.Now(), 5*time.Minute); got != v.want {
			t.Errorf("v1 %s: got %v, want %v", v.name, got, v.want)
		}
	}
	for _, v := range vectorsV2() {
		keys := parseKeys(v.keys)
		if got := VerifySeckillV2(keys, v.header, v.method, v.target, v.token, v.activity, v.sku, v.qty, v.user, time.Now(), 5*time.Minute); got != v.want {
			t.Errorf("v2 %s: got %v, want %v", v.name, got, v.want)
		}
		var kr signing.Keyring
		for id, sec := range keys {
			kr = append(kr, signing.Key{ID: id, Secret: sec})
		}
		r := signing.Request{Token: v.token, Activity: v.activity, SKU: v.sku, Qty: v.qty, User: v.user, Method: v.method, Target: v.target}
		if _, err := kr.Verify(v.header, r, time.Now(), 5*time.Minute); (err == nil) != v.want {
			t.Errorf("v2 %s: Keyring.Verify %v, want ok %v", v.name, err, v.want)
		}
	}
}

// lang runs one language's snippet: a program made of the snippet and a
// driver that reads tab-separated vectors on stdin and prints one verdict
// a line.
type lang struct {
	tag, bin, file string
	program        func(snippet string) string
}

// langsV1 drive the v1 snippets: secret, header, token, activity, sku, qty, user.
var langsV1 = []lang{
	{"python v1", "python3", "v.py", func(s string) string {
		return s + "\nimport sys\nfor line in sys.stdin.read().splitlines():\n    f = line.split(\"\\t\")\n    print(str(verify_seckill(f[0].encode(), *f[1:])).lower())\n"
	}},
	{"js v1", "node", "v.js", func(s string) string {
		return s + "\nfor (const l of require(\"fs\").readFileSync(0, \"utf8\").split(\"\\n\").filter(Boolean)) {\n  const f = l.split(\"\\t\");\n  console.log(String(verifySeckill(Buffer.from(f[0], \"utf8\"), ...f.slice(1))));\n}\n"
	}},
	{"php v1", "php", "v.php", func(s string) string {
		return "<?php\n" + s + "\nforeach (explode(\"\\n\", trim(stream_get_contents(STDIN))) as $l) { $f = explode(\"\\t\", $l); echo verify_seckill(...$f) ? \"true\\n\" : \"false\\n\"; }\n"
	}},
	{"java v1", "java", "Main.java", func(s string) string {
		return javaMain(s, `System.out.println(SeckillSignature.verify(f[0].getBytes(StandardCharsets.UTF_8), f[1], f[2], f[3], f[4], f[5], f[6], 300000L));`)
	}},
}

// langsV2 drive the v2 snippets: keys, header, method, target, token,
// activity, sku, qty, user.
var langsV2 = []lang{
	{"python", "python3", "v.py", func(s string) string {
		return s + `
import sys
for line in sys.stdin.read().splitlines():
    f = line.split("\t")
    keys = {i: v.encode() for i, _, v in (kv.partition("=") for kv in f[0].split(","))}
    print(str(verify_seckill_v2(keys, *f[1:])).lower())
`
	}},
	{"js", "node", "v.js", func(s string) string {
		return s + `
for (const l of require("fs").readFileSync(0, "utf8").split("\n").filter(Boolean)) {
  const f = l.split("\t");
  const keys = new Map(f[0].split(",").map((kv) => [kv.slice(0, kv.indexOf("=")), Buffer.from(kv.slice(kv.indexOf("=") + 1), "utf8")]));
  console.log(String(verifySeckillV2(keys, ...f.slice(1))));
}
`
	}},
	{"php", "php", "v.php", func(s string) string {
		return "<?php\n" + s + `
foreach (explode("\n", trim(stream_get_contents(STDIN))) as $l) {
    $f = explode("\t", $l);
    $keys = [];
    foreach (explode(",", array_shift($f)) as $kv) { [$i, $v] = explode("=", $kv, 2); $keys[$i] = $v; }
    echo verify_seckill_v2($keys, ...$f) ? "true\n" : "false\n";
}
`
	}},
	{"java", "java", "Main.java", func(s string) string {
		return javaMain(s, `java.util.Map<String, byte[]> keys = new java.util.HashMap<>();
            for (String kv : f[0].split(",")) { String[] p = kv.split("=", 2); keys.put(p[0], p[1].getBytes(StandardCharsets.UTF_8)); }
            System.out.println(SeckillSignatureV2.verify(keys, f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], 300000L));`)
	}},
}

// javaMain puts a Main class reading vectors right after the snippet's
// imports: single-file source launch runs the first class.
func javaMain(s, body string) string {
	i := strings.Index(s, "final class")
	return s[:i] + `public class Main {
    public static void main(String[] args) throws Exception {
        java.io.BufferedReader r = new java.io.BufferedReader(new java.io.InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String l; (l = r.readLine()) != null;) {
            if (l.isEmpty()) continue;
            String[] f = l.split("\t", -1);
            ` + body + `
        }
    }
}

` + s[i:]
}

// TestSnippetsAgainstSigning runs each other language's v1 and v2 snippets
// from the document against signatures made by internal/signing.
func TestSnippetsAgainstSigning(t *testing.T) {
	var in1, in2 strings.Builder
	var want1, want2 []vectorWant
	for _, v := range vectors() {
		in1.WriteString(strings.Join([]string{v.secret, v.header, v.token, v.activity, v.sku, v.qty, v.user}, "\t") + "\n")
		want1 = append(want1, vectorWant{v.name, v.want})
	}
	for _, v := range vectorsV2() {
		in2.WriteString(strings.Join([]string{v.keys, v.header, v.method, v.target, v.token, v.activity, v.sku, v.qty, v.user}, "\t") + "\n")
		want2 = append(want2, vectorWant{v.name, v.want})
	}
	for _, l := range langsV1 {
		runSnippet(t, l, in1.String(), want1)
	}
	for _, l := range langsV2 {
		runSnippet(t, l, in2.String(), want2)
	}
}

type vectorWant struct {
	name string
	want bool
}

func runSnippet(t *testing.T, l lang, in string, want []vectorWant) {
	t.Run(l.tag, func(t *testing.T) {
		snippet, ok := docBlocks(t)[l.tag]
		if !ok {
			t.Fatalf("no %q block in docs/verify-signature.md", l.tag)
		}
		bin, err := exec.LookPath(l.bin)
		if err != nil {
			t.Skipf("%s not installed", l.bin)
		}
		dir := t.TempDir()
		file := filepath.Join(dir, l.file)
		if err := os.WriteFile(file, []byte(l.program(snippet)), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, file)
		cmd.Stdin = strings.NewReader(in)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", l.bin, err, out)
		}
		got := strings.Fields(string(out))
		if len(got) != len(want) {
			t.Fatalf("%s printed %q, want %d verdicts", l.bin, out, len(want))
		}
		for i, v := range want {
			if got[i] != strconv.FormatBool(v.want) {
				t.Errorf("%s: %s: got %s, want %v", l.tag, v.name, got[i], v.want)
			}
		}
	})
}
