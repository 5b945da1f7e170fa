package embedding

import "testing"

// Hand-counted word pieces over a small vocabulary in Ollama's converted
// form ("▁" = word-initial, bare = "##" continuation, [..] = special).
func TestWordPieceTruncate(t *testing.T) {
	w := newWordPieceFromGGUF([]string{"[UNK]", "[CLS]", "\u2581un", "aff", "able", "\u2581cafe", "\u2581,", "\u2581!", "\u2581the", "\u2581東"})
	cases := []struct {
		text string
		max  int
		want string
		n    int
	}{
		// un ##aff ##able , cafe !  = 3 + 1 + 1 + 1
		{"Unaffable, café!", 10, "Unaffable, café!", 6},
		{"Unaffable, café!", 5, "Unaffable, café", 5},
		{"Unaffable, café!", 4, "Unaffable, ", 4},
		{"Unaffable, café!", 3, "Unaffable", 3},
		// a word is never split: its pieces fit whole or the text ends before it
		{"Unaffable, café!", 2, "", 0},
		// no piece matches "xyz": one [UNK]; CJK characters are words of their own
		{"the xyz 東東", 10, "the xyz 東東", 4},
		{"the xyz 東東", 3, "the xyz 東", 3},
		// control characters vanish, whitespace of any kind separates
		{"the\u200bthe\u00a0the", 10, "the\u200bthe\u00a0the", 2},
	}
	for _, c := range cases {
		got, n := w.prepare(c.text, c.max)
		if got != c.want || n != c.n {
			t.Errorf("prepare(%q, %d) = %q, %d; want %q, %d", c.text, c.max, got, n, c.want, c.n)
		}
	}
	// more than 100 characters: one [UNK] whatever the vocabulary
	long := make([]byte, 101)
	for i := range long {
		long[i] = 'a'
	}
	if n := w.pieces(string(long)); n != 1 {
		t.Errorf("101-character word: %d pieces, want 1", n)
	}
	// ... sent to Ollama as the literal [UNK] (one piece), and cut like any word
	text := "the " + string(long) + " the"
	if got, n := w.prepare(text, 10); got != "the [UNK] the" || n != 3 {
		t.Errorf("prepare(long word) = %q, %d; want \"the [UNK] the\", 3", got, n)
	}
	if got, n := w.prepare(text, 1); got != "the " || n != 1 {
		t.Errorf("prepare(long word, 1) = %q, %d; want \"the \", 1", got, n)
	}
}
