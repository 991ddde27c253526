package signing_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
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

// vector is one signature check: the fields in snippet order and the
// verdict every snippet must reach.
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
	return []vector{
		{"valid", secret, good, tok, act, sku, qty, user, true},
		{"valid unicode user", secret, unicode, tok, act, sku, qty, "用户-7", true},
		{"upper-case hex", secret, upper, tok, act, sku, qty, user, true},
		{"spaces after comma", secret, strings.Replace(good, ",", ", ", 1), tok, act, sku, qty, user, true},
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

// docBlocks returns the fenced code blocks of docs/verify-signature.md by
// language tag.
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

func TestGoSnippetIsTheDocs(t *testing.T) {
	src, err := os.ReadFile("snippets_test.go")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	begin, end := strings.Index(s, "// BEGIN snippet\n"), strings.Index(s, "\n// END snippet")
	code := strings.TrimSpace(s[begin+len("// BEGIN snippet\n"):end]) + "\n"
	if got := docBlocks(t)["go"]; got != code {
		t.Errorf("docs/verify-signature.md Go block differs from the tested function:\n%s\nwant:\n%s", got, code)
	}
	for _, v := range vectors() {
		if got := VerifySeckill([]byte(v.secret), v.header, v.token, v.activity, v.sku, v.qty, v.user, time.Now(), 5*time.Minute); got != v.want {
			t.Errorf("%s: got %v, want %v", v.name, got, v.want)
		}
	}
}

// TestSnippetsAgainstSigning runs each other language's snippet from the
// document against signatures made by internal/signing.
func TestSnippetsAgainstSigning(t *testing.T) {
	blocks := docBlocks(t)
	langs := []struct {
		tag, bin, file string
		program        func(snippet string) string
		args           func(dir, file string) []string
	}{
		{"python", "python3", "v.py", func(s string) string {
			return s + "\nimport sys\nfor line in sys.stdin.read().splitlines():\n    f = line.split(\"\\t\")\n    print(str(verify_seckill(f[0].encode(), *f[1:])).lower())\n"
		}, func(_, f string) []string { return []string{f} }},
		{"js", "node", "v.js", func(s string) string {
			return s + "\nfor (const l of require(\"fs\").readFileSync(0, \"utf8\").split(\"\\n\").filter(Boolean)) {\n  const f = l.split(\"\\t\");\n  console.log(String(verifySeckill(Buffer.from(f[0], \"utf8\"), ...f.slice(1))));\n}\n"
		}, func(_, f string) []string { return []string{f} }},
		{"php", "php", "v.php", func(s string) string {
			return "<?php\n" + s + "\nforeach (explode(\"\\n\", trim(stream_get_contents(STDIN))) as $l) { $f = explode(\"\\t\", $l); echo verify_seckill(...$f) ? \"true\\n\" : \"false\\n\"; }\n"
		}, func(_, f string) []string { return []string{f} }},
		{"java", "java", "Main.java", func(s string) string {
			// Single-file source launch runs the first class: put Main
			// right after the snippet's imports.
			i := strings.Index(s, "final class")
			return s[:i] + `public class Main {
    public static void main(String[] args) throws Exception {
        java.io.BufferedReader r = new java.io.BufferedReader(new java.io.InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String l; (l = r.readLine()) != null;) {
            if (l.isEmpty()) continue;
            String[] f = l.split("\t", -1);
            System.out.println(SeckillSignature.verify(f[0].getBytes(StandardCharsets.UTF_8), f[1], f[2], f[3], f[4], f[5], f[6], 300000L));
        }
    }
}

` + s[i:]
		}, func(_, f string) []string { return []string{f} }},
	}
	vs := vectors()
	var in strings.Builder
	for _, v := range vs {
		in.WriteString(strings.Join([]string{v.secret, v.header, v.token, v.activity, v.sku, v.qty, v.user}, "\t") + "\n")
	}
	for _, l := range langs {
		t.Run(l.tag, func(t *testing.T) {
			snippet, ok := blocks[l.tag]
			if !ok {
				t.Fatalf("no %s block in docs/verify-signature.md", l.tag)
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
			cmd := exec.Command(bin, l.args(dir, file)...)
			cmd.Stdin = strings.NewReader(in.String())
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", l.bin, err, out)
			}
			got := strings.Fields(string(out))
			if len(got) != len(vs) {
				t.Fatalf("%s printed %q, want %d verdicts", l.bin, out, len(vs))
			}
			for i, v := range vs {
				if got[i] != strconv.FormatBool(v.want) {
					t.Errorf("%s: %s: got %s, want %v", l.tag, v.name, got[i], v.want)
				}
			}
		})
	}
}
