package datasets

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/himes-rl/himes/internal/sharedtest"
)

// BenchmarkLoadCANARDTrain loads the 31,526-turn CANARD file (21 MB).
func BenchmarkLoadCANARDTrain(b *testing.B) {
	path := filepath.Join(sharedtest.SharedDir(b), "conversations", "canard_train_rewrites_only.jsonl")
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(st.Size())
	for b.Loop() {
		if _, _, err := LoadContext(b.Context(), path, LoadOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
