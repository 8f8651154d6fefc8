package redact

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/poppyproto/poppy/internal/redact/readtest"
)

const tok = "Qm9vdHN0cmFwLXNlc3Npb24tdG9rZW4tZm9yLXRlc3RzLW9ubHk" // 51 bytes

func TestSecrets(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"a " + tok + " b", "a [redacted] b"},
		{"x" + tok + tok, "x[redacted][redacted]"},
		{"cut: " + tok[:50], "cut: [redacted]"},                  // the prefix a cut left at the end
		{"cut: " + tok[:20] + "… more", "cut: [redacted]… more"}, // before a cut's mark
		{"cut: " + tok[:5] + "…", "cut: [redacted]…"},
		{"cut: " + tok[:3] + "…", "cut: " + tok[:3] + "…"}, // too short to be told from text
		{"tail " + tok[30:] + " x", "tail [redacted] x"},   // a stretch from the middle
		{"mid " + tok[10:18] + " x", "mid [redacted] x"},
		{"mid " + tok[10:17] + " x", "mid " + tok[10:17] + " x"},
		{"nothing here", "nothing here"},
		{"", ""},
	} {
		if got := Secrets(tc.in, []string{"", tok}); got != tc.want {
			t.Errorf("Secrets(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// A short secret is replaced only whole; a JSON-escaped form too.
	if got := Secrets(`a "abc" b`, []string{"abc"}); got != `a "[redacted]" b` {
		t.Errorf("short: %q", got)
	}
	q := `tok<en>&"quoted"-0123456789`
	if got := Secrets(`{"v":"tok\u003cen\u003e\u0026\"quoted\"-0123456789"}`, []string{q}); strings.Contains(got, "quoted") {
		t.Errorf("JSON-escaped: %q", got)
	}
}

// Whatever the text, no stretch of MinFragment bytes of a secret survives,
// nor a prefix of MinCut bytes at the end.
func FuzzSecrets(f *testing.F) {
	f.Add("error: "+tok[:40], 0)
	f.Add(strings.Repeat(tok, 3)+"…", 7)
	f.Fuzz(func(t *testing.T, s string, cut int) {
		if cut < 0 {
			cut = -cut
		}
		s += tok[:cut%len(tok)]
		got := Secrets(s, []string{tok})
		for i := 0; i+MinFragment <= len(tok); i++ {
			if strings.Contains(got, tok[i:i+MinFragment]) {
				t.Fatalf("%q survives in %q", tok[i:i+MinFragment], got)
			}
		}
		for k := MinCut; k <= len(tok); k++ {
			if strings.HasSuffix(got, tok[:k]) {
				t.Fatalf("prefix %q ends %q", tok[:k], got)
			}
		}
	})
}

// escAll writes every byte of s as a \u escape, hex in lower or upper
// case; escSome the bytes whose bit is set in mask (cycled), in mixed case.
func escAll(s string, upper bool) string { return readtest.Escape(s, nil, upper) }

func escSome(s string, mask []byte) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if len(mask) > 0 && mask[i%len(mask)]&(1<<(i%8)) != 0 {
			b.WriteString(readtest.Escape(s[i:i+1], nil, i%3 == 0))
		} else {
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// leaks returns the first stretch of MinFragment bytes of a secret found
// in what a model reads of s, "" if none.
func leaks(s string, secrets ...string) string { return readtest.Leak(s, MaxReadings+1, secrets...) }

// PA-4.8-08: a secret written with the escapes a JSON decoder undoes is
// found in what the decoder (and so the model) reads: \u escapes of every
// character or of some, in either case of hex, \/, a surrogate pair, JSON
// text carried in JSON strings (escaped again, or with its backslashes
// written \u005c), a stretch of one, a prefix of one cut inside an escape.
// What is found is replaced where it stands, and JSON stays JSON. On
// 4653b61 Secrets matched bytes only: every case but the plain one leaked.
func TestPA_4_8_08_SecretsAsJSONReadsThem(t *testing.T) {
	slashy := "c2VjcmV0/d2l0aC+zbGFzaGVz/Lw=="
	emoji := "key-\U0001F600-0123456789-abcdef"
	inner := `{"t":"` + escAll(tok, false) + `"}`
	level2, _ := json.Marshal(map[string]string{"text": inner})
	level3, _ := json.Marshal(map[string]string{"text": string(level2)})
	for _, tc := range []struct{ name, in string }{
		{"plain", `{"a":"` + tok + `"}`},
		{"every byte", `{"a":"` + escAll(tok, false) + `"}`},
		{"every byte, upper-case hex", `{"a":"` + escAll(tok, true) + `"}`},
		{"every other byte", `{"a":"` + escSome(tok, []byte{0x55}) + `"}`},
		{"in a member name", `{"` + escSome(tok, []byte{0x92}) + `":1}`},
		{`\/`, `{"a":"` + strings.ReplaceAll(slashy, "/", `\/`) + `"}`},
		{"surrogate pair", `{"a":"key-\ud83d\ude00-0123456789-abcdef"}`},
		{"surrogate pair, upper-case hex", `{"a":"` + escAll("key-", true) + `\uD83D\uDE00-0123456789-abcdef"}`},
		{"JSON in a string", string(level2)},
		{"JSON in a string in a string", string(level3)},
		{`backslashes as \u005c`, `{"a":"` + strings.ReplaceAll(escAll(tok, false), `\`, `\u005c`) + `"}`},
		{"a stretch", `{"a":"x ` + escAll(tok[10:30], true) + ` y"}`},
		{"an array", `["` + escSome(tok, []byte{0xf0}) + `", 1, "` + escAll(slashy, false) + `"]`},
	} {
		got := Secrets(tc.in, []string{tok, slashy, emoji})
		if l := leaks(got, tok, slashy, emoji); l != "" {
			t.Errorf("%s: %q reached the reader of %s", tc.name, l, got)
		}
		if !strings.Contains(got, Mark) || !json.Valid([]byte(got)) {
			t.Errorf("%s: %s", tc.name, got)
		}
		if leaks(tc.in, tok, slashy, emoji) == "" {
			t.Errorf("%s: the case holds no secret: %s", tc.name, tc.in)
		}
	}
	// A secret whose bytes look like the tail of an escape ("u0041…"),
	// found as it stands: the escape is replaced whole, never left as a
	// lone backslash that would end the JSON.
	odd := "xyz-u0041abcdefgh-12345"
	for _, in := range []string{`{"a":"\u0041abcdefgh-12345"}`, `{"a":"\u0041abcdefgh-12345\u0041abcdefgh-1"}`, `["\u0041abcdefgh-123\u0034\u0035"]`} {
		if got := Secrets(in, []string{odd}); !json.Valid([]byte(got)) || strings.Contains(got, "abcdefgh") {
			t.Errorf("Secrets(%s) = %s", in, got)
		}
	}
	// A prefix cut inside an escape, at the end or before a cut's mark:
	// what stands before the cut is redacted.
	for in, want := range map[string]string{
		`"` + escAll(tok[:20], false) + `\u00`:                         `"[redacted]\u00`,
		`"` + escAll(tok[:6], true) + `\u0…" and more`:                 `"[redacted]\u0…" and more`,
		`"` + escAll(tok[:6], true) + `\…`:                             `"[redacted]\…`,
		`"key-\ud83d`:                                                  `"[redacted]\ud83d`,
		`"key-\ud83d\ude`:                                              `"[redacted]\ud83d\ude`,
		`"` + escAll(tok[:2], false) + tok[2:5] + `\u004`:              `"[redacted]\u004`,
		`{"a":"` + escAll(tok[:30], false) + `\u004…"}`:                `{"a":"[redacted]\u004…"}`,
		`no secret \u0020 here \ud83d\ude00 \/ \\ \x \u12`:             `no secret \u0020 here \ud83d\ude00 \/ \\ \x \u12`,
		`"` + strings.Repeat(`\\`, 1<<MaxReadings) + `u0051` + tok[1:]: `"` + strings.Repeat(`\\`, 1<<MaxReadings) + `u0051[redacted]`,
	} {
		if got := Secrets(in, []string{tok, emoji}); got != want {
			t.Errorf("Secrets(%s)\n = %s\nwant %s", in, got, want)
		}
	}
}

// Whatever escapes hide it, and whatever text stands around it, no
// stretch of MinFragment bytes of a secret reaches what a JSON decoder
// reads of the result, and the result is JSON.
func FuzzSecretsEscaped(f *testing.F) {
	f.Add([]byte{0xff}, false, "")
	f.Add([]byte{0x55, 0x0f}, true, `\u0051m9`)
	f.Add([]byte{0x01}, false, "u0051\u0041"+tok[:9])
	f.Fuzz(func(t *testing.T, mask []byte, nest bool, text string) {
		around, _ := json.Marshal(text)
		in := `{"t":` + string(around) + `,"v":"` + escSome(tok, mask) + `","w":"x"}`
		if nest {
			b, _ := json.Marshal([]string{in, "y"})
			in = string(b)
		}
		got := Secrets(in, []string{tok})
		if l := leaks(got, tok); l != "" {
			t.Fatalf("%q reached the reader of %s", l, got)
		}
		if !json.Valid([]byte(got)) {
			t.Fatalf("not JSON: %s", got)
		}
	})
}

// JWS-shaped strings go whole, cut, and escaped; the cut's mark stays.
func TestJWS(t *testing.T) {
	const jws = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl"
	for in, want := range map[string]string{
		"a " + jws + " b":                         "a [redacted] b",
		"cut eyJhbGciOiJFUzI1NiJ9.eyJzdWIi…":      "cut [redacted]…",
		"cut eyJhbGciOiJFUzI1NiJ9…":               "cut [redacted]…",
		`{"p":"` + escAll(jws, false) + `"}`:      `{"p":"[redacted]"}`,
		`{"p":"` + escSome(jws, []byte{3}) + `"}`: `{"p":"[redacted]"}`,
		`{"p":"` + escAll(jws[:25], true) + `…"}`: `{"p":"[redacted]…"}`,
		"eyJ is not enough":                       "eyJ is not enough",
	} {
		if got := JWS(in); got != want {
			t.Errorf("JWS(%s)\n = %s\nwant %s", in, got, want)
		}
	}
}

// Carries finds a secret whole, as it is or escaped, nested or not.
func TestCarries(t *testing.T) {
	level2, _ := json.Marshal(map[string]string{"text": `{"t":"` + escAll(tok, true) + `"}`})
	for in, want := range map[string]bool{
		"x " + tok:                                true,
		`{"a":"` + escAll(tok, false) + `"}`:      true,
		`{"a":"` + escSome(tok, []byte{9}) + `"}`: true,
		string(level2):                            true,
		`{"a":"` + escAll(tok[:50], false) + `"}`: false, // a part is not the secret
		"nothing": false,
	} {
		if got := Carries(in, tok); got != want {
			t.Errorf("Carries(%.60s…) = %v", in, got)
		}
	}
	if Carries("anything", "") {
		t.Error("an empty secret is carried")
	}
}

// A secret shorter than ShortSecret bytes is carried only as a word of its
// own: a 4-digit PIN inside an ID, an amount or a date is chance, not an
// echo; standing alone, quoted or escaped in JSON, it is one. A long
// secret is carried anywhere, inside an ID too.
func TestCarriesShortSecret(t *testing.T) {
	for in, want := range map[string]bool{
		"order ord_81234 shipped":         false,
		`{"id":"cnv-12345","at":"12:34"}`: false,
		"due 2024-12-31, total 51234.00":  false,
		"Your PIN 1234 was wrong":         true,
		`{"pin":"1234"}`:                  true,
		`{"pin":"\u0031\u0032\u00334"}`:   true,
		`{"text":"{\"pin\":\"1234\"}"}`:   true,
		"1234":                            true,
	} {
		if got := Carries(in, "1234"); got != want {
			t.Errorf("Carries(%q, PIN) = %v, want %v", in, got, want)
		}
	}
	if !Carries("ord_"+tok+"_x", tok) {
		t.Error("a long secret inside an ID is not carried")
	}
}
