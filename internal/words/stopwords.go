package words

import "strings"

// Two stopword sets, on purpose: one list of English function words, and a
// longer one for dialogue that also drops conversational filler.

// functionWords are English function words and question words: they carry
// no evidence that a passage answers a question.
const functionWords = `a an the and or but if of at by for with about against between into through during before after
above below to from up down in out on off over under again further then once here there when
where why how what which who whom whose this that these those am is are was were be been being
have has had having do does did doing i me my myself we our ours you your yours he him his she
her hers it its they them their theirs s t can will just don should now would could also than
too very so such no nor not only own same few more most other some any each both all tell know
like get much many`

// dialogueFillers are the further function words, contraction pieces and
// conversational filler (polite phrases, hedges) that the rewriter must not
// pick from a dialogue as retrieval terms.
const dialogueFillers = `as because else even ever gets got herself himself itself let may might must one ourselves
please say says thank thanks themselves until us well while yes yet yourself yourselves ok okay
d ll m re ve doesn didn isn aren wasn weren won wouldn shouldn couldn think want really thing
things something anything sure oh hi hello`

// FunctionWords returns a fresh set of the function words (the extractive
// reader's evidence filter).
func FunctionWords() map[string]bool { return set(functionWords) }

// DialogueStopwords returns a fresh set of the function words plus the
// dialogue fillers (the embedded rewriter never selects these as terms).
func DialogueStopwords() map[string]bool { return set(functionWords, dialogueFillers) }

func set(lists ...string) map[string]bool {
	m := map[string]bool{}
	for _, l := range lists {
		for _, w := range strings.Fields(l) {
			m[w] = true
		}
	}
	return m
}
