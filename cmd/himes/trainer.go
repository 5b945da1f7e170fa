package main

import "github.com/spf13/cobra"

func newTrainerCmd() *cobra.Command {
	return notImplemented("trainer", "Serve or check a LoRA trainer endpoint")
}
