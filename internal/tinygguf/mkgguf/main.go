// Command mkgguf writes the tiny random-weight llama GGUF that the rollout
// integration tests serve with Ollama, and prints the Modelfile to create it:
//
//	go run ./internal/tinygguf/mkgguf -o /tmp/tiny.gguf
//	ollama create tiny -f /tmp/tiny.Modelfile
//
// The model answers gibberish; it is for exercising the Ollama plumbing
// where no real model can be pulled.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/himes-rl/himes/internal/tinygguf"
)

func main() {
	out := flag.String("o", "tiny.gguf", "output GGUF path; the Modelfile is written beside it")
	seed := flag.Uint64("seed", 1, "weight seed")
	flag.Parse()
	if err := tinygguf.Write(*out, tinygguf.Options{Seed: *seed}); err != nil {
		fmt.Fprintln(os.Stderr, "mkgguf:", err)
		os.Exit(1)
	}
	abs, err := filepath.Abs(*out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkgguf:", err)
		os.Exit(1)
	}
	mf := strings.TrimSuffix(*out, ".gguf") + ".Modelfile"
	body := "FROM " + abs + "\nPARAMETER num_thread 1\nPARAMETER num_ctx 512\n" +
		"TEMPLATE \"\"\"{{ range .Messages }}{{ .Content }}\n{{ end }}\"\"\"\n"
	if err := os.WriteFile(mf, []byte(body), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "mkgguf:", err)
		os.Exit(1)
	}
	fmt.Printf("wrote %s and %s; create the model with: ollama create tiny -f %s\n", *out, mf, mf)
}
