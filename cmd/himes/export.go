package main

import "github.com/spf13/cobra"

func newExportCmd() *cobra.Command {
	return notImplemented("export", "Export a trained rewriter (e.g. an Ollama Modelfile)")
}
