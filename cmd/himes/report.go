package main

import "github.com/spf13/cobra"

func newReportCmd() *cobra.Command {
	return notImplemented("report", "Plots and an HTML report of one or more runs")
}
