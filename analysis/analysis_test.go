package analysis

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestAnalyzerMatchesReadmeTokenization(t *testing.T) {
	got := Analyzer{}.Tokenize("What's the U.S. GDP in 2020? Café-au-lait!")
	want := []string{"what", "s", "the", "u", "s", "gdp", "in", "2020", "caf", "au", "lait"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
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
	an, _ := New(LuceneEnglish)
	got := an.Tokenize("The Fox’s dens, and THE hunters' dogs: it's Jim's")
	// possessive 's only (hunters' loses its quote to the tokenizer); "it" is a stopword
	want := []string{"fox", "den", "hunter", "dog", "jim"}
	if !slices.Equal(got, want) {
		t.Fatalf("analysis %q, want %q", got, want)
	}
}
