package main

import "github.com/spf13/cobra"

func newMemoryCmd() *cobra.Command {
	return notImplemented("memory", "Build long-term memory partitions")
}
