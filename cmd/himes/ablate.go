package main

import "github.com/spf13/cobra"

func newAblateCmd() *cobra.Command {
	return notImplemented("ablate", "Reward ablations: rescore logged rollouts or sweep a grid")
}
