package hser

import (
	"bufio"
	"os"
	"strings"
	"testing"
)

// TestPorterNLTKVocabulary checks every word of testdata/porter_nltk.tsv,
// stemmed by NLTK 3.8's PorterStemmer (see gen_oracle.py).
func TestPorterNLTKVocabulary(t *testing.T) {
	f, err := os.Open("testdata/porter_nltk.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n, bad := 0, 0
	for line := 1; sc.Scan(); line++ {
		if strings.HasPrefix(sc.Text(), "#") {
			continue
		}
		word, want, ok := strings.Cut(sc.Text(), "\t")
		if !ok {
			t.Fatalf("porter_nltk.tsv:%d: no tab", line)
		}
		n++
		if got := PorterStem(word); got != want {
			bad++
			if bad <= 20 {
				t.Errorf("PorterStem(%q) = %q, NLTK gives %q", word, got, want)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 30000 {
		t.Fatalf("only %d words read", n)
	}
	if bad > 0 {
		t.Errorf("%d of %d words differ from NLTK", bad, n)
	}
}

// TestPorterKnownWords are textbook cases (Porter's paper and NLTK's
// extensions), written down by hand.
func TestPorterKnownWords(t *testing.T) {
	for word, want := range map[string]string{
		"skies": "sky", "dying": "die", "lying": "lie", "news": "news",
		"caresses": "caress", "ponies": "poni", "cats": "cat", "feed": "feed",
		"agreed": "agre", "plastered": "plaster", "bled": "bled", "motoring": "motor",
		"sing": "sing", "conflated": "conflat", "hopping": "hop", "falling": "fall",
		"filing": "file", "happy": "happi", "enjoy": "enjoy", "flies": "fli",
		"dies": "die", "spied": "spi", "died": "die", "relational": "relat",
		"generous": "gener", "generously": "gener", // NLTK: -ously→-ous (step 2), -ous (step 4)
		"running": "run", "quickly": "quickli", "dogs": "dog", "runs": "run",
		"geology": "geolog", "controll": "control", "roll": "roll", "cease": "ceas",
		"yyyy": "yyyi", "a": "a", "at": "at", "": "",
	} {
		if got := PorterStem(word); got != want {
			t.Errorf("PorterStem(%q) = %q, want %q", word, got, want)
		}
	}
}

// TestStemMemo runs the NLTK vocabulary through a stemming scorer, each word
// twice, so the second occurrence comes from the memo and the memo fills
// and is cleared several times (33k words, stemMemoMax 4096).
func TestStemMemo(t *testing.T) {
	f, err := os.Open("testdata/porter_nltk.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var text strings.Builder
	var want []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		word, stem, ok := strings.Cut(sc.Text(), "\t")
		if !ok || strings.HasPrefix(word, "#") {
			continue
		}
		text.WriteString(word + " " + word + " ")
		want = append(want, stem, stem)
	}
	got := mustScorer(t, rougeCfg(true)).Tokens(text.String())
	if len(got) != len(want) {
		t.Fatalf("%d tokens, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("token %d: %q, NLTK gives %q", i, got[i], want[i])
		}
	}
}
