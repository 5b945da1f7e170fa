package main

import "github.com/spf13/cobra"

func newEvalCmd() *cobra.Command {
	return notImplemented("eval", "Evaluate rewriters through the full HiMeS pipeline")
}
