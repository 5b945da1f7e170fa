package retrieval

import (
	"context"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// SmallFloat values computed by hand from SmallFloat.java: lengths below
// 40 are exact, 40–47 keep 4 significant bits (step 2), 100 decodes as 96.
func TestSmallFloatLengthNorms(t *testing.T) {
	if numFreeValues != 24 {
		t.Fatalf("NUM_FREE_VALUES = %d, want 255 − longToInt4(MaxInt32) = 255 − 231 = 24", numFreeValues)
	}
	for _, c := range []struct {
		in   int
		b    uint8
		back int
	}{{0, 0, 0}, {1, 1, 1}, {23, 23, 23}, {24, 24, 24}, {31, 31, 31}, {39, 39, 39}, {40, 40, 40}, {41, 40, 40},
		{42, 41, 42}, {100, 57, 96}, {math.MaxInt32, 255, 24 + 15<<27}} {
		if b := intToByte4(c.in); b != c.b {
			t.Errorf("intToByte4(%d) = %d, want %d", c.in, b, c.b)
		}
		if back := byte4ToInt(c.b); back != c.back {
			t.Errorf("byte4ToInt(%d) = %d, want %d", c.b, back, c.back)
		}
	}
	for b := 1; b < 256; b++ { // decoding is strictly increasing
		if byte4ToInt(uint8(b)) <= byte4ToInt(uint8(b-1)) {
			t.Fatalf("byte4ToInt not increasing at %d", b)
		}
	}
}

// One document, one query term: the score is the formula evaluated by hand
// in float32 (N = 2, df = 1, |d| = 3, avgdl = (3+1)/2 = 2).
func TestLuceneScoreByHand(t *testing.T) {
	ix, err := BuildIndex([]string{"a", "b"}, []string{"x y x", "z"}, BM25Params{K1: 0.9, B: 0.4, Scoring: ScoringLucene})
	if err != nil {
		t.Fatal(err)
	}
	idf := float32(math.Log(1 + (2-1+0.5)/(1+0.5))) // ln 2
	k1, b := float32(0.9), float32(0.4)
	norm := float32(1) / (k1 * ((1 - b) + b*3/2))
	want := idf - idf/(1+2*norm)
	hits := ix.Search([]string{"x"}, 10)
	if len(hits) != 1 || hits[0].Doc != 0 || float32(hits[0].Score) != want {
		t.Fatalf("hits %v, want doc 0 with %v", hits, want)
	}
	if got := ix.IDF("x"); float32(got) != idf {
		t.Fatalf("IDF %v, want %v", got, idf)
	}
}

// What distinguishes Lucene's scoring from the exact one: lengths in the
// same one-byte bucket score alike, a repeated query token counts (a boost
// of 2 doubles the score exactly), and ties go to the smaller id.
func TestLuceneScoringInvariants(t *testing.T) {
	words := func(n int, w string) string { return strings.TrimSpace(strings.Repeat(w+" ", n)) }
	ids := []string{"a", "b", "c", "d", "e"}
	texts := []string{
		"x " + words(99, "f"), // 100 tokens → bucket 96
		"x " + words(96, "g"), // 97 → 96
		"y q",
		"y q",
		words(20, "h"),
	}
	for _, scoring := range []string{ScoringExact, ScoringLucene} {
		ix, err := BuildIndex(ids, texts, BM25Params{K1: 0.9, B: 0.4, Scoring: scoring})
		if err != nil {
			t.Fatal(err)
		}
		x := ix.Search([]string{"x"}, 10)
		y := ix.Search([]string{"y"}, 10)
		yy := ix.Search([]string{"y", "y"}, 10)
		if scoring == ScoringLucene {
			if x[0].Score != x[1].Score || x[0].Doc != 0 {
				t.Errorf("lucene: lengths 100 and 97 share a norm byte: want equal scores, a first; got %v", x)
			}
			if y[0].Doc != 2 || y[1].Doc != 3 {
				t.Errorf("lucene: tie must go to the smaller id (c), got %v", y)
			}
			if yy[0].Score != 2*y[0].Score {
				t.Errorf("lucene: query y y = %v, want twice y = %v", yy[0].Score, 2*y[0].Score)
			}
		} else {
			if !(x[0].Score > x[1].Score) || x[0].Doc != 1 {
				t.Errorf("exact: the shorter document must score higher, got %v", x)
			}
			if y[0].Doc != 3 {
				t.Errorf("exact: tie goes to the larger document number (d), got %v", y)
			}
			if yy[0].Score != y[0].Score {
				t.Errorf("exact: a repeated token counts once: %v vs %v", yy, y)
			}
		}
	}
	if _, err := BuildIndex([]string{"a"}, []string{"x"}, BM25Params{K1: 0.9, B: 0.4, Scoring: "lucene8"}); err == nil {
		t.Fatal("unknown scoring accepted")
	}
}

// Expectations from Lucene's TestStandardAnalyzer (StandardTokenizer alone,
// before any filter).
func TestLuceneStandardTokenizerCases(t *testing.T) {
	b255 := strings.Repeat("b", 255)
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"", nil}, {".", nil}, {" ", nil},
		{"testing 1234", []string{"testing", "1234"}},
		{"B2B", []string{"B2B"}}, {"2B", []string{"2B"}},
		{"some-dashed-phrase", []string{"some", "dashed", "phrase"}},
		{"dogs,chase,cats", []string{"dogs", "chase", "cats"}},
		{"ac/dc", []string{"ac", "dc"}},
		{"O'Reilly", []string{"O'Reilly"}}, {"you're", []string{"you're"}}, {"she's", []string{"she's"}},
		{"Jim's", []string{"Jim's"}}, {"don't", []string{"don't"}}, {"O'Reilly's", []string{"O'Reilly's"}},
		{"21.35", []string{"21.35"}}, {"R2D2 C3PO", []string{"R2D2", "C3PO"}},
		{"216.239.63.104", []string{"216.239.63.104"}},
		{"David has 5000 bones", []string{"David", "has", "5000", "bones"}},
		{"foo      bar .  FOO <> BAR", []string{"foo", "bar", "FOO", "BAR"}},
		{"\"QUOTED\" word", []string{"QUOTED", "word"}},
		{"안녕하세요 한글입니다", []string{"안녕하세요", "한글입니다"}},
		{"훈민정음", []string{"훈민정음"}},
		{"𩬅艱鍟䇹愯瀛", []string{"𩬅", "艱", "鍟", "䇹", "愯", "瀛"}},
		{"仮名遣い カタカナ", []string{"仮", "名", "遣", "い", "カタカナ"}},
		{"我是中国人。 １２３４ Ｔｅｓｔｓ ", []string{"我", "是", "中", "国", "人", "１２３４", "Ｔｅｓｔｓ"}},
		{"mo\u0364chte", []string{"mo\u0364chte"}},
		{"ざ", []string{"ざ"}}, {"ザ", []string{"ザ"}}, {"壹\u3099", []string{"壹\u3099"}}, {"아\u3099", []string{"아\u3099"}},
		{"การที่ได้ต้องแสดงว่างานดี. แล้วเธอจะไปไหน? ๑๒๓๔", []string{"การที่ได้ต้องแสดงว่างานดี", "แล้วเธอจะไปไหน", "๑๒๓๔"}},
		{"ສາທາລະນະລັດ ປະຊາທິປະໄຕ ປະຊາຊົນລາວ", []string{"ສາທາລະນະລັດ", "ປະຊາທິປະໄຕ", "ປະຊາຊົນລາວ"}},
		{"Վիքիպեդիայի 13 միլիոն հոդվածները (4,600` հայերեն", []string{"Վիքիպեդիայի", "13", "միլիոն", "հոդվածները", "4,600", "հայերեն"}},
		{"ويكيبيديا\" (بالإنجليزية: Truth in Numbers: The Wikipedia Story)، سيتم إطلاقه في 2008.",
			[]string{"ويكيبيديا", "بالإنجليزية", "Truth", "in", "Numbers", "The", "Wikipedia", "Story", "سيتم", "إطلاقه", "في", "2008"}},
		{"Γράφεται σε συνεργασία από εθελοντές με το λογισμικό wiki, κάτι", []string{"Γράφεται", "σε", "συνεργασία", "από", "εθελοντές", "με", "το", "λογισμικό", "wiki", "κάτι"}},
		{"A:B", []string{"A:B"}}, {"A::B", []string{"A", "B"}}, {"1.2", []string{"1.2"}}, {"A.B", []string{"A.B"}},
		{"1..2", []string{"1", "2"}}, {"A..B", []string{"A", "B"}}, {"1,2", []string{"1,2"}}, {"1,,2", []string{"1", "2"}},
		{"A.:B", []string{"A", "B"}}, {"A:.B", []string{"A", "B"}}, {"1,.2", []string{"1", "2"}}, {"1.,2", []string{"1", "2"}},
		{"A:B_A:B", []string{"A:B_A:B"}}, {"A:B_A::B", []string{"A:B_A", "B"}}, {"1.2_1.2", []string{"1.2_1.2"}},
		{"A.B_A.B", []string{"A.B_A.B"}}, {"1.2_1..2", []string{"1.2_1", "2"}}, {"A.B_A..B", []string{"A.B_A", "B"}},
		{"1,2_1,2", []string{"1,2_1,2"}}, {"1,2_1,,2", []string{"1,2_1", "2"}}, {"C_A.:B", []string{"C_A", "B"}},
		{"C_A:.B", []string{"C_A", "B"}}, {"3_1,.2", []string{"3_1", "2"}}, {"3_1.,2", []string{"3_1", "2"}},
		{"💩 💩💩", []string{"💩", "💩", "💩"}},
		{"👩\u200d❤\ufe0f\u200d👩", []string{"👩\u200d❤\ufe0f\u200d👩"}},
		{"👨🏼\u200d⚕\ufe0f", []string{"👨🏼\u200d⚕\ufe0f"}},
		{"🇺🇸🇺🇸", []string{"🇺🇸", "🇺🇸"}},
		{"#\ufe0f\u20e3", []string{"#\ufe0f\u20e3"}}, {"3\ufe0f\u20e3", []string{"3\ufe0f\u20e3"}},
		{"#\ufe0e", nil}, {"3\ufe0e", []string{"3\ufe0e"}}, {"\u2b55\ufe0e", []string{"\u2b55"}},
		{"\u2b55\ufe0e\u200d\u2b55\ufe0e", []string{"\u2b55", "\u200d\u2b55"}},
		{"🏴\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f", []string{"🏴\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f"}},
		{"poo💩poo", []string{"poo", "💩", "poo"}}, {"💩中國💩", []string{"💩", "中", "國", "💩"}},
		{"x " + b255 + " " + b255 + "b", []string{"x", b255, b255, "b"}},
	} {
		var got []string
		luceneTokens(c.in, func(tok []rune) { got = append(got, string(tok)) })
		if !slices.Equal(got, c.want) {
			t.Errorf("%q: got %q, want %q", c.in, got, c.want)
		}
	}
}

// Porter's own vocabulary examples (the 1980 paper and his C release's
// output); "ties" → "ti" and "dying" → "dy" are where NLTK's extensions
// (hser.PorterStem) differ.
func TestLucenePorter(t *testing.T) {
	pairs := "caresses caress ponies poni ties ti caress caress cats cat feed feed agreed agre plastered plaster " +
		"bled bled motoring motor sing sing conflated conflat troubled troubl sized size hopping hop tanned tan " +
		"falling fall hissing hiss fizzed fizz failing fail filing file happy happi sky sky relational relat " +
		"conditional condit rational ration valenci valenc hesitanci hesit digitizer digit conformabli conform " +
		"radicalli radic differentli differ vileli vile analogousli analog vietnamization vietnam predication predic " +
		"operator oper feudalism feudal decisiveness decis hopefulness hope callousness callous formaliti formal " +
		"sensitiviti sensit sensibiliti sensibl triplicate triplic formative form formalize formal electriciti electr " +
		"electrical electr hopeful hope goodness good revival reviv allowance allow inference infer airliner airlin " +
		"gyroscopic gyroscop adjustable adjust defensible defens irritant irrit replacement replac adjustment adjust " +
		"dependent depend adoption adopt homologou homolog communism commun activate activ angulariti angular " +
		"homologous homolog effective effect bowdlerize bowdler probate probat rate rate cease ceas controll control " +
		"roll roll generalizations gener oscillators oscil dying dy is is a a"
	f := strings.Fields(pairs)
	for i := 0; i < len(f); i += 2 {
		if got, _ := luceneTerm(f[i]); got != f[i+1] && !luceneStopWords[f[i]] {
			t.Errorf("stem(%q) = %q, want %q", f[i], got, f[i+1])
		}
	}
	an, _ := NewAnalyzer(AnalyzerLuceneEnglish)
	got := an.Tokenize("The Fox’s dens, and THE hunters' dogs: it's Jim's")
	// possessive 's only (hunters' loses its quote to the tokenizer); "it" is a stopword
	want := []string{"fox", "den", "hunter", "dog", "jim"}
	if !slices.Equal(got, want) {
		t.Fatalf("analysis %q, want %q", got, want)
	}
}

// A persisted index records its scoring and analyzer: opening it with
// another one in the config is refused with the cause; an index written
// before scoring was recorded counts as exact.
func TestIndexScoringFingerprint(t *testing.T) {
	dir := t.TempDir()
	kb := writeFile(t, "kb.jsonl", `{"id":"p1","title":"","text":"red apples and green pears"}`+"\n"+`{"id":"p2","title":"","text":"the cats sleep"}`+"\n")
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.Scoring, cfg.Analyzer = ScoringLucene, AnalyzerLuceneEnglish
	idx := filepath.Join(dir, "idx")
	meta, err := BuildIndexDir(ctx, cfg, kb, idx)
	if err != nil {
		t.Fatal(err)
	}
	if meta.Params.Scoring != ScoringLucene || meta.Analyzer != analyzerLuceneID {
		t.Fatalf("meta %+v", meta)
	}
	cfg.Index = idx
	p, err := Open(ctx, cfg, kb)
	if err != nil {
		t.Fatal(err)
	}
	if p.Index().luc == nil || p.Index().Analyzer().kind != analyzerLucene {
		t.Fatal("loaded index lost its scoring or analyzer")
	}
	hits, err := p.Search(ctx, "apple", 5)
	if err != nil || len(hits) != 1 || hits[0].PassageID != "p1" {
		t.Fatalf("search %v %v", hits, err)
	}
	other := cfg
	other.Scoring = ScoringExact
	if _, err := Open(ctx, other, kb); err == nil || !strings.Contains(err.Error(), "scoring") {
		t.Fatalf("exact config on a lucene index: %v", err)
	}
	other = cfg
	other.Analyzer = AnalyzerPlain
	if _, err := Open(ctx, other, kb); err == nil || !strings.Contains(err.Error(), "analyzer") {
		t.Fatalf("plain config on a lucene-english index: %v", err)
	}
	if normScoring("") != ScoringExact {
		t.Fatal("an index without a recorded scoring must count as exact")
	}
	bad := DefaultConfig()
	bad.Scoring = "float32"
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "scoring") {
		t.Fatalf("validate: %v", err)
	}
}
