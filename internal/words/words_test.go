package words

import (
	"slices"
	"strings"
	"testing"
	"unicode"
)

func TestFieldsAndLowerFields(t *testing.T) {
	cases := []struct {
		in           string
		fields, lows []string
	}{
		{"Who is Ada Lovelace?", []string{"Who", "is", "Ada", "Lovelace"}, []string{"who", "is", "ada", "lovelace"}},
		{"it's 2,000-mile", []string{"it", "s", "2", "000", "mile"}, []string{"it", "s", "2", "000", "mile"}},
		{"Ünïcode ß — 東京", []string{"Ünïcode", "ß", "東京"}, []string{"ünïcode", "ß", "東京"}},
		{"İstanbul", []string{"İstanbul"}, []string{"istanbul"}},
		{"  \t\n", nil, nil},
		{"a\xffb", []string{"a", "b"}, []string{"a", "b"}},
	}
	for _, c := range cases {
		if got := Fields(c.in); !slices.Equal(got, c.fields) {
			t.Errorf("Fields(%q) = %q, want %q", c.in, got, c.fields)
		}
		if got := LowerFields(c.in); !slices.Equal(got, c.lows) {
			t.Errorf("LowerFields(%q) = %q, want %q", c.in, got, c.lows)
		}
	}
}

// LowerFields is documented as Fields lowercased run by run; that holds only
// if lowercasing never turns a letter or digit into a separator or back.
func TestLowercasingKeepsWordRunes(t *testing.T) {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if notWord(r) != notWord(unicode.ToLower(r)) {
			t.Fatalf("%U lowercases to %U across the word boundary", r, unicode.ToLower(r))
		}
	}
}

func TestNormalize(t *testing.T) {
	cases := map[string]string{
		"":                     "",
		"already normal":       "already normal",
		"Hello,  World!":       "hello world",
		" lead and trail ":     "lead and trail",
		"a-b.c\td\ne":          "a b c d e",
		"Café au lait":         "café au lait",
		"no—dash":              "no dash",
		"x":                    "x",
		"!!!":                  "",
		"2,000 Mile-Long Road": "2 000 mile long road",
	}
	for in, want := range cases {
		if got := Normalize(in); got != want {
			t.Errorf("Normalize(%q) = %q, want %q", in, got, want)
		}
		if got, def := Normalize(in), strings.Join(LowerFields(in), " "); got != def {
			t.Errorf("Normalize(%q) = %q, definition gives %q", in, got, def)
		}
	}
}

func TestStopwordSets(t *testing.T) {
	fw, ds := FunctionWords(), DialogueStopwords()
	// The sizes the extractive reader and the embedded rewriter were tuned with.
	if len(fw) != 126 || len(ds) != 184 {
		t.Fatalf("sizes %d, %d; want 126, 184", len(fw), len(ds))
	}
	for w := range fw {
		if !ds[w] {
			t.Errorf("function word %q missing from the dialogue set", w)
		}
	}
	for _, w := range []string{"the", "what", "tell", "many"} {
		if !fw[w] {
			t.Errorf("%q should be a function word", w)
		}
	}
	for _, w := range []string{"thanks", "okay", "something", "ll"} {
		if fw[w] || !ds[w] {
			t.Errorf("%q should be dialogue filler only", w)
		}
	}
	fw["zebra"] = true // each call returns a fresh set
	if FunctionWords()["zebra"] {
		t.Error("FunctionWords shares its map between calls")
	}
}
