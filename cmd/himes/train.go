package main

import "github.com/spf13/cobra"

func newTrainCmd() *cobra.Command {
	return notImplemented("train", "Train the rewriter: optional SFT, then GRPO")
}
