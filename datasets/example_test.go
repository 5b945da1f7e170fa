package datasets_test

import (
	"fmt"

	"github.com/himes-rl/himes/datasets"
)

func ExampleRenderer_Render() {
	cfg := datasets.DefaultPromptConfig()
	cfg.System = "Rewrite the last question into a self-contained search query."
	cfg.Instruction = "Reply with the rewrite only."
	r, err := datasets.NewRenderer(cfg)
	if err != nil {
		panic(err)
	}
	p, err := r.Render(datasets.Turn{
		ConvID: "demo", Turn: 2,
		History: []datasets.Message{
			{Role: "user", Text: "Who wrote Dune?"},
			{Role: "assistant", Text: "Frank Herbert, in 1965."},
		},
		Question: "What else did he write?",
	})
	if err != nil {
		panic(err)
	}
	for _, m := range p.Messages {
		fmt.Printf("[%s]\n%s\n", m.Role, m.Text)
	}
	// Output:
	// [system]
	// Rewrite the last question into a self-contained search query.
	// [user]
	// Reply with the rewrite only.
	//
	// Conversation:
	// User: Who wrote Dune?
	// Assistant: Frank Herbert, in 1965.
	//
	// Question: What else did he write?
	// Rewrite:
}
