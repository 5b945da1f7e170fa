package main

import "github.com/spf13/cobra"

func newPrepCmd() *cobra.Command {
	return notImplemented("prep", "Prepare SFT and RL data")
}
