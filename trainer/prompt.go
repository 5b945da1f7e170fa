package trainer

import "github.com/himes-rl/himes/datasets"

// PromptFromRendered carries a prompt rendered by datasets.Renderer in every
// form the protocol knows (text, chat messages, structured dialogue), so each
// endpoint reads the form it needs.
func PromptFromRendered(id string, p datasets.Prompt) Prompt {
	msgs := make([]Message, len(p.Messages))
	for i, m := range p.Messages {
		msgs[i] = Message{Role: m.Role, Content: m.Text}
	}
	hist := make([]Message, len(p.History))
	for i, m := range p.History {
		hist[i] = Message{Role: m.Role, Content: m.Text}
	}
	var mems []DialogueMemory
	for _, m := range p.Memories {
		mems = append(mems, DialogueMemory{ID: m.ID, Text: m.Text, Score: m.Score})
	}
	return Prompt{ID: id, Text: p.Text, Messages: msgs,
		Dialogue: &Dialogue{History: hist, Question: p.Question, Memories: mems}}
}
