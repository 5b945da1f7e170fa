package main

import "github.com/spf13/cobra"

func newScoreCmd() *cobra.Command {
	return notImplemented("score", "Score predictions with the HSER reward (JSONL in, JSONL out)")
}
